// /v1/chat/completions on the `demo` preset (DeepSeek-V4 layout, random weights, DeepSeek
// tokenizer), through the official openai client. Random weights make the text meaningless, so
// the checks are on the protocol: shapes, streaming framing, usage arithmetic, logprob
// invariants, seeded reproducibility and stream / non-stream agreement.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { DEMO_ARCH, demoModel, startServer } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Say hello.' },
];

// Concatenates a chat stream's tool_call deltas per index, as the SDK's stream helpers do;
// returns them with the last finish_reason.
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

describe('chat completions on the demo preset', { skip }, () => {
  let server;
  let client;

  before(async () => {
    // Exact prefix caching: a request that hits earlier requests' blocks gets the output it would
    // get uncached (a replayed hit is an approximation, README "Prefix caching"), so the
    // stream / non-stream and seeded-reproducibility comparisons hold whichever request hits.
    server = await startServer(dir, ['--served-model-name', 'demo', '--prefix-cache-mode', 'exact']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0, 'graceful shutdown exits 0');
  });

  test('non-stream: OpenAI shape and usage', async () => {
    const r = await client.chat.completions.create({
      model: 'demo', messages: MESSAGES, max_tokens: 8, temperature: 0,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, 'demo');
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
    assert.equal(typeof c.message.reasoning_content, 'string', 'thinking is on by default');
    assert.ok(r.usage.prompt_tokens > 0);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
  });

  test('stream: role first, deltas, finish_reason once, usage chunk, agrees with non-stream', async () => {
    const req = { model: 'demo', messages: MESSAGES, max_tokens: 12, temperature: 0 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({
      ...req, stream: true, stream_options: { include_usage: true },
    });
    let first = true;
    let content = '';
    let reasoning = '';
    let finishes = 0;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) {
        usage = chunk.usage;
        assert.deepEqual(chunk.choices, []);
        continue;
      }
      const c = chunk.choices[0];
      if (first) {
        assert.equal(c.delta.role, 'assistant');
        first = false;
      }
      content += c.delta.content ?? '';
      reasoning += c.delta.reasoning_content ?? '';
      if (c.finish_reason) {
        finishes++;
        finish = c.finish_reason;
      }
    }
    assert.equal(finishes, 1);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.equal(content, whole.choices[0].message.content ?? '');
    assert.equal(reasoning, whole.choices[0].message.reasoning_content ?? '');
    assert.deepEqual(usage, whole.usage);
  });

  test('thinking disabled through the DeepSeek option changes the prompt', async () => {
    const on = await client.chat.completions.create({ model: 'demo', messages: MESSAGES, max_tokens: 1 });
    const off = await client.chat.completions.create({
      model: 'demo', messages: MESSAGES, max_tokens: 1, thinking: { type: 'disabled' },
    });
    if (DEMO_ARCH === 'deepseek_v41') {
      // V4.1 thinking prompts start <｜System｜>Reasoning Effort: 75 (…)\n\n (protocol.md §1.5).
      assert.ok(on.usage.prompt_tokens > off.usage.prompt_tokens + 10);
    } else {
      // V4 ends a thinking prompt with <think>, a chat prompt with </think>: same length, other id.
      assert.equal(on.usage.prompt_tokens, off.usage.prompt_tokens);
    }
    assert.equal(off.choices[0].message.reasoning_content, undefined);
  });

  test('logprobs: greedy token is the top alternative, one entry per token', async () => {
    const r = await client.chat.completions.create({
      model: 'demo', messages: MESSAGES, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
    });
    const entries = r.choices[0].logprobs.content;
    assert.equal(entries.length, r.usage.completion_tokens);
    for (const e of entries) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 3);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5);
      assert.ok(Array.isArray(e.bytes));
      assert.equal(Buffer.from(e.bytes).toString('utf8').length > 0 || e.bytes.length === 0, true);
    }
  });

  test('n=2 with a seed is reproducible and gives two choices', async () => {
    const req = { model: 'demo', messages: MESSAGES, max_tokens: 6, temperature: 1, n: 2, seed: 7 };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    assert.equal(a.choices.length, 2);
    const key = (r) => r.choices.slice().sort((x, y) => x.index - y.index)
      .map((c) => `${c.message.reasoning_content}|${c.message.content}`);
    assert.deepEqual(key(a), key(b));
    assert.equal(a.usage.completion_tokens, b.usage.completion_tokens);
  });

  test('seeded sampling (temperature 1, top_p 0.9): stream equals non-stream', async () => {
    const req = { model: 'demo', messages: MESSAGES, max_tokens: 12, temperature: 1, top_p: 0.9, seed: 2024 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    let content = '';
    let reasoning = '';
    let finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      content += c.delta.content ?? '';
      reasoning += c.delta.reasoning_content ?? '';
      finish = c.finish_reason ?? finish;
    }
    const m = whole.choices[0].message;
    assert.equal(reasoning, m.reasoning_content ?? '');
    assert.equal(content, m.content ?? '');
    assert.equal(finish, whole.choices[0].finish_reason);
  });

  test('seeded forced tool calls: streamed tool_call deltas equal the non-stream tool_calls', async () => {
    const req = {
      model: 'demo', messages: [{ role: 'user', content: 'Time in UTC?' }], max_tokens: 200,
      temperature: 1, top_p: 0.9, seed: 31, thinking: { type: 'disabled' }, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'get_time', parameters: {
        type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'],
        additionalProperties: false } } }],
    };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const { calls, finish } = await collectToolCallDeltas(stream);
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    assert.equal(finish, 'tool_calls');
    const expected = whole.choices[0].message.tool_calls.map((t) => ({ name: t.function.name,
                                                                        arguments: t.function.arguments }));
    assert.ok(expected.length >= 1);
    assert.deepEqual(calls, expected);
    for (const c of calls) assert.ok(['UTC', 'CET'].includes(JSON.parse(c.arguments).zone));
  });

  test('a forced tool call cut off by max_tokens: stream and non-stream both keep the partial call', async () => {
    // docs/protocol.md "Truncated tool calls": the stream has sent the call's id and name before
    // the cut, so the non-stream answer keeps the call too, with the truncated arguments string
    // and finish_reason "length".
    const base = {
      model: 'demo', messages: [{ role: 'user', content: 'Weather?' }], temperature: 1, top_p: 0.9,
      seed: 17, thinking: { type: 'disabled' }, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: {
        type: 'object', properties: { city: { type: 'string', maxLength: 40 } }, required: ['city'],
        additionalProperties: false } } }],
    };
    let truncated = 0;
    for (const max_tokens of [24, 40, 80]) {  // the random model spends ~25 tokens before the name
      const req = { ...base, max_tokens };
      const whole = await client.chat.completions.create(req);
      const stream = await client.chat.completions.create({ ...req, stream: true });
      const { calls, finish } = await collectToolCallDeltas(stream);
      const w = whole.choices[0];
      assert.equal(finish, w.finish_reason, `max_tokens ${max_tokens}`);
      const expected = (w.message.tool_calls ?? []).map((t) => ({ name: t.function.name,
                                                                   arguments: t.function.arguments }));
      assert.deepEqual(calls, expected, `max_tokens ${max_tokens}`);
      if (w.finish_reason === 'length' && expected.length > 0) {
        truncated += 1;
        assert.equal(expected[0].name, 'get_weather');
        assert.match(w.message.tool_calls[0].id, /^call_/);
      }
    }
    assert.ok(truncated > 0, 'some max_tokens value cut the call after its name');
  });

  test('tools and tool_choice are accepted', async () => {
    const r = await client.chat.completions.create({
      model: 'demo', messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 4,
      thinking: { type: 'disabled' }, tool_choice: 'auto',
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
                parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    assert.equal(r.choices.length, 1);
    assert.ok(r.usage.prompt_tokens > 20, 'the tools prompt is rendered');
  });
});
