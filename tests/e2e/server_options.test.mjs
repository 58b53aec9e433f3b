// Issue 22 §5: server options users bring from vLLM — several --served-model-name aliases,
// X-Request-Id, CORS (--allowed-origins ...), and /metrics under vLLM's series names with
// model_name and per-route counts for /v1/responses and /v1/messages. stories260K (fast; it has
// no chat template, which does not matter for these checks). The official openai client reads
// the X-Request-Id header itself (`withResponse().request_id`); CORS is checked with fetch and
// Origin headers, as a browser sends them.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, haveStories, postRaw, startServer } from './helpers.mjs';

const skip = haveStories() ? false : 'shared/models/stories260K is absent';

// Every `# TYPE name kind` line and every sample line of a Prometheus text exposition.
function parseMetrics(text) {
  const types = new Map();
  const samples = [];
  for (const line of text.split('\n')) {
    let m = line.match(/^# TYPE (\S+) (\S+)$/);
    if (m) { types.set(m[1], m[2]); continue; }
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/);
    if (m) samples.push({ name: m[1], labels: m[2] ?? '', value: Number(m[3]) });
  }
  return { types, samples };
}

function sample(metrics, name, labelPart = '') {
  return metrics.samples.find((s) => s.name === name && s.labels.includes(labelPart))?.value;
}

