// Prefix caching through the server (issue 23, KV-CACHE.md §5): what the usage of each API reports
// as cached equals what the hit rule predicts from the token ids, cache_salt isolates tenants,
// POST /reset_prefix_cache empties the cache, and a completion served from a full hit has the
// logprobs of the same completion computed from scratch. Clients: the official `openai` and
// `@anthropic-ai/sdk` packages.
//
// The expected hits come from HitPredictor below, written from the rule as the issue states it,
// independently of the server code, and fed only token ids (prompt ids from vLLM's
// `return_token_ids` or from POST /tokenize, generated ids from `return_token_ids`):
//   * blocks are 128 tokens; a finished request j with a prompt of L_j tokens and out_j generated
//     tokens has KV for its first C_j = L_j + out_j - 1 tokens (the last generated token is never
//     fed back), and every full block of it stays cached (the KV budget is far larger than these
//     tests need, so nothing is evicted);
//   * DeepSeek models (window W = config.json `sliding_window`): request j leaves SWA state
//     snapshots at B_j = floor((L_j - 1) / 128) * 128 (if > 0) and at D_j, the largest multiple of
//     128 in [L_j + 1, L_j + out_j - 1] (if any). A new prompt of L tokens may hit at most
//     cap = L - (W + 6) tokens; with lcp the longest common prefix of its ids with the first C_j
//     ids of any earlier request j of the same cache_salt, L1 = floor(min(lcp, cap) / 128) * 128;
//     L1 <= 0 -> 0 cached; a snapshot at L1 (from a j with lcp_j >= L1) -> L1 cached; otherwise
//     L1 - 128 cached (a bounded replay recomputes the last block of the hit);
//   * Llama (no window state): plain block reuse, at most L - 1 tokens, no snapshots.
// A request for prompt logprobs (echo + logprobs, prompt_logprobs) never hits: the engine
// recomputes its whole prompt to return every position's logprob. Every server runs with
// DEEPINFER_BATCH_INVARIANT=1, so "from a full hit" and "from scratch" are comparable bit for bit.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { STORIES, demoModel, goldenOnceUponATime, haveStories, metric, postRaw, startServer } from './helpers.mjs';

const BLOCK = 128;
process.env.DEEPINFER_BATCH_INVARIANT = '1';

function commonPrefix(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i += 1;
  return i;
}

// The hit rule over the history of finished requests (see the file comment).
class HitPredictor {
  // `window`: the model's sliding window (DeepSeek), or null for a model without window state.
  constructor(window) {
    this.window = window;
    this.history = [];  // { salt, tokens (prompt + generated), C, snapshots }
  }

  reset() { this.history = []; }

  // The cached tokens a new prompt `ids` should report, and how: 'none', 'snapshot' (the hit ends
  // at a snapshot, or a Llama block hit) or 'replay'.
  predict(ids, salt = '') {
    const L = ids.length;
    const cap = this.window === null ? L - 1 : L - (this.window + 6);
    const earlier = this.history.filter((h) => h.salt === salt);
    const lcps = earlier.map((h) => commonPrefix(ids, h.tokens.slice(0, h.C)));
    const lcp = Math.max(0, ...lcps);
    const L1 = Math.floor(Math.min(lcp, cap) / BLOCK) * BLOCK;
    if (L1 <= 0) return { cached: 0, kind: 'none', L1 };
    if (this.window === null) return { cached: L1, kind: 'snapshot', L1 };
    const snapshot = earlier.some((h, i) => lcps[i] >= L1 && h.snapshots.includes(L1));
    return snapshot ? { cached: L1, kind: 'snapshot', L1 } : { cached: L1 - BLOCK, kind: 'replay', L1 };
  }

