// /v1/messages on the `demo` preset through the official @anthropic-ai/sdk client
// (messages.create and messages.stream). Random weights: checks are on the protocol.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { demoModel, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const REQ = { model: 'demo', max_tokens: 2000, system: 'Be terse.', temperature: 0,
              messages: [{ role: 'user', content: 'Say hello.' }],
              thinking: { type: 'enabled', budget_tokens: 1024 } };

describe('messages on the demo preset', { skip }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(dir, ['--served-model-name', 'demo', '--api-key', 'k']);
    client = new Anthropic({ baseURL: server.url, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => { await server?.stop(); });

  test('create and stream agree (x-api-key auth)', async () => {
    const req = { ...REQ, max_tokens: 1100 };
    const m = await client.messages.create(req);
    assert.equal(m.type, 'message');
    assert.match(m.id, /^msg_/);
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason));
    const s = client.messages.stream(req);
    const types = new Set();
    s.on('streamEvent', (ev) => types.add(ev.type));
    const final = await s.finalMessage();
    for (const t of ['message_start', 'message_delta', 'message_stop']) assert.ok(types.has(t), t);
    assert.deepEqual(final.content, m.content);
    assert.equal(final.stop_reason, m.stop_reason);
  });

  test('count_tokens and errors', async () => {
    const c = await client.messages.countTokens({ model: 'demo', messages: REQ.messages });
    assert.ok(c.input_tokens > 0);
    await assert.rejects(client.messages.create({ ...REQ, messages: [{ role: 'system', content: 'x' }] }),
                         (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
    const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create(REQ), (e) => e.status === 401);
  });
});
