// Finishing inside accepted blocks through the server (issue #26 acceptance "Finishing"), with the
// scripted testing drafter (`--speculative-method scripted --speculative-script FILE`,
// src/engine/speculative/script_drafter.h). The script is built inside the test from a server with
// speculation off: each prompt's ids followed by that server's own greedy continuation
// (return_token_ids), so drafts are accepted, with chosen positions corrupted (`A/B`) so blocks
// start and end at different offsets per prompt. Then a stop token id, a stop string (cut from
// the text, so often spelled across several tokens) and max_tokens are placed at every position
// of the continuation: finish_reason, text and completion_tokens must equal the off server's
// answer, streamed and not. Models: stories260K (k = 3, 5) and the DeepSeek-V4 demo preset
// (k = 3; exercises the V4 window-ring and compressor rollback through the server).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { STORIES, demoModel, haveStories, metric, startServer, completionOutcome, completionOutcomeStream } from './helpers.mjs';

const clientOf = (s) => new OpenAI({ baseURL: s.baseURL, apiKey: 'unused', maxRetries: 0 });

const complete = completionOutcome;
const completeStream = completionOutcomeStream;

// Runs `fn` over `items` with at most `width` in flight.
async function pool(items, width, fn) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
}

// The off server's greedy continuation of each prompt: { prompt, ids, tokens, text }.
async function continuations(server, model, prompts, maxTokens) {
  const out = [];
  for (const prompt of prompts) {
    const r = await clientOf(server).completions.create({
      model, prompt, max_tokens: maxTokens, temperature: 0, return_token_ids: true });
    const c = r.choices[0];
    assert.ok(Array.isArray(c.prompt_token_ids) && Array.isArray(c.token_ids), 'return_token_ids');
    assert.equal(c.token_ids.length, r.usage.completion_tokens);
    out.push({ prompt, ids: c.prompt_token_ids, tokens: c.token_ids, text: c.text });
  }
  return out;
}

// One script line: prompt ids then the continuation, positions where corrupt(i) drafted wrong.
function scriptLine(cont, corrupt) {
  const words = cont.ids.map(String);
  cont.tokens.forEach((t, i) => {
    words.push(corrupt(i) ? `${t}/${t > 3 ? t - 1 : t + 1}` : String(t));
  });
  return words.join(' ');
}

function writeScript(name, lines) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-script-'));
  const file = path.join(dir, `${name}.txt`);
  fs.writeFileSync(file, `# drafts for ${name}: prompt ids, then the greedy continuation\n${lines.join('\n')}\n`);
  return file;
}

// Every case of one continuation: a stop token at every position, max_tokens at every length,
// stop strings at many character offsets.
function finishCases(cont, maxTokens, stringStep) {
  const cases = [];
  const base = { prompt: cont.prompt, max_tokens: maxTokens, temperature: 0 };
  cont.tokens.forEach((t, i) => {
    cases.push({ ...base, stop_token_ids: [t], at: `stop token at ${i}` });
    cases.push({ ...base, max_tokens: i + 1, at: `max_tokens ${i + 1}` });
  });
  for (let at = 1; at + 2 < cont.text.length; at += stringStep) {
    cases.push({ ...base, stop: [cont.text.slice(at, at + 1 + (at % 4))], at: `stop string at char ${at}` });
  }
  return cases;
}

// Checks every case on every speculative server against the off server, streamed and not.
async function checkCases(off, specs, model, cases) {
  await pool(cases, 6, async ({ at, ...req }) => {
    const want = await complete(clientOf(off), model, req);
    for (const s of specs) {
      const c = clientOf(s);
      assert.deepEqual(await complete(c, model, req), want, at);
      assert.deepEqual(await completeStream(c, model, req), want, `stream, ${at}`);
    }
  });
}

const PATTERNS = [() => false, (i) => i % 3 === 2, (i) => i % 4 === 0, (i) => i === 7];

describe('scripted drafts on stories260K: stop token, stop string, max_tokens at every block position',
         { skip: haveStories() ? false : 'shared/models/stories260K is absent' }, () => {
  const MODEL = 'stories260K';
  const N = 40;
  let off;
  const specs = [];
  let conts;
  before(async () => {
    off = await startServer(STORIES, ['--served-model-name', MODEL]);
    conts = await continuations(off, MODEL, ['Once upon a time', 'Lily and Ben', 'One day, a little',
                                             'The cat sat'], N);
    const script = writeScript(MODEL, conts.map((c, i) => scriptLine(c, PATTERNS[i])));
    for (const k of [3, 5]) {
      specs.push(await startServer(STORIES, ['--served-model-name', MODEL, '--speculative-method', 'scripted',
                                             '--speculative-script', script,
                                             '--num-speculative-tokens', String(k)]));
    }
  });
  after(async () => {
    for (const s of [off, ...specs]) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });

  test('the script makes the drafts accepted: the same text as off, with whole blocks accepted', async () => {
    for (const s of specs) {
      for (const cont of conts) {
        const req = { prompt: cont.prompt, max_tokens: N, temperature: 0 };
        assert.deepEqual(await complete(clientOf(s), MODEL, req),
                         await complete(clientOf(off), MODEL, req));
      }
    }
    const k5 = specs[1];
    assert.ok((await metric(k5.url, 'deepinfer_spec_decode_num_accepted_tokens_per_pos_total',
                            'position="4"')) > 0, 'fifth drafts accepted');
  });

  for (let p = 0; p < PATTERNS.length; p++) {
    test(`prompt ${p}: finish reason, text and token counts equal speculation off`, async () => {
      await checkCases(off, specs, MODEL, finishCases(conts[p], N, 3));
    });
  }
});

const demo = demoModel();
describe('scripted drafts on the DeepSeek-V4 demo preset: stop token and max_tokens at every position',
         { skip: demo ? false : 'the demo checkpoint could not be generated' }, () => {
  const MODEL = 'demo';
  const N = 10;
  let off;
  let spec;
  let conts;
  before(async () => {
    off = await startServer(demo, ['--served-model-name', MODEL]);
    conts = await continuations(off, MODEL, ['Hello world', 'def fib(n):'], N);
    const script = writeScript(MODEL, [scriptLine(conts[0], PATTERNS[0]), scriptLine(conts[1], PATTERNS[1])]);
    spec = await startServer(demo, ['--served-model-name', MODEL, '--speculative-method', 'scripted',
                                    '--speculative-script', script, '--num-speculative-tokens', '3']);
  });
  after(async () => {
    for (const s of [off, spec]) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });

  test('finish reason, text and token counts equal speculation off', async () => {
    const cases = [...finishCases(conts[0], N, 7), ...finishCases(conts[1], N, 7)];
    await checkCases(off, [spec], MODEL, cases);
    assert.ok((await metric(spec.url, 'deepinfer_spec_decode_num_accepted_tokens_per_pos_total',
                            'position="2"')) > 0, 'third drafts accepted');
  });
});
