// Error cases of the OpenAI API: status code and error type as the official client sees them
// (shared/spec/protocol.md §3.4), and the server staying healthy afterwards.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, haveStories, postRaw, startServer } from './helpers.mjs';

const skip = haveStories() ? false : 'shared/models/stories260K is absent';
const KEY = 'sk-test-secret';

// Asserts `promise` rejects with an OpenAI APIError of `status` and error `type`.
async function rejectsWith(promise, status, type, extra = () => true) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(e.type, type, e.message);
    assert.ok(extra(e), e.message);
    return true;
  });
}

describe('errors', { skip }, () => {
  let server;
  let client;
  const model = 'stories260K';
  const auth = { authorization: `Bearer ${KEY}` };

  before(async () => {
    server = await startServer(STORIES, ['--served-model-name', model, '--api-key', KEY,
                                         '--max-body-bytes', '200000']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: KEY, maxRetries: 0 });
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0);
  });

  test('malformed JSON is 400 invalid_request_error', async () => {
    const r = await postRaw(`${server.baseURL}/completions`, '{"prompt": "x", ', auth);
    assert.equal(r.status, 400);
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
  });

  test('a known field of the wrong type is 400 naming the param', async () => {
    await rejectsWith(client.completions.create({ model, prompt: 'x', max_tokens: 'ten' }),
                      400, 'invalid_request_error', (e) => e.param === 'max_tokens');
    await rejectsWith(client.completions.create({ model, prompt: 'x', temperature: 'hot' }),
                      400, 'invalid_request_error', (e) => e.param === 'temperature');
    await rejectsWith(client.completions.create({ model, prompt: 42 }),
                      400, 'invalid_request_error', (e) => e.param === 'prompt');
  });

  test('empty messages and empty prompt are 400', async () => {
    await rejectsWith(client.chat.completions.create({ model, messages: [] }),
                      400, 'invalid_request_error', (e) => e.param === 'messages');
    await rejectsWith(client.completions.create({ model, prompt: '' }),
                      400, 'invalid_request_error', (e) => e.param === 'prompt');
  });

  test('a prompt longer than the context is rejected, never truncated', async () => {
    const long = 'Once upon a time '.repeat(200);  // > 512 tokens (the model's context)
    await rejectsWith(client.completions.create({ model, prompt: long, max_tokens: 1 }),
                      400, 'invalid_request_error', (e) => e.code === 'context_length_exceeded');
  });

  test('max_tokens beyond the context is 400', async () => {
    await rejectsWith(client.completions.create({ model, prompt: 'Once', max_tokens: 100000 }),
                      400, 'invalid_request_error', (e) => e.param === 'max_tokens');
  });

  test('unknown model is 404 model_not_found', async () => {
    await rejectsWith(client.completions.create({ model: 'gpt-17', prompt: 'x' }),
                      404, 'invalid_request_error', (e) => e.code === 'model_not_found');
  });

  test('bad or missing API key is 401', async () => {
    const bad = new OpenAI({ baseURL: server.baseURL, apiKey: 'sk-wrong', maxRetries: 0 });
    await rejectsWith(bad.completions.create({ model, prompt: 'x' }), 401, 'invalid_request_error',
                      (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
    const r = await postRaw(`${server.baseURL}/completions`, '{"prompt": "x"}');
    assert.equal(r.status, 401);
    // /health and /metrics stay open for probes.
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });

  test('body too large is 413', async () => {
    const r = await postRaw(`${server.baseURL}/completions`,
                            JSON.stringify({ model, prompt: 'x'.repeat(300000) }), auth);
    assert.equal(r.status, 413);
    assert.equal(r.json.error.type, 'invalid_request_error');
  });

  test('unknown route is 404, wrong method 400', async () => {
    const r = await postRaw(`${server.baseURL}/nothing-here`, '{}', auth);
    assert.equal(r.status, 404);
    const g = await fetch(`${server.baseURL}/completions`, { headers: auth });
    assert.equal(g.status, 400);
  });

  test('garbage never takes the server down and never disturbs a good request', async () => {
    const bodies = ['', 'null', '[]', '{"prompt": [1, 99999999]}', '{"prompt": [-1]}',
                    '{"prompt": "x", "n": 1000}', '{"prompt": "x", "logprobs": 99}',
                    '{"prompt": {"a": 1}}', '\u0000\u0001', '{"prompt": "\\ud800"}',
                    '{"prompt": "x", "stop": [1, 2]}', '{"prompt": "x", "seed": "s"}'];
    const good = client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
    const bad = await Promise.all(bodies.map((b) => postRaw(`${server.baseURL}/completions`, b, auth)));
    for (const [i, r] of bad.entries()) {
      assert.ok(r.status >= 400 && r.status < 500, `body ${JSON.stringify(bodies[i])}: ${r.status}`);
      assert.equal(typeof r.json?.error?.message, 'string');
    }
    const g = await good;
    assert.equal(g.usage.completion_tokens, 16);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });
});

describe('overload', { skip }, () => {
  test('a full queue answers 429 rate_limit_error; others still complete', async () => {
    const server = await startServer(STORIES, ['--served-model-name', 'm', '--max-num-seqs', '1',
                                               '--max-waiting-requests', '1']);
    try {
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x', maxRetries: 0 });
      const results = await Promise.allSettled(Array.from({ length: 8 }, () =>
        client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 200,
                                    temperature: 0, ignore_eos: true })));
      const ok = results.filter((r) => r.status === 'fulfilled');
      const rejected = results.filter((r) => r.status === 'rejected');
      assert.ok(ok.length >= 1);
      assert.ok(rejected.length >= 1, 'some requests were refused');
      for (const r of rejected) {
        assert.equal(r.reason.status, 429, r.reason.message);
        assert.equal(r.reason.type, 'rate_limit_error');
      }
      for (const r of ok) assert.equal(r.value.usage.completion_tokens, 200);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