  // Records a finished request: its prompt ids and the ids it generated (only the count matters
  // when the next prompts cannot share generated tokens, e.g. max_tokens 1).
  finished(promptIds, generatedIds, salt = '') {
    const L = promptIds.length;
    const out = generatedIds.length;
    const snapshots = [];
    if (this.window !== null) {
      const B = Math.floor((L - 1) / BLOCK) * BLOCK;
      if (B > 0) snapshots.push(B);
      const D = Math.floor((L + out - 1) / BLOCK) * BLOCK;
      if (D >= L + 1) snapshots.push(D);
    }
    this.history.push({ salt, tokens: [...promptIds, ...generatedIds], C: L + out - 1, snapshots });
  }
}

// A deterministic text of `n` sentences (tokens grow about 16 per sentence on DeepSeek's
// tokenizer).
function sentences(topic, n) {
  const out = [];
  for (let i = 1; i <= n; i++) {
    out.push(`${topic} note ${i}: keep answers short, name the source, and say when you are unsure.`);
  }
  return out.join(' ');
}

// The conversation of the 4-turn tests. With the demo tokenizer the prompts are about 558, 853, 872
// and 1067 tokens, so with ~8-token replies turn 2 hits at a snapshot (turn 1's B), turn 3's cap
// falls between snapshots (a replay) and turn 4 hits at a snapshot again; the assertions use the
// predictor, these lengths only make the test exercise both kinds.
const SYSTEM = `You are a careful assistant for a library help desk. ${sentences('Policy', 25)}`;
const USERS = [
  `Question one. ${sentences('Detail', 2)}`,
  `Question two. ${sentences('Context', 14)}`,
  'Thanks. And the opening hours?',
  `Question four. ${sentences('Background', 9)}`,
];

async function resetCache(server, headers = {}) {
  const r = await postRaw(`${server.url}/reset_prefix_cache`, '', headers);
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { status: 'ok' });
}

