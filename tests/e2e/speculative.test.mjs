// Speculative decoding through the server (issue #26), stories260K with n-gram prompt lookup,
// through the official openai client. The oracle is the independent numpy golden
// (once_upon_a_time.json) for greedy text, and a server with speculation off for everything
// else: stop strings at many offsets (spelled across tokens and steps), max_tokens at every small
// value, seeded sampling and concurrent requests must give the same text, finish_reason and
// completion_tokens, streamed and not.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, goldenOnceUponATime, haveStories, metric, startServer, completionOutcome, completionOutcomeStream } from './helpers.mjs';

const skip = haveStories() ? false : 'shared/models/stories260K is absent';
const MODEL = 'stories260K';

const complete = (client, req) => completionOutcome(client, MODEL, req);
const completeStream = (client, req) => completionOutcomeStream(client, MODEL, req);

describe('speculative decoding (n-gram) on stories260K', { skip }, () => {
  let off;
  const spec = [];
  let golden;
  before(async () => {
    golden = goldenOnceUponATime();
    off = await startServer(STORIES, ['--served-model-name', MODEL]);
    for (const k of [1, 2, 3, 4, 5]) {
      spec.push(await startServer(STORIES, ['--served-model-name', MODEL, '--speculative-method', 'ngram',
                                            '--num-speculative-tokens', String(k),
                                            '--prompt-lookup-min', '1', '--prompt-lookup-max', '4']));
    }
    // Confidence-scheduled variable-length verification (profiled cost table, measured-benefit
    // gate): every test below also runs against it.
    spec.push(await startServer(STORIES, ['--served-model-name', MODEL, '--speculative-method', 'ngram',
                                          '--num-speculative-tokens', '5', '--prompt-lookup-min', '1',
                                          '--prompt-lookup-max', '4', '--speculative-varlen', 'async']));
  });
  after(async () => {
    for (const s of [off, ...spec]) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });
  const clientOf = (s) => new OpenAI({ baseURL: s.baseURL, apiKey: 'unused', maxRetries: 0 });

  test('greedy text equals the golden file for k = 1..5, and drafts were accepted', async () => {
    const expected = golden.text.slice(golden.prompt.length);
    for (const s of spec) {
      const req = { prompt: golden.prompt, max_tokens: golden.max_new_tokens, temperature: 0 };
      const r = await complete(clientOf(s), req);
      assert.equal(r.text, expected);
      assert.equal(r.finish, 'length');
      assert.equal(r.usage.completion, golden.max_new_tokens);
      assert.deepEqual(await completeStream(clientOf(s), req), r);
      // Fixed-length servers verify every draft, so some are accepted; the variable-length one
      // may verify none (its planner follows measured step times), checked below.
      if (s === spec[spec.length - 1]) continue;
      assert.ok((await metric(s.url, 'deepinfer_spec_decode_num_accepted_tokens_total')) > 0);
      assert.ok((await metric(s.url, 'vllm:spec_decode_num_draft_tokens_total')) > 0);
    }
    assert.equal(await metric(off.url, 'deepinfer_spec_decode_num_draft_tokens_total'), 0);
    // The variable-length server planned its steps (with variable lengths, or full blocks where
    // the gate measured them faster).
    const varlen = spec[spec.length - 1];
    const planned = await metric(varlen.url, 'deepinfer_spec_decode_varlen_steps_total');
    const gated = await metric(varlen.url, 'deepinfer_spec_decode_varlen_benefit_gated_steps_total');
    assert.ok(planned + gated > 0, `planned ${planned} gated ${gated}`);
  });

  test('stop strings at many offsets and max_tokens 1..12: same text, finish and token count', async () => {
    const expected = golden.text.slice(golden.prompt.length);
    const cases = [];
    for (let at = 1; at < Math.min(expected.length - 8, 120); at += 7) {
      cases.push({ stop: [expected.slice(at, at + 2 + (at % 5))] });
    }
    for (let m = 1; m <= 12; m++) cases.push({ max_tokens: m });
    const c0 = clientOf(off);
    for (const extra of cases) {
      const req = { prompt: golden.prompt, max_tokens: 80, temperature: 0, ...extra };
      const want = await complete(c0, req);
      for (const s of spec) {
        const c = clientOf(s);
        assert.deepEqual(await complete(c, req), want, JSON.stringify(extra));
        assert.deepEqual(await completeStream(c, req), want, `stream ${JSON.stringify(extra)}`);
      }
    }
  });

  test('seeded sampling, n = 2, and concurrent requests equal speculation off', async () => {
    const prompts = ['Once upon a time', 'Lily and Ben', 'The dog ran to the park and', 'One day'];
    const reqs = [];
    for (const p of prompts) {
      reqs.push({ prompt: p, max_tokens: 60, temperature: 0 });
      reqs.push({ prompt: p, max_tokens: 60, temperature: 0.8, top_p: 0.95, seed: 7 });
    }
    const c0 = clientOf(off);
    const want = [];
    for (const r of reqs) want.push(await complete(c0, r));
    const nReq = { prompt: 'Once upon a time', max_tokens: 40, temperature: 1, seed: 3, n: 2 };
    const wantN = (await c0.completions.create({ model: MODEL, ...nReq })).choices.map((c) => c.text);
    for (const s of spec) {
      const c = clientOf(s);
      const got = await Promise.all(reqs.map((r) => complete(c, r)));  // one batch
      assert.deepEqual(got, want);
      const gotN = (await c.completions.create({ model: MODEL, ...nReq })).choices.map((x) => x.text);
      assert.deepEqual(gotN, wantN);
    }
  });
});
