// DSpark speculative decoding through the server (issues #26, #27): `deepinfer serve
// --speculative-method dspark` on the DeepSeek-V4.1 `demo` preset (random weights, one DSpark
// stage, block 5; run with DEEPINFER_E2E_DEMO_ARCH=deepseek_v41, see CMakeLists.txt), driven by
// the official openai client. The oracle is a server with speculation off on the same checkpoint:
// greedy text, finish_reason and usage must be equal, streamed and not, for the default length
// (the block) and k = 2; so must a concurrent batch mixing requests with and without speculation
// and seeded sampled requests (sample-and-compare). Random weights make DSpark's drafts mostly
// wrong: this checks that verification, rollback and the DSpark context rings stay lossless, and
// that drafts were verified (metrics), not that they help.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { DEMO_ARCH, demoModel, metric, startServer, completionOutcome, completionOutcomeStream } from './helpers.mjs';

const dir = DEMO_ARCH === 'deepseek_v41' ? demoModel() : null;
const skip = DEMO_ARCH !== 'deepseek_v41'
  ? 'needs DEEPINFER_E2E_DEMO_ARCH=deepseek_v41 (ctest -R e2e_v41_speculative_dspark)'
  : (dir ? false : 'the V4.1 demo checkpoint could not be generated (deepinfer make-test-model)');
const MODEL = 'demo';
const DRAFTS = 'deepinfer_spec_decode_num_draft_tokens_total';

const complete = (client, req) => completionOutcome(client, MODEL, req);
const completeStream = (client, req) => completionOutcomeStream(client, MODEL, req);

const PROMPTS = ['Hello world', 'The capital of France is', 'def fib(n):'];

describe('DSpark speculative decoding on the DeepSeek-V4.1 demo preset', { skip }, () => {
  let off;
  let block;
  let two;
  before(async () => {
    off = await startServer(dir, ['--served-model-name', MODEL]);
    block = await startServer(dir, ['--served-model-name', MODEL, '--speculative-method', 'dspark']);
    two = await startServer(dir, ['--served-model-name', MODEL, '--speculative-method', 'dspark',
                                  '--num-speculative-tokens', '2']);
  });
  after(async () => {
    for (const s of [off, block, two]) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });
  const clientOf = (s) => new OpenAI({ baseURL: s.baseURL, apiKey: 'unused', maxRetries: 0 });

  test('greedy text, finish reason and usage equal speculation off, streamed and not', async () => {
    const c0 = clientOf(off);
    const cases = [];
    for (const prompt of PROMPTS) cases.push({ prompt, max_tokens: 12, temperature: 0 });
    cases.push({ prompt: PROMPTS[0], max_tokens: 1, temperature: 0 });
    cases.push({ prompt: PROMPTS[1], max_tokens: 3, temperature: 0 });
    for (const req of cases) {
      const want = await complete(c0, req);
      for (const s of [block, two]) {
        assert.deepEqual(await complete(clientOf(s), req), want, JSON.stringify(req));
        assert.deepEqual(await completeStream(clientOf(s), req), want, `stream ${JSON.stringify(req)}`);
      }
    }
    assert.ok((await metric(block.url, DRAFTS)) > 0, 'DSpark drafted (default length)');
    assert.ok((await metric(two.url, DRAFTS)) > 0, 'DSpark drafted (k = 2)');
    assert.equal(await metric(off.url, DRAFTS), 0);
  });

  test('a concurrent batch mixing speculative and non-speculative, greedy and seeded requests', async () => {
    const reqs = [];
    PROMPTS.forEach((prompt, i) => {
      reqs.push({ prompt, max_tokens: 10, temperature: 0, speculative: i % 2 === 0 });
      reqs.push({ prompt, max_tokens: 10, temperature: 0.9, top_p: 0.9, seed: 11 + i, speculative: i % 2 === 1 });
    });
    const c0 = clientOf(off);
    const want = [];
    for (const r of reqs) want.push(await complete(c0, r));
    const c1 = clientOf(block);
    const before = await metric(block.url, DRAFTS);
    assert.deepEqual(await Promise.all(reqs.map((r) => complete(c1, r))), want);
    assert.deepEqual(await Promise.all(reqs.map((r) => completeStream(c1, r))), want);
    assert.ok((await metric(block.url, DRAFTS)) > before);
  });
});
