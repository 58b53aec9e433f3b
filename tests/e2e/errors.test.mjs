// Error cases of the OpenAI API: status code and error type as the official client sees them
// (shared/spec/protocol.md §3.4), and the server staying healthy afterwards.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import { STORIES, demoModel, haveStories, postRaw, sleep, startServer } from './helpers.mjs';

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

  test('a logit_bias token id outside the vocabulary is 400 naming logit_bias', async () => {
    // stories260K has a 512-token vocabulary.
    await rejectsWith(client.completions.create({ model, prompt: 'x', logit_bias: { 512: 1 } }),
                      400, 'invalid_request_error', (e) => e.param === 'logit_bias');
    await rejectsWith(client.completions.create({ model, prompt: 'x', logit_bias: { 100000: -5 } }),
                      400, 'invalid_request_error', (e) => e.param === 'logit_bias');
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

  test('unknown route is 404; wrong method 405 with Allow (RFC 9110 §15.5.6); HEAD, OPTIONS', async () => {
    const r = await postRaw(`${server.baseURL}/nothing-here`, '{}', auth);
    assert.equal(r.status, 404);
    const g = await fetch(`${server.baseURL}/completions`, { headers: auth });
    assert.equal(g.status, 405);
    assert.equal(g.headers.get('allow'), 'POST, OPTIONS');
    const gj = await g.json();
    assert.equal(gj.error.type, 'invalid_request_error');
    assert.equal(gj.error.code, 'method_not_allowed');
    const p = await fetch(`${server.url}/health`, { method: 'POST' });
    assert.equal(p.status, 405);
    assert.equal(p.headers.get('allow'), 'GET, HEAD, OPTIONS');
    const h = await fetch(`${server.url}/health`, { method: 'HEAD' });
    assert.equal(h.status, 200);
    assert.equal(await h.text(), '');
    const o = await fetch(`${server.baseURL}/chat/completions`, { method: 'OPTIONS' });
    assert.equal(o.status, 204);
    assert.equal(o.headers.get('allow'), 'POST, OPTIONS');
  });

  test('Anthropic routes answer method and path errors in Anthropic shape', async () => {
    const g = await fetch(`${server.baseURL}/messages`, { headers: { 'x-api-key': KEY } });
    assert.equal(g.status, 405);
    assert.equal(g.headers.get('allow'), 'POST, OPTIONS');
    const gj = await g.json();
    assert.equal(gj.type, 'error');
    assert.equal(gj.error.type, 'invalid_request_error');
    assert.equal(typeof gj.error.message, 'string');
    const n = await postRaw(`${server.baseURL}/messages/nope`, '{}', { 'x-api-key': KEY });
    assert.equal(n.status, 404);
    assert.equal(n.json.type, 'error');
    assert.equal(n.json.error.type, 'not_found_error');
  });

  test('the Authorization scheme is case-insensitive; Messages names x-api-key', async () => {
    const body = JSON.stringify({ model, prompt: 'Once', max_tokens: 1 });
    for (const scheme of ['bearer', 'BEARER', 'Bearer']) {
      const r = await postRaw(`${server.baseURL}/completions`, body, { authorization: `${scheme} ${KEY}` });
      assert.equal(r.status, 200, `${scheme}: ${r.text}`);
    }
    const wrong = await postRaw(`${server.baseURL}/completions`, body, { authorization: `Basic ${KEY}` });
    assert.equal(wrong.status, 401);
    const m = await postRaw(`${server.baseURL}/messages`, '{}');
    assert.equal(m.status, 401);
    assert.equal(m.json.type, 'error');
    assert.equal(m.json.error.type, 'authentication_error');
    assert.match(m.json.error.message, /x-api-key/);
  });

  test('an HTTP/1.0 stream is not chunked and ends by closing the connection', async () => {
    const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 8, stream: true });
    const raw = await new Promise((resolve, reject) => {
      const sock = net.connect(server.port, '127.0.0.1');
      let data = '';
      sock.setEncoding('latin1');
      sock.on('data', (d) => { data += d; });
      sock.on('end', () => resolve(data));
      sock.on('error', reject);
      sock.setTimeout(20000, () => { sock.destroy(); reject(new Error(`no EOF; got ${data}`)); });
      sock.write(`POST /v1/completions HTTP/1.0\r\nAuthorization: Bearer ${KEY}\r\n` +
                 `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    const end = raw.indexOf('\r\n\r\n');
    assert.ok(end > 0, raw);
    const head = raw.slice(0, end);
    const payload = raw.slice(end + 4);
    assert.match(head, /^HTTP\/1\.[01] 200 /);
    assert.doesNotMatch(head, /transfer-encoding/i);
    assert.match(head, /\r\nConnection: close/i);
    assert.ok(payload.startsWith('data: {'), payload.slice(0, 40));
    assert.ok(payload.endsWith('data: [DONE]\n\n'), payload.slice(-40));
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

describe('shutdown with streams in flight', { skip }, () => {
  test('each stream ends with its API family\'s terminal error; logged 503/529, not 499', async (t) => {
    const dir = demoModel();  // slow enough (random DeepSeek-V4 weights) to be mid-stream
    if (!dir) return t.skip('cannot make the demo checkpoint');
    const server = await startServer(dir, ['--served-model-name', 'm', '--shutdown-timeout', '0']);
    const open = async (route, body) => {
      const r = await fetch(`${server.baseURL}/${route}`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: true, ...body }),
      });
      assert.equal(r.status, 200);
      const reader = r.body.getReader();
      const first = await reader.read();  // the stream is open and producing
      return { reader, text: new TextDecoder().decode(first.value) };
    };
    const rest = async (s) => {
      // Throws ("terminated") if the chunked body is cut instead of ended with its last chunk.
      for (;;) {
        const { done, value } = await s.reader.read();
        if (done) return s.text;
        s.text += new TextDecoder().decode(value);
      }
    };
    const msg = [{ role: 'user', content: 'hi' }];
    const streams = await Promise.all([
      open('completions', { prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true }),
      // min_tokens (vLLM's, masks EOS): a seeded random model may otherwise end early on some
      // CPU's numerics, and the stream would finish before the shutdown it is meant to see.
      open('messages', { max_tokens: 400, min_tokens: 400, messages: msg }),
      open('responses', { max_output_tokens: 400, min_tokens: 400, input: 'hi' }),
    ]);
    await sleep(200);
    const exited = server.stop();
    const [cmpl, messages, responses] = await Promise.all(streams.map(rest));
    assert.equal((await exited).code, 0);
    // OpenAI: an error chunk with a server-side type, then [DONE].
    const errChunk = cmpl.split('\n\n').find((e) => e.startsWith('data: {"error"'));
    assert.ok(errChunk, cmpl.slice(-300));
    assert.equal(JSON.parse(errChunk.slice(6)).error.type, 'service_unavailable_error');
    assert.ok(cmpl.endsWith('data: [DONE]\n\n'));
    // Anthropic: a final `event: error` with overloaded_error.
    const last = messages.trim().split('\n\n').pop();
    assert.match(last, /^event: error\ndata: /, last);
    const err = JSON.parse(last.split('\ndata: ')[1]);
    assert.equal(err.type, 'error');
    assert.equal(err.error.type, 'overloaded_error');
    // Responses: a terminal response.failed.
    const lastR = responses.trim().split('\n\n').pop();
    assert.match(lastR, /^event: response\.failed\n/, lastR);
    const failed = JSON.parse(lastR.split('\ndata: ')[1]);
    assert.equal(failed.response.status, 'failed');
    assert.equal(failed.response.error.code, 'server_error');
    // Items streamed before the failure are in its output; the one cut short is "incomplete".
    if (/event: response\.output_item\.added\n/.test(responses)) {
      assert.ok(failed.response.output.length >= 1, lastR);
    }
    for (const item of failed.response.output) {
      assert.ok(['completed', 'incomplete'].includes(item.status), JSON.stringify(item));
    }
    const logs = server.logs();
    assert.doesNotMatch(logs, /status=499/);
    assert.match(logs, / completions status=503/);
    assert.match(logs, / messages status=529/);
    assert.match(logs, / responses status=503/);
  });
});
