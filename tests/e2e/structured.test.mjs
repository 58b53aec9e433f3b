// response_format on /v1/chat/completions (issue #11): the demo preset has random weights, so
// only the grammar makes the output valid. 100 seeded temperature-1 requests in a row must each
// return JSON that ajv (an independent validator) accepts for the schema; json_object must parse;
// an unenforceable schema keyword is a 400 naming it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { demoModel, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 16 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
    active: { type: 'boolean' },
  },
  required: ['name', 'age', 'active'],
  additionalProperties: false,
};

describe('structured output on the demo preset', { skip }, () => {
  let server;
  let client;

  before(async () => {
    server = await startServer(dir, ['--served-model-name', 'demo']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0, 'graceful shutdown exits 0');
  });

  test('json_schema: 100 requests in a row all validate with ajv', async () => {
    const ajv = new Ajv2020({ strict: false });
    addFormats(ajv);
    const validate = ajv.compile(SCHEMA);
    const requests = [];
    for (let i = 0; i < 100; ++i) {
      requests.push(() => client.chat.completions.create({
        model: 'demo',
        messages: [{ role: 'user', content: `Describe person ${i} as JSON.` }],
        max_tokens: 64,
        temperature: 1,
        seed: i,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMA } },
      }));
    }
    // 4 in flight at a time.
    const results = [];
    for (let i = 0; i < requests.length; i += 4) {
      results.push(...await Promise.all(requests.slice(i, i + 4).map((f) => f())));
    }
    for (const r of results) {
      const text = r.choices[0].message.content;
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(text); }, `not JSON: ${text}`);
      assert.ok(validate(value), `schema violation: ${text} ${JSON.stringify(validate.errors)}`);
    }
  });

  test('json_object: output parses as an object (streamed)', async () => {
    const stream = await client.chat.completions.create({
      model: 'demo', messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 32,
      temperature: 1, seed: 3, stream: true, response_format: { type: 'json_object' },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    const value = JSON.parse(text);
    assert.equal(typeof value, 'object');
    assert.ok(!Array.isArray(value));
  });

  test('unsupported schema keyword is a 400 naming it', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: 'demo', messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } },
      }),
      (e) => e.status === 400 && /uniqueItems/.test(e.message));
  });
});
