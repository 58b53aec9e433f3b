// Jump-forward decoding (issue #22 part 3) on the `demo` preset with thinking off, through the
// official openai client: forced tool calls whose three parameters are grammar-bounded (a string
// with maxLength 12, an integer range, an enum) finish with tool_calls within 96 completion
// tokens, their arguments validate against the schema, streamed deltas equal the non-stream
// answer, and the same requests need fewer than half the forward passes of a server started
// with --no-jump-forward (deepinfer_forward_passes_total on /metrics).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { demoModel, metric, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';

const UNITS = ['celsius', 'fahrenheit', 'kelvin'];
const TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 12 },
        days: { type: 'integer', minimum: 1, maximum: 14 },
        units: { enum: UNITS },
      },
      required: ['city', 'days', 'units'],
      additionalProperties: false,
    },
  },
};
const SEEDS = Array.from({ length: 20 }, (_, i) => 1000 + i);

function request(seed) {
  return {
    model: 'demo', messages: [{ role: 'user', content: 'Weather in Paris for the week?' }],
    max_tokens: 96, temperature: 1, top_p: 0.95, seed, thinking: { type: 'disabled' },
    tool_choice: 'required', tools: [TOOL],
  };
}

// Concatenated tool_call deltas per index and the last finish_reason of a chat stream.
async function collectToolCallDeltas(stream) {
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    finish = c.finish_reason ?? finish;
    for (const t of c.delta.tool_calls ?? []) {
      calls[t.index] ??= { name: '', arguments: '' };
      calls[t.index].name += t.function?.name ?? '';
      calls[t.index].arguments += t.function?.arguments ?? '';
    }
  }
  return { calls, finish };
}

// Schema check written out by hand (independent of our grammar compiler).
function checkArguments(text) {
  const a = JSON.parse(text);
  assert.deepEqual(Object.keys(a).sort(), ['city', 'days', 'units'], text);
  assert.equal(typeof a.city, 'string', text);
  assert.ok([...a.city].length <= 12, `city longer than 12: ${text}`);
  assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 14, text);
  assert.ok(UNITS.includes(a.units), text);
}

async function forwardPasses(server) {
  return (await metric(server.url, 'deepinfer_forward_passes_total')) ?? NaN;
}

describe('jump-forward decoding on the demo preset', { skip }, () => {
  let on;
  let off;
  before(async () => {
    on = await startServer(dir, ['--served-model-name', 'demo']);
    off = await startServer(dir, ['--served-model-name', 'demo', '--no-jump-forward']);
  });
  after(async () => {
    const r = await Promise.all([on?.stop(), off?.stop()]);
    for (const x of r) assert.equal(x?.code, 0, 'graceful shutdown exits 0');
  });

  test('20 seeded forced calls: tool_calls within 96 tokens, valid, stream equals non-stream, < half the forward passes', async () => {
    const client = new OpenAI({ baseURL: on.baseURL, apiKey: 'unused', maxRetries: 0 });
    const before = await forwardPasses(on);
    let tokens = 0;
    for (const seed of SEEDS) {
      const whole = await client.chat.completions.create(request(seed));
      const w = whole.choices[0];
      assert.equal(w.finish_reason, 'tool_calls', `seed ${seed}`);
      assert.ok(whole.usage.completion_tokens <= 96, `seed ${seed}: ${whole.usage.completion_tokens}`);
      tokens += whole.usage.completion_tokens;
      const expected = w.message.tool_calls.map((t) => ({ name: t.function.name, arguments: t.function.arguments }));
      assert.ok(expected.length >= 1, `seed ${seed}`);
      for (const c of expected) {
        assert.equal(c.name, 'get_weather');
        checkArguments(c.arguments);
      }
      const { calls, finish } = await collectToolCallDeltas(
        await client.chat.completions.create({ ...request(seed), stream: true }));
      assert.equal(finish, 'tool_calls', `seed ${seed} (stream)`);
      assert.deepEqual(calls, expected, `seed ${seed}: stream != non-stream`);
    }
    // Each request ran twice (non-stream, stream).
    const passesOn = (await forwardPasses(on)) - before;

    const clientOff = new OpenAI({ baseURL: off.baseURL, apiKey: 'unused', maxRetries: 0 });
    const beforeOff = await forwardPasses(off);
    for (const seed of SEEDS) {
      await clientOff.chat.completions.create(request(seed));
      await collectToolCallDeltas(await clientOff.chat.completions.create({ ...request(seed), stream: true }));
    }
    const passesOff = (await forwardPasses(off)) - beforeOff;
    console.log(`forward passes: ${passesOn} with jump-forward, ${passesOff} without; ` +
                `${tokens} completion tokens (non-stream)`);
    assert.ok(passesOn > 0 && passesOff > 0);
    assert.ok(passesOn * 2 < passesOff, `${passesOn} is not under half of ${passesOff}`);
    assert.ok((await metric(on.url, 'deepinfer_jump_forward_tokens_total')) > 0);
    assert.equal(await metric(off.url, 'deepinfer_jump_forward_tokens_total'), 0);
  });
});
