// MTP speculative decoding through the server (issue #26): `deepinfer serve --speculative-method
// mtp` with every draft length k = 1..5 (the MTP block chained on its own output) on the DeepSeek-V4 `demo`
// preset (random weights, one MTP block, num_nextn_predict_layers = 1), driven by the official
// openai client. The oracle is a server with
// speculation off on the same checkpoint: greedy text, finish_reason and usage must be equal,
// streamed and not; so must a concurrent batch that mixes requests with and without speculation
// (the `speculative: false` extension field) and seeded sampled requests. Random weights make the
// MTP block's drafts mostly wrong, so this checks that verification, rollback and the MTP ring
// stay lossless, not that drafts help; the metrics must show drafts were verified.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { demoModel, metric, startServer, completionOutcome, completionOutcomeStream } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const MODEL = 'demo';

const complete = (client, req) => completionOutcome(client, MODEL, req);
const completeStream = (client, req) => completionOutcomeStream(client, MODEL, req);

const PROMPTS = ['Hello world', 'The capital of France is', 'def fib(n):'];

describe('MTP speculative decoding on the DeepSeek-V4 demo preset', { skip }, () => {
  let off;
  const mtps = [];
  before(async () => {
    off = await startServer(dir, ['--served-model-name', MODEL]);
    for (const k of [1, 2, 3, 4, 5]) {
      mtps.push(await startServer(dir, ['--served-model-name', MODEL, '--speculative-method', 'mtp',
                                        '--num-speculative-tokens', String(k)]));
    }
  });
  after(async () => {
    for (const s of [off, ...mtps]) {
      const r = await s?.stop();
      assert.equal(r?.code, 0, 'graceful shutdown exits 0');
    }
  });
  const clientOf = (s) => new OpenAI({ baseURL: s.baseURL, apiKey: 'unused', maxRetries: 0 });

  test('greedy text, finish reason and usage equal speculation off, streamed and not', async () => {
    const c0 = clientOf(off);
    for (const mtp of mtps) {
      const c1 = clientOf(mtp);
      const cases = [];
      for (const prompt of PROMPTS) cases.push({ prompt, max_tokens: 12, temperature: 0 });
      cases.push({ prompt: PROMPTS[0], max_tokens: 1, temperature: 0 });
      cases.push({ prompt: PROMPTS[1], max_tokens: 2, temperature: 0 });
      for (const req of cases) {
        const want = await complete(c0, req);
        assert.deepEqual(await complete(c1, req), want, JSON.stringify(req));
        assert.deepEqual(await completeStream(c1, req), want, `stream ${JSON.stringify(req)}`);
      }
      // A stop string cut from the off server's own text, spelled across tokens.
      const base = await complete(c0, { prompt: PROMPTS[2], max_tokens: 12, temperature: 0 });
      for (const at of [1, 6]) {
        if (base.text.length < at + 3) continue;
        const req = { prompt: PROMPTS[2], max_tokens: 12, temperature: 0, stop: [base.text.slice(at, at + 3)] };
        const want = await complete(c0, req);
        assert.equal(want.finish, 'stop');
        assert.deepEqual(await complete(c1, req), want, JSON.stringify(req));
        assert.deepEqual(await completeStream(c1, req), want, `stream ${JSON.stringify(req)}`);
      }
      assert.ok((await metric(mtp.url, 'deepinfer_spec_decode_num_draft_tokens_total')) > 0, 'MTP drafted');
    }
    assert.equal(await metric(off.url, 'deepinfer_spec_decode_num_draft_tokens_total'), 0);
    // k = 3 chains: more drafts per verify than k = 1.
    const drafts = (s) => metric(s.url, 'deepinfer_spec_decode_num_draft_tokens_total');
    const verifies = (s) => metric(s.url, 'deepinfer_spec_decode_num_drafts_total');
    assert.ok((await drafts(mtps[2])) / (await verifies(mtps[2])) > 1, 'k = 3 drafts chains');
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
    for (const mtp of mtps) {
      const c1 = clientOf(mtp);
      const before = await metric(mtp.url, 'deepinfer_spec_decode_num_draft_tokens_total');
      const got = await Promise.all(reqs.map((r) => complete(c1, r)));
      assert.deepEqual(got, want);
      const gotStream = await Promise.all(reqs.map((r) => completeStream(c1, r)));
      assert.deepEqual(gotStream, want);
      assert.ok((await metric(mtp.url, 'deepinfer_spec_decode_num_draft_tokens_total')) > before);
      // A request that opts out is never drafted for.
      const optOut = await metric(mtp.url, 'deepinfer_spec_decode_num_draft_tokens_total');
      await complete(c1, { prompt: PROMPTS[2], max_tokens: 6, temperature: 0, speculative: false });
      assert.equal(await metric(mtp.url, 'deepinfer_spec_decode_num_draft_tokens_total'), optOut);
    }
  });

  test('a seeded sampled request equals speculation off, n = 2 too', async () => {
    const c0 = clientOf(off);
    const req = { prompt: PROMPTS[1], max_tokens: 16, temperature: 1, seed: 5 };
    const want = await complete(c0, req);
    const nReq = { model: MODEL, prompt: PROMPTS[0], max_tokens: 12, temperature: 1, seed: 9, n: 2 };
    const wantN = (await c0.completions.create(nReq)).choices.map((c) => [c.text, c.finish_reason]);
    for (const mtp of mtps) {
      const c1 = clientOf(mtp);
      assert.deepEqual(await complete(c1, req), want);
      assert.deepEqual(await completeStream(c1, req), want);
      const gotN = (await c1.completions.create(nReq)).choices.map((c) => [c.text, c.finish_reason]);
      assert.deepEqual(gotN, wantN);
    }
  });

  test('a bad speculative field is a 400 naming it', async () => {
    const r = await fetch(`${mtps[0].baseURL}/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 1, speculative: 'yes' }) });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.param, 'speculative');
  });
});
