// /v1/responses on the `demo` preset through the official openai client (client.responses).
// Random weights: the checks are on the protocol — the SDK parses every event, the streamed
// result (response.completed) equals the non-streamed one for the same seeded request, errors.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { demoModel, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const REQ = { model: 'demo', instructions: 'Be terse.', input: 'Say hello.', max_output_tokens: 12,
              temperature: 0, reasoning: { effort: 'high' } };

function strip(r) {  // ids and timestamps differ between two requests
  return r.output.map((item) => {
    const { id, call_id, ...rest } = item;
    return rest;
  });
}

describe('responses on the demo preset', { skip }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(dir, ['--served-model-name', 'demo']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await server?.stop(); });

  test('non-stream and stream agree; every event parses', async () => {
    const r = await client.responses.create(REQ);
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    const stream = await client.responses.create({ ...REQ, stream: true });
    const types = [];
    let last;
    let seq = -1;
    for await (const ev of stream) {
      types.push(ev.type);
      assert.ok(ev.sequence_number > seq);
      seq = ev.sequence_number;
      last = ev;
    }
    assert.equal(types[0], 'response.created');
    assert.equal(types[1], 'response.in_progress');
    assert.ok(['response.completed', 'response.incomplete'].includes(last.type));
    assert.deepEqual(strip(last.response), strip(r));
  });

  test('errors have the OpenAI shape', async () => {
    await assert.rejects(client.responses.create({ ...REQ, previous_response_id: 'resp_x' }),
                         (e) => e.status === 400 && e.error?.param === 'previous_response_id');
    await assert.rejects(client.responses.create({ model: 'demo', input: [{ role: 'tool', content: 'x' }] }),
                         (e) => e.status === 400 && e.error?.type === 'invalid_request_error');
  });
});