async function tokenize(server, body) {
  const r = await postRaw(`${server.url}/tokenize`, JSON.stringify(body));
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

function checkChatUsage(usage, promptLen, cached) {
  assert.equal(usage.prompt_tokens, promptLen);
  assert.equal(usage.prompt_cache_hit_tokens + usage.prompt_cache_miss_tokens, usage.prompt_tokens);
  assert.equal(usage.prompt_cache_hit_tokens, usage.prompt_tokens_details.cached_tokens);
  assert.equal(usage.prompt_tokens_details.cached_tokens, cached);
}

const dir = demoModel();
const skipDemo = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';

describe('prefix cache on the demo preset (DeepSeek-V4 layout, window from config.json)', { skip: skipDemo }, () => {
  let server;
  let client;
  let anthropic;
  let window;
  // Every generation request's usage on this server, for the /metrics check.
  const served = { prompt: 0, cached: 0 };
  const count = (prompt, cached) => { served.prompt += prompt; served.cached += cached; };

  before(async () => {
    window = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')).sliding_window;
    assert.ok(Number.isInteger(window) && window > 0, 'config.json has sliding_window');
    server = await startServer(dir, ['--served-model-name', 'demo']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0, 'graceful shutdown exits 0');
  });

  test('openai client, 4-turn chat (thinking off, greedy): each turn reports the predicted hit', async () => {
    await resetCache(server);
    const predictor = new HitPredictor(window);
    const messages = [{ role: 'system', content: SYSTEM }];
    const kinds = [];
    for (let turn = 0; turn < 4; turn++) {
      messages.push({ role: 'user', content: USERS[turn] });
      const r = await client.chat.completions.create({
        model: 'demo', messages, max_tokens: 8, temperature: 0,
        thinking: { type: 'disabled' }, return_token_ids: true,
      });
      const ids = r.prompt_token_ids;
      const generated = r.choices[0].token_ids;
      assert.ok(Array.isArray(ids) && Array.isArray(generated), 'return_token_ids gives the ids');
      assert.equal(generated.length, r.usage.completion_tokens);
      if (turn === 0) {
        assert.ok(ids.length >= 300 + 10, `the system prompt is at least 300 tokens (${ids.length})`);
        // /tokenize encodes the same conversation to the same ids.
        assert.deepEqual(await tokenize(server, { messages, thinking: { type: 'disabled' } }), ids);
      }
      const want = predictor.predict(ids);
      kinds.push(want.kind);
      count(ids.length, r.usage.prompt_tokens_details.cached_tokens);
      assert.equal(r.usage.prompt_tokens, ids.length);
      assert.equal(r.usage.prompt_cache_hit_tokens + r.usage.prompt_cache_miss_tokens, r.usage.prompt_tokens);
      if (turn === 0) assert.equal(want.cached, 0);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, want.cached,
                   `turn ${turn + 1}: prompt ${ids.length} tokens, predicted ${want.kind} hit at L1 ${want.L1}`);
      checkChatUsage(r.usage, ids.length, want.cached);
      predictor.finished(ids, generated);
      messages.push({ role: 'assistant', content: r.choices[0].message.content ?? '' });
    }
    assert.ok(kinds.includes('snapshot') && kinds.includes('replay'),
              `the turns exercise a snapshot hit and a replay (${kinds})`);
  });

  test('streamed chat: the usage chunk and every chunk\'s token_ids agree with the rule', async () => {
    await resetCache(server);
    const predictor = new HitPredictor(window);
    const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USERS[1] }];
    for (let round = 0; round < 2; round++) {
      const stream = await client.chat.completions.create({
        model: 'demo', messages, max_tokens: 6, temperature: 0, thinking: { type: 'disabled' },
        return_token_ids: true, stream: true, stream_options: { include_usage: true },
      });
      let prompt = null;
      const generated = [];
      let usage = null;
      for await (const chunk of stream) {
        if (chunk.prompt_token_ids) {
          assert.equal(prompt, null, 'prompt_token_ids comes once');
          prompt = chunk.prompt_token_ids;
        }
        for (const c of chunk.choices) generated.push(...(c.token_ids ?? []));
        if (chunk.usage) usage = chunk.usage;
      }
      assert.ok(prompt && usage);
      assert.equal(generated.length, usage.completion_tokens);
      const want = predictor.predict(prompt);
      count(prompt.length, usage.prompt_tokens_details.cached_tokens);
      checkChatUsage(usage, prompt.length, want.cached);
      if (round === 1) assert.ok(want.cached > 0, 'the repeat hits');
      predictor.finished(prompt, generated);
    }
  });

  test('@anthropic-ai/sdk, 4-turn conversation on /v1/messages: cache_read_input_tokens as predicted', async () => {
    await resetCache(server);
    const predictor = new HitPredictor(window);
    const messages = [];
    const kinds = [];
    for (let turn = 0; turn < 4; turn++) {
      messages.push({ role: 'user', content: USERS[turn] });
      // The prompt ids: POST /tokenize with the same conversation in Chat form (thinking off).
      // That Messages encodes it to the same prompt is checked through the counts below.
      const ids = await tokenize(server, { messages: [{ role: 'system', content: SYSTEM }, ...messages],
                                           thinking: { type: 'disabled' } });
      const req = { model: 'demo', system: SYSTEM, messages, max_tokens: 1, temperature: 0,
                    thinking: { type: 'disabled' } };
      const counted = await anthropic.messages.countTokens({ model: 'demo', system: SYSTEM, messages,
                                                            thinking: { type: 'disabled' } });
      assert.equal(counted.input_tokens, ids.length, 'count_tokens counts the /tokenize prompt');
      // Turns 2 and 4 stream (the SDK's MessageStream accumulates message_start and message_delta
      // usage into the final message).
      const m = turn % 2 === 0 ? await anthropic.messages.create(req)
        : await anthropic.messages.stream(req).finalMessage();
      const want = predictor.predict(ids);
      kinds.push(want.kind);
      count(ids.length, m.usage.cache_read_input_tokens);
      // Anthropic's accounting: input_tokens are the prompt tokens not read from the cache.
      assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens,
                   ids.length);
      assert.equal(m.usage.cache_creation_input_tokens, 0);
      assert.equal(m.usage.output_tokens, 1);
      assert.equal(m.usage.cache_read_input_tokens, want.cached,
                   `turn ${turn + 1}: prompt ${ids.length} tokens, predicted ${want.kind} hit at L1 ${want.L1}`);
      // max_tokens 1: C_j = L_j, so the generated token's id does not matter.
      predictor.finished(ids, [-1]);
      const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      messages.push({ role: 'assistant', content: text.trim() === '' ? 'ok' : text });
    }
    assert.ok(kinds.includes('snapshot') && kinds.includes('replay'), `both kinds (${kinds})`);
  });

  test('cache_salt: tenants never hit each other; the same salt does (chat, responses, messages)', async () => {
    await resetCache(server);
    const predictor = new HitPredictor(window);
    const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USERS[0] }];
    const ids = await tokenize(server, { messages, thinking: { type: 'disabled' } });
    const chat = async (salt) => {
      const r = await client.chat.completions.create({
        model: 'demo', messages, max_tokens: 1, temperature: 0, thinking: { type: 'disabled' },
        return_token_ids: true, ...(salt ? { cache_salt: salt } : {}),
      });
      assert.deepEqual(r.prompt_token_ids, ids);
      const want = predictor.predict(ids, salt);
      count(ids.length, r.usage.prompt_tokens_details.cached_tokens);
      checkChatUsage(r.usage, ids.length, want.cached);
      predictor.finished(ids, r.choices[0].token_ids, salt);
      return want.cached;
    };
    assert.equal(await chat('tenant-a'), 0);
    assert.equal(await chat('tenant-b'), 0, 'tenant b does not see tenant a\'s blocks');
    assert.ok(await chat('tenant-a') > 0, 'tenant a hits its own blocks');
    assert.equal(await chat(''), 0, 'unsalted requests do not see salted blocks');

    // Responses (instructions + input = the same system + user prompt) as tenant b.
    const resp = await client.responses.create({
      model: 'demo', instructions: SYSTEM, input: USERS[0], max_output_tokens: 1, temperature: 0,
      reasoning: { effort: 'none' }, cache_salt: 'tenant-b',
    });
    assert.equal(resp.usage.input_tokens, ids.length);
    let want = predictor.predict(ids, 'tenant-b');
    assert.ok(want.cached > 0);
    count(ids.length, resp.usage.input_tokens_details.cached_tokens);
    assert.equal(resp.usage.input_tokens_details.cached_tokens, want.cached);
    predictor.finished(ids, [-1], 'tenant-b');

    // Messages as tenant c: nothing; then again: its own hit.
    for (let i = 0; i < 2; i++) {
      const m = await anthropic.messages.create({
        model: 'demo', system: SYSTEM, messages: [{ role: 'user', content: USERS[0] }], max_tokens: 1,
        temperature: 0, thinking: { type: 'disabled' }, cache_salt: 'tenant-c',
      });
      want = predictor.predict(ids, 'tenant-c');
      if (i === 0) assert.equal(want.cached, 0);
      count(ids.length, m.usage.cache_read_input_tokens);
      assert.equal(m.usage.cache_read_input_tokens, want.cached);
      predictor.finished(ids, [-1], 'tenant-c');
    }

    // A bad salt is a 400 naming the field, in each API's shape.
    await assert.rejects(client.chat.completions.create({ model: 'demo', messages, max_tokens: 1, cache_salt: 7 }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === 'cache_salt');
    await assert.rejects(client.responses.create({ model: 'demo', input: 'x', cache_salt: '' }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === 'cache_salt');
    await assert.rejects(anthropic.messages.create({ model: 'demo', max_tokens: 1, messages: [{ role: 'user', content: 'x' }],
                                                    cache_salt: ['a'] }),
                         (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error' &&
                           /^cache_salt: /.test(e.error?.error?.message));

    // After POST /reset_prefix_cache nothing hits, whatever the salt.
    await resetCache(server);
    predictor.reset();
    assert.equal(await chat('tenant-a'), 0, 'the reset emptied the cache');
  });

  test('a completion served from a full hit at a snapshot has the logprobs of the same request from scratch', async () => {
    // Token-id prompts: P2 extends P1 by 200 ids, so P2's cap reaches P1's snapshot boundary.
    let x = 12345;
    const nextId = () => { x = (x * 1103515245 + 12345) % 2147483648; return 1000 + (x % 90000); };
    const p1 = Array.from({ length: 300 }, nextId);
    const p2 = [...p1, ...Array.from({ length: 200 }, nextId)];
    const predictor = new HitPredictor(window);
    const run = async (prompt, maxTokens) => {
      const r = await client.completions.create({ model: 'demo', prompt, max_tokens: maxTokens, temperature: 0,
                                                  logprobs: 5, return_token_ids: true });
      const c = r.choices[0];
      assert.deepEqual(c.prompt_token_ids, prompt);
      assert.equal(c.token_ids.length, r.usage.completion_tokens);
      const want = predictor.predict(prompt);
      count(prompt.length, r.usage.prompt_tokens_details.cached_tokens);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, want.cached);
      predictor.finished(prompt, c.token_ids);
      return { r, want };
    };
    await resetCache(server);
    await run(p1, 1);
    const hit = await run(p2, 8);
    assert.equal(hit.want.kind, 'snapshot');
    assert.ok(hit.want.cached >= 256, `a full hit with a snapshot (${hit.want.cached})`);
    await resetCache(server);
    predictor.reset();
    const scratch = await run(p2, 8);
    assert.equal(scratch.want.cached, 0);
    assert.deepEqual(hit.r.choices[0].token_ids, scratch.r.choices[0].token_ids);
    assert.deepEqual(hit.r.choices[0].logprobs, scratch.r.choices[0].logprobs, 'logprobs bit for bit');
  });

  test('/metrics: prefix-cache counters in tokens under our names and vLLM\'s', async () => {
    const hits = await metric(server.url, 'vllm:prefix_cache_hits_total', 'model_name="demo"');
    const queries = await metric(server.url, 'vllm:prefix_cache_queries_total', 'model_name="demo"');
    assert.equal(hits, served.cached, 'hits = the cached tokens every usage reported');
    assert.equal(queries, served.prompt, 'queries = the prompt tokens of every request');
    assert.equal(await metric(server.url, 'deepinfer_prefix_cache_hits_total'), hits);
    assert.equal(await metric(server.url, 'deepinfer_prefix_cache_queries_total'), queries);
    assert.ok(await metric(server.url, 'deepinfer_prefix_cache_replays_total') >= 1, 'the chat tests replayed');
    assert.ok(await metric(server.url, 'deepinfer_prefix_cache_replayed_tokens_total') >= BLOCK);
    assert.ok(await metric(server.url, 'deepinfer_prefix_cache_blocks') > 0);
    assert.ok(await metric(server.url, 'deepinfer_prefix_cache_snapshots') > 0);
    assert.ok(await metric(server.url, 'deepinfer_prefix_cache_snapshot_bytes') > 0);
    assert.notEqual(await metric(server.url, 'deepinfer_prefix_cache_evicted_blocks_total'), undefined);
    assert.notEqual(await metric(server.url, 'deepinfer_prefix_cache_snapshot_evictions_total'), undefined);
    await resetCache(server);
    assert.equal(await metric(server.url, 'deepinfer_prefix_cache_blocks'), 0, 'nothing cached after a reset');
    assert.equal(await metric(server.url, 'deepinfer_prefix_cache_snapshots'), 0);
    assert.equal(await metric(server.url, 'deepinfer_prefix_cache_snapshot_bytes'), 0);
    assert.equal(await metric(server.url, 'vllm:prefix_cache_hits_total', 'model_name="demo"'), hits,
                 'a reset keeps the counters');
  });
});