describe('server options', { skip }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(STORIES, [
      '--served-model-name', 'main', 'alias-1', 'alias-2',
      '--allowed-origins', '["http://app.example:3000"]', '--api-key', 'k']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => { assert.equal((await server.stop()).code, 0); });

  test('every alias is accepted, the first name is reported, /v1/models lists them all', async () => {
    for (const name of ['main', 'alias-1', 'alias-2']) {
      const r = await client.completions.create({ model: name, prompt: 'Once', max_tokens: 2 });
      assert.equal(r.model, 'main');
    }
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['main', 'alias-1', 'alias-2']);
    assert.equal((await client.models.retrieve('alias-2')).id, 'alias-2');
    await assert.rejects(client.completions.create({ model: 'other', prompt: 'Once', max_tokens: 1 }),
      (e) => e instanceof OpenAI.NotFoundError && /`main`, `alias-1`, `alias-2`/.test(e.message));
  });

  test("X-Request-Id: the client's id is echoed, names the completion and its log line", async () => {
    const { data, request_id } = await client.completions
      .create({ model: 'main', prompt: 'Once', max_tokens: 2 }, { headers: { 'X-Request-Id': 'trace-7f3a' } })
      .withResponse();
    assert.equal(request_id, 'trace-7f3a');
    assert.equal(data.id, 'cmpl-trace-7f3a');
    // Streaming responses carry it too.
    const stream = await client.completions
      .create({ model: 'main', prompt: 'Once', max_tokens: 2, stream: true },
              { headers: { 'X-Request-Id': 'trace-stream' } })
      .withResponse();
    assert.equal(stream.request_id, 'trace-stream');
    for await (const chunk of stream.data) assert.equal(chunk.id, 'cmpl-trace-stream');
    // Without one the server makes one up, and the response id carries the same.
    const fresh = await client.completions.create({ model: 'main', prompt: 'Once', max_tokens: 2 }).withResponse();
    assert.match(fresh.request_id, /^[0-9a-f]{32}$/);
    assert.equal(fresh.data.id, `cmpl-${fresh.request_id}`);
    // Errors echo it as well; an unusable one is a 400.
    const bad = await postRaw(`${server.baseURL}/completions`, '{', { authorization: 'Bearer k', 'x-request-id': 'err-1' });
    assert.equal(bad.status, 400);
    const r = await fetch(`${server.baseURL}/completions`, {
      method: 'POST', headers: { 'x-request-id': 'has space', authorization: 'Bearer k' }, body: '{}' });
    assert.equal(r.status, 400);
    assert.match(await r.text(), /X-Request-Id must be/);
    for (let i = 0; i < 50 && !/request cmpl-trace-7f3a completions status=200/.test(server.logs()); i++) {
      await new Promise((res) => setTimeout(res, 20));
    }
    assert.match(server.logs(), /request cmpl-trace-7f3a completions status=200/);
  });

  test('CORS: preflight before authentication, headers on responses, other origins refused', async () => {
    const origin = 'http://app.example:3000';
    const pre = await fetch(`${server.baseURL}/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST',
                 'access-control-request-headers': 'authorization, content-type' } });
    assert.equal(pre.status, 200);
    assert.equal(pre.headers.get('access-control-allow-origin'), origin);
    assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
    assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
    const r = await fetch(`${server.baseURL}/completions`, {
      method: 'POST', headers: { origin, authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'main', prompt: 'Once', max_tokens: 2 }) });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), origin);
    assert.match(r.headers.get('access-control-expose-headers'), /X-Request-Id/i);
    // A browser can read the 401 of a request without the key too.
    const unauth = await fetch(`${server.baseURL}/models`, { headers: { origin } });
    assert.equal(unauth.status, 401);
    assert.equal(unauth.headers.get('access-control-allow-origin'), origin);
    const evil = await fetch(`${server.baseURL}/completions`, {
      method: 'OPTIONS', headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' } });
    assert.equal(evil.status, 400);
    assert.equal(evil.headers.get('access-control-allow-origin'), null);
    const evilGet = await fetch(`${server.url}/health`, { headers: { origin: 'http://evil.example' } });
    assert.equal(evilGet.headers.get('access-control-allow-origin'), null);
  });

  test("/metrics: vLLM's series with their types and model_name; /v1/responses and /v1/messages are routes", async () => {
    await client.completions.create({ model: 'main', prompt: 'Once upon a time', max_tokens: 6 });
    // stories260K has no chat template: these are 400s, counted under their own routes.
    for (const path of ['/responses', '/messages', '/messages/count_tokens']) {
      await postRaw(`${server.baseURL}${path}`, '{"model":"main","input":"hi","messages":[]}',
                    { authorization: 'Bearer k' });
    }
    const m = parseMetrics(await (await fetch(`${server.url}/metrics`)).text());
    const expected = {
      'vllm:num_requests_running': 'gauge', 'vllm:num_requests_waiting': 'gauge',
      'vllm:kv_cache_usage_perc': 'gauge', 'vllm:gpu_cache_usage_perc': 'gauge',
      'vllm:prompt_tokens_total': 'counter', 'vllm:generation_tokens_total': 'counter',
      'vllm:request_success_total': 'counter', 'vllm:num_preemptions_total': 'counter',
      'vllm:prefix_cache_queries_total': 'counter', 'vllm:prefix_cache_hits_total': 'counter',
      'vllm:time_to_first_token_seconds': 'histogram', 'vllm:inter_token_latency_seconds': 'histogram',
      'vllm:time_per_output_token_seconds': 'histogram',
      'vllm:request_time_per_output_token_seconds': 'histogram',
      'vllm:e2e_request_latency_seconds': 'histogram', 'vllm:request_decode_time_seconds': 'histogram',
      'vllm:request_prompt_tokens': 'histogram', 'vllm:request_generation_tokens': 'histogram',
    };
    for (const [name, kind] of Object.entries(expected)) assert.equal(m.types.get(name), kind, name);
    for (const s of m.samples.filter((x) => x.name.startsWith('vllm:'))) {
      assert.match(s.labels, /model_name="main"/, `${s.name}${s.labels}`);
    }
    // Every completion of this file so far: 3 (aliases) + 3 (request ids) + 1 (CORS) + 1 here.
    // Whether each ended by EOS or max_tokens is the model's business: only the sum over
    // finished_reason is fixed.
    const finished = m.samples.filter((s) => s.name === 'vllm:request_success_total')
      .reduce((a, s) => a + s.value, 0);
    assert.equal(finished, 8);
    assert.equal(sample(m, 'vllm:e2e_request_latency_seconds_count'), 8);
    assert.equal(sample(m, 'vllm:request_prompt_tokens_count'), 8);
    const gen = sample(m, 'vllm:generation_tokens_total');
    assert.equal(sample(m, 'vllm:request_generation_tokens_sum'), gen);
    assert.equal(sample(m, 'deepinfer_generation_tokens_total'), gen);
    assert.equal(sample(m, 'vllm:prompt_tokens_total'), sample(m, 'deepinfer_prompt_tokens_total'));
    // One inter-token gap per token after the first of each request.
    assert.equal(sample(m, 'vllm:inter_token_latency_seconds_count'), gen - 8);
    assert.equal(sample(m, 'vllm:time_per_output_token_seconds_count'), gen - 8);
    // vLLM's TTFT buckets (22 boundaries from 1 ms to 2560 s) and 1-2-5 token buckets up to the
    // 512-token context.
    const ttftLe = m.samples.filter((s) => s.name === 'vllm:time_to_first_token_seconds_bucket')
      .map((s) => s.labels.match(/le="([^"]+)"/)[1]);
    assert.deepEqual(ttftLe, ['0.001', '0.005', '0.01', '0.02', '0.04', '0.06', '0.08', '0.1', '0.25',
      '0.5', '0.75', '1', '2.5', '5', '7.5', '10', '20', '40', '80', '160', '640', '2560', '+Inf']);
    const promptLe = m.samples.filter((s) => s.name === 'vllm:request_prompt_tokens_bucket')
      .map((s) => s.labels.match(/le="([^"]+)"/)[1]);
    assert.deepEqual(promptLe, ['1', '2', '5', '10', '20', '50', '100', '200', '500', '+Inf']);
    for (const route of ['/v1/responses', '/v1/messages', '/v1/messages/count_tokens']) {
      assert.ok(sample(m, 'deepinfer_http_requests_total', `route="${route}"`) >= 1, route);
    }
    assert.equal(sample(m, 'deepinfer_http_requests_total', 'route="other"'), undefined);
  });
});
