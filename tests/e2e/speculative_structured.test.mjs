// Structured output with speculative decoding through the server (issue #26 acceptance
// "Structured output with speculation"), DeepSeek-V4 demo preset, thinking off: 100 seeded
// temperature-1 chat requests, each with its own json_schema generated here (objects of 1-4
// properties: bounded integers, enums, booleans, short strings, small enum arrays), on a server
// with n-gram drafts and one with MTP drafts, jump-forward off. Every answer must validate with
// ajv (an independent validator) and equal, text and finish reason and usage, the answer of a
// server with speculation off: drafts the grammar rejects are never accepted, and the grammar
// matcher is rolled back exactly over rejected drafts. Then validity with jump-forward on.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import { demoModel, metric, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const MODEL = 'demo';
const COUNT = 100;

// mulberry32: a small seeded PRNG, so the schemas are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['red', 'green', 'blue', 'north', 'south', 'yes', 'no', 'alpha', 'beta'];

function schemaFor(i) {
  const r = rng(1000 + i);
  const pick = (n) => Math.floor(r() * n);
  const properties = {};
  const n = 1 + pick(4);
  for (let p = 0; p < n; p++) {
    const name = `${['id', 'kind', 'flag', 'label', 'tags'][pick(5)]}_${p}`;
    switch (pick(5)) {
      case 0: {
        const lo = pick(50);
        properties[name] = { type: 'integer', minimum: lo, maximum: lo + pick(200) };
        break;
      }
      case 1:
        properties[name] = { enum: WORDS.slice(pick(4), 5 + pick(4)) };
        break;
      case 2:
        properties[name] = { type: 'boolean' };
        break;
      case 3:
        properties[name] = { type: 'string', maxLength: 1 + pick(6) };
        break;
      default:
        properties[name] = { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 1 + pick(3) };
    }
  }
  return { type: 'object', properties, required: Object.keys(properties), additionalProperties: false };
}

function request(i) {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: `Record ${i} as JSON.` }],
    max_tokens: 64, temperature: 1, top_p: 0.95, seed: 500 + i,
    thinking: { type: 'disabled' },
    response_format: { type: 'json_schema', json_schema: { name: `record_${i}`, schema: schemaFor(i) } },
  };
}

function summary(r) {
  const c = r.choices[0];
  return { text: c.message.content, finish: c.finish_reason, completion: r.usage.completion_tokens };
}

// The answers to requests `ids` (default 0..COUNT-1), all in flight at once.
async function runAll(server, ids = Array.from({ length: COUNT }, (_, i) => i)) {
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  return Promise.all(ids.map(async (i) => summary(await client.chat.completions.create(request(i)))));
}

function checkValid(name, i, got) {
  const validate = new Ajv2020({ strict: false }).compile(schemaFor(i));
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(got.text); }, `${name} ${i}: not JSON: ${got.text}`);
  assert.ok(validate(value), `${name} ${i}: ${got.text} ${JSON.stringify(validate.errors)}`);
  assert.equal(got.finish, 'stop', `${name} ${i}`);
}

describe('structured output with speculation on the demo preset', { skip }, () => {
  const servers = {};
  before(async () => {
    const base = ['--served-model-name', MODEL, '--max-num-seqs', '100', '--no-jump-forward'];
    servers.off = await startServer(dir, base);
    servers.ngram = await startServer(dir, [...base, '--speculative-method', 'ngram',
                                            '--num-speculative-tokens', '3', '--prompt-lookup-min', '1',
                                            '--prompt-lookup-max', '5']);
    servers.mtp = await startServer(dir, [...base, '--speculative-method', 'mtp']);
  });
  after(async () => {
    for (const s of Object.values(servers)) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });

  test('100 seeded schema requests validate and equal speculation off (n-gram, MTP)', async () => {
    const want = await runAll(servers.off);
    for (let i = 0; i < COUNT; i++) checkValid('off', i, want[i]);
    for (const name of ['ngram', 'mtp']) {
      const got = await runAll(servers[name]);
      for (let i = 0; i < COUNT; i++) {
        checkValid(name, i, got[i]);
        assert.deepEqual(got[i], want[i], `${name} request ${i} differs from speculation off`);
      }
      assert.ok((await metric(servers[name].url, 'deepinfer_spec_decode_num_draft_tokens_total')) > 0,
                `${name} drafted`);
    }
  });
});

// With jump-forward (the default) on top, requests 0..23 and two that once diverged on an AVX2
// machine (56, 77: a verify block that reached grammar-forced text sampled the model's own
// tokenization of it; model_runner now ends the accepted block where the grammar forces bytes,
// as a non-speculative step does): every answer validates and equals jump-forward alone.
describe('structured output with speculation and jump-forward on the demo preset', { skip }, () => {
  const JF = [...Array.from({ length: 24 }, (_, i) => i), 56, 77];
  const servers = {};
  let want;
  let got;
  before(async () => {
    const base = ['--served-model-name', MODEL, '--max-num-seqs', '100'];
    servers.off = await startServer(dir, base);
    servers.ngram = await startServer(dir, [...base, '--speculative-method', 'ngram',
                                            '--num-speculative-tokens', '3', '--prompt-lookup-min', '1',
                                            '--prompt-lookup-max', '5']);
    want = await runAll(servers.off, JF);
    got = await runAll(servers.ngram, JF);
  });
  after(async () => {
    for (const s of Object.values(servers)) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });

  test('seeded schema requests validate with and without speculation', () => {
    JF.forEach((id, i) => {
      checkValid('off', id, want[i]);
      checkValid('ngram', id, got[i]);
    });
  });

  test('text, finish reason and token counts equal jump-forward alone', () => {
    JF.forEach((id, i) => assert.deepEqual(got[i], want[i], `request ${id}`));
  });
});