describe('prefix cache on stories260K (Llama: block reuse, no window state)', { skip: haveStories() ? false : 'shared/models/stories260K is absent' }, () => {
  let server;
  let client;
  let prompt;

  before(async () => {
    server = await startServer(STORIES, ['--served-model-name', 'stories260K', '--api-key', 'k']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'k', maxRetries: 0 });
    const g = goldenOnceUponATime();
    prompt = Array(5).fill(g.text).join(' ');  // about 340 tokens, within the 512-token context
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0, 'graceful shutdown exits 0');
  });

  const auth = { authorization: 'Bearer k' };

  test('POST /reset_prefix_cache needs the API key like /v1; other methods are 405', async () => {
    assert.equal((await postRaw(`${server.url}/reset_prefix_cache`, '')).status, 401);
    const get = await fetch(`${server.url}/reset_prefix_cache`, { headers: auth });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST, OPTIONS');
    assert.equal((await get.json()).error.code, 'method_not_allowed');
    await resetCache(server, auth);
  });

  test('greedy logprobs and echoed prompt logprobs from a full hit equal those from scratch', async () => {
    const predictor = new HitPredictor(null);
    const run = async (extra = {}) => {
      const r = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 16, temperature: 0,
                                                  logprobs: 3, return_token_ids: true, ...extra });
      const c = r.choices[0];
      // A request for prompt logprobs (echo + logprobs) needs every prompt position's logits, so
      // the engine recomputes its whole prompt instead of hitting (its blocks are cached after).
      const want = extra.echo ? { cached: 0 } : predictor.predict(c.prompt_token_ids);
      assert.equal(r.usage.prompt_tokens, c.prompt_token_ids.length);
      assert.equal(r.usage.prompt_cache_hit_tokens + r.usage.prompt_cache_miss_tokens, r.usage.prompt_tokens);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, want.cached);
      predictor.finished(c.prompt_token_ids, c.token_ids);
      return { c, want };
    };
    await resetCache(server, auth);
    const scratch = await run();
    assert.ok(scratch.c.prompt_token_ids.length >= 300, `prompt of ${scratch.c.prompt_token_ids.length} tokens`);
    assert.equal(scratch.want.cached, 0);
    const hit = await run();
    assert.equal(hit.want.cached, Math.floor((scratch.c.prompt_token_ids.length - 1) / BLOCK) * BLOCK);
    assert.equal(hit.c.text, scratch.c.text);
    assert.deepEqual(hit.c.logprobs, scratch.c.logprobs, 'logprobs bit for bit');
    // Prompt logprobs while the prompt is cached (echo + logprobs) are never stale: equal to the
    // ones of the same request on an empty cache; and the cache still serves the next request.
    const echoCached = await run({ echo: true });
    assert.ok((await run()).want.cached > 0, 'the blocks are still cached');
    await resetCache(server, auth);
    predictor.reset();
    const echoScratch = await run({ echo: true });
    assert.deepEqual(echoCached.c.logprobs, echoScratch.c.logprobs, 'echoed prompt logprobs bit for bit');
    assert.equal(echoCached.c.logprobs.token_logprobs.length, scratch.c.prompt_token_ids.length + 16);
  });

  test('cache_salt on completions: another salt misses, the same salt hits, a reset empties it', async () => {
    await resetCache(server, auth);
    const predictor = new HitPredictor(null);
    const run = async (salt) => {
      const r = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 4, temperature: 0,
                                                  return_token_ids: true, ...(salt ? { cache_salt: salt } : {}) });
      const c = r.choices[0];
      const want = predictor.predict(c.prompt_token_ids, salt);
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, want.cached);
      predictor.finished(c.prompt_token_ids, c.token_ids, salt);
      return want.cached;
    };
    assert.equal(await run('a'), 0);
    assert.equal(await run('b'), 0);
    assert.equal(await run(''), 0);
    assert.ok(await run('a') > 0);
    assert.ok(await run('b') > 0);
    await resetCache(server, auth);
    predictor.reset();
    assert.equal(await run('a'), 0);
  });
});
