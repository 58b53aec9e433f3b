// /v1/messages on the `demo` preset through the official @anthropic-ai/sdk client
// (messages.create and the SDK's accumulating messages.stream). Random weights: checks are on the
// protocol — every event parses, stream equals create for the same seeded request (temperature 0
// and seeded temperature-1 sampling; thinking, text and tool_use), tool_use / tool_result history
// is accepted, forced tool calls (tool_choice any / tool; grammar-constrained, issue #11) carry
// inputs that ajv accepts against input_schema, the input_json_delta chunks concatenate to the
// final input, and errors have Anthropic's shape and status through the SDK's error classes.
// `seed` is our extension field (docs/protocol.md), sent as an extra body field.
//
// Thinking is on by default on this model, so thinking blocks come without `thinking` in the
// request; an explicit `thinking: {type: "enabled"}` needs max_tokens > budget_tokens >= 1024,
// too many tokens for the random-weight model on 2 cores, so it is checked through count_tokens.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { collectEvents, DEMO_ARCH, demoModel, startServer, TIME, WEATHER } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const REQ = { model: 'demo', max_tokens: 16, system: 'Be terse.', temperature: 0,
              messages: [{ role: 'user', content: 'Say hello.' }] };
const SAMPLED = { temperature: 1, top_p: 0.9, seed: 4321 };

const TOOLS = [
  { name: 'get_weather', description: 'Weather forecast', input_schema: WEATHER },
  { name: 'get_time', description: 'Current time', input_schema: TIME },
];
const ajv = new Ajv({ strict: false });
const VALIDATE = { get_weather: ajv.compile(WEATHER), get_time: ajv.compile(TIME) };

// A tool round trip: assistant thinking + tool_use, user tool_result (+ text).
const HISTORY = [
  { role: 'user', content: 'Weather in Paris for 2 days?' },
  { role: 'assistant', content: [
    { type: 'thinking', thinking: 'I need the forecast tool.', signature: '' },
    { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris', days: 2 } }] },
  { role: 'user', content: [
    { type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'sunny' }] },
    { type: 'text', text: 'And the time in UTC?' }] },
];

function strip(m) {  // tool_use ids are random
  return m.content.map((b) => {
    if (b.type !== 'tool_use') return b;
    const { id, ...rest } = b;
    return rest;
  });
}

// Checks one streamed message's events against the created message `m`: framing, stop reason,
// usage, and per block that the deltas concatenate to the final block (input_json_delta chunks
// to valid JSON equal to the tool_use input).
function checkEvents(events, m) {
  const types = events.map((ev) => ev.type);
  const blocks = [];
  let stop = null;
  let outputTokens = null;
  for (const ev of events) {
    if (ev.type === 'content_block_start') {
      assert.equal(ev.index, blocks.length);
      blocks.push({ start: ev.content_block, text: '' });
    } else if (ev.type === 'content_block_delta') {
      const d = ev.delta;
      const piece = d.type === 'text_delta' ? d.text : d.type === 'thinking_delta' ? d.thinking
        : d.type === 'input_json_delta' ? d.partial_json : assert.fail(`delta ${d.type}`);
      blocks[ev.index].text += piece;
    } else if (ev.type === 'message_delta') {
      stop = ev.delta.stop_reason;
      outputTokens = ev.usage.output_tokens;
    }
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(stop, m.stop_reason);
  assert.equal(outputTokens, m.usage.output_tokens);
  assert.equal(blocks.length, m.content.length);
  for (const [i, b] of blocks.entries()) {
    const final = m.content[i];
    assert.equal(b.start.type, final.type);
    if (final.type === 'text') assert.equal(b.text, final.text);
    if (final.type === 'thinking') assert.equal(b.text, final.thinking);
    if (final.type === 'tool_use') {
      assert.equal(b.start.name, final.name);
      let parsed;
      try { parsed = JSON.parse(b.text); } catch { parsed = undefined; }
      if (parsed === undefined) {
        // Only a call cut off by max_tokens may stream an unfinished input (docs/protocol.md
        // "Truncated tool calls"); agreeAll compares its `input` with the SDK's partial parse.
        assert.equal(m.stop_reason, 'max_tokens', `unparsable input_json_delta text ${b.text}`);
        assert.equal(i, blocks.length - 1, 'only the last block can be cut');
      } else {
        assert.deepEqual(parsed, final.input, 'input_json_delta chunks concatenate to the input');
      }
    }
  }
}

// create, the SDK's MessageStream (messages.stream) and, with `raw`, a plain
// messages.create({stream: true}) for the same request; all must agree. They run concurrently
// (one batch; the server runs batch-invariant, see below). Returns the created message.
async function agreeAll(client, req, { raw = false } = {}) {
  const s = client.messages.stream(req);
  const helperEvents = [];
  s.on('streamEvent', (ev) => helperEvents.push(ev));
  const [m, final, rawList] = await Promise.all([
    client.messages.create(req),
    s.finalMessage(),  // accumulated by the SDK from the deltas
    raw ? collectEvents(client.messages.create({ ...req, stream: true })) : null,
  ]);
  assert.equal(m.type, 'message');
  assert.match(m.id, /^msg_/);
  for (const events of rawList ? [helperEvents, rawList] : [helperEvents]) checkEvents(events, m);
  assert.deepEqual(strip(final), strip(m));
  assert.equal(final.stop_reason, m.stop_reason);
  assert.deepEqual(final.usage, m.usage);
  return m;
}

function checkToolUse(m, allowed) {
  assert.equal(m.stop_reason, 'tool_use');
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1, 'at least one tool_use block');
  assert.deepEqual(m.content.filter((b) => b.type === 'text'), [], 'no text in a forced response');
  for (const u of uses) {
    assert.ok(allowed.includes(u.name), u.name);
    assert.match(u.id, /^toolu_/);
    assert.ok(VALIDATE[u.name](u.input), `${u.name} ${JSON.stringify(u.input)}: ${ajv.errorsText(VALIDATE[u.name].errors)}`);
  }
  return uses;
}

describe('messages on the demo preset', { skip }, () => {
  let server;
  let client;
  before(async () => {
    // Batch-invariant kernels: a request's result does not depend on what it is batched with,
    // so the compared requests can run concurrently (and the suite stays fast).
    process.env.DEEPINFER_BATCH_INVARIANT = '1';
    // Exact prefix caching: a request that hits earlier requests' blocks gets the output it would
    // get uncached (a replayed hit is an approximation, README "Prefix caching"), so compared
    // requests agree whichever of them hits.
    server = await startServer(dir, ['--served-model-name', 'demo', '--api-key', 'k',
                                     '--prefix-cache-mode', 'exact']);
    client = new Anthropic({ baseURL: server.url, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => { await server?.stop(); });

  test('create and stream agree at temperature 0 (x-api-key auth); thinking block first', async () => {
    const m = await agreeAll(client, REQ, { raw: true });
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
    assert.equal(m.content[0].type, 'thinking', 'thinking is on by default');
    assert.ok(m.usage.input_tokens > 0);
  });

  test('seeded sampling (temperature 1, top_p 0.9, seed): stream equals create', async () => {
    const req = { ...REQ, ...SAMPLED };
    // Thinking on, and off (only text).
    const [a, b, other, off] = await Promise.all([
      agreeAll(client, req, { raw: true }), client.messages.create(req), client.messages.create({ ...req, seed: 77 }),
      agreeAll(client, { ...req, thinking: { type: 'disabled' } })]);
    assert.deepEqual(strip(b), strip(a), 'the same seed reproduces the sample');
    assert.notDeepEqual(strip(other), strip(a), 'another seed samples something else');
    assert.deepEqual(off.content.map((c) => c.type).filter((t) => t !== 'text'), []);
  });

  test('history with tool_use and tool_result blocks, tools with input_schema', async () => {
    const req = { ...REQ, max_tokens: 6, messages: HISTORY, tools: TOOLS };
    const m = await agreeAll(client, req);
    assert.ok(m.usage.input_tokens > 60, 'the tools prompt and history are rendered');
  });

  test('tool_choice any: tool_use blocks valid against input_schema; seeded stream equals create', async () => {
    const req = { ...REQ, max_tokens: 600, messages: [{ role: 'user', content: 'Weather in Paris?' }],
                  tools: TOOLS, tool_choice: { type: 'any' }, thinking: { type: 'disabled' }, ...SAMPLED };
    const m = await agreeAll(client, req);
    checkToolUse(m, ['get_weather', 'get_time']);
  });

  test('a forced tool_use cut off by max_tokens: the same block streamed and created', async () => {
    // docs/protocol.md "Truncated tool calls": `input` holds the completely generated members,
    // which for these flat schemas is what the SDK's stream helper partial-parses (agreeAll).
    let truncated = 0;
    // V4.1's spaced DSML names (` invoke name=`) take more tokens to reach the tool name.
    for (const max_tokens of [5, 9, 13, 18, 24, ...(DEMO_ARCH === 'deepseek_v41' ? [30, 36] : [])]) {
      const req = { ...REQ, max_tokens, messages: [{ role: 'user', content: 'Weather in Paris?' }],
                    tools: TOOLS, tool_choice: { type: 'any' }, thinking: { type: 'disabled' },
                    ...SAMPLED, seed: 9 };
      const m = await agreeAll(client, req, { raw: true });
      const uses = m.content.filter((b) => b.type === 'tool_use');
      if (m.stop_reason === 'max_tokens' && uses.length > 0) {
        truncated += 1;
        assert.match(uses.at(-1).id, /^toolu_/);
        assert.ok(['get_weather', 'get_time'].includes(uses.at(-1).name));
        assert.equal(typeof uses.at(-1).input, 'object');
      }
    }
    assert.ok(truncated > 0, 'some max_tokens value cut a tool_use after its name');
  });

  test('tool_choice tool with disable_parallel_tool_use: exactly one tool_use of that tool', async () => {
    const req = { ...REQ, max_tokens: 150, messages: [{ role: 'user', content: 'Time?' }], tools: TOOLS,
                  thinking: { type: 'disabled' },
                  tool_choice: { type: 'tool', name: 'get_time', disable_parallel_tool_use: true },
                  ...SAMPLED, seed: 6 };
    const m = await agreeAll(client, req);
    assert.equal(checkToolUse(m, ['get_time']).length, 1);
  });

  test('count_tokens, explicit thinking config', async () => {
    const c = await client.messages.countTokens({ model: 'demo', messages: REQ.messages });
    assert.ok(c.input_tokens > 0);
    const on = await client.messages.countTokens({ model: 'demo', messages: REQ.messages,
                                                   thinking: { type: 'enabled', budget_tokens: 1024 } });
    const off = await client.messages.countTokens({ model: 'demo', messages: REQ.messages,
                                                    thinking: { type: 'disabled' } });
    if (DEMO_ARCH === 'deepseek_v41') {
      // V4.1 thinking prompts start <｜System｜>Reasoning Effort: N (…)\n\n (protocol.md §1.5).
      assert.ok(on.input_tokens > off.input_tokens + 10);
    } else {
      // V4 ends a thinking prompt with <think>, a chat prompt with </think>: same length.
      assert.equal(on.input_tokens, off.input_tokens);
    }
    assert.equal(on.input_tokens, c.input_tokens);
  });

  test('errors: Anthropic shape, status and SDK error class', async () => {
    const invalid = (e, text) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
      e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error' &&
      (text === undefined || e.error.error.message.includes(text));
    const { max_tokens, ...noMax } = REQ;
    await assert.rejects(client.messages.create(noMax), (e) => invalid(e, 'max_tokens'));
    await assert.rejects(client.messages.create({ ...REQ, messages: [{ role: 'system', content: 'x' }] }),
                         (e) => invalid(e, 'messages.0.role'));
    await assert.rejects(client.messages.create({ ...REQ, messages: [
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] }] }),
    (e) => invalid(e, 'toolu_nope'));
    await assert.rejects(client.messages.create({ ...REQ, tools: TOOLS, tool_choice: { type: 'tool', name: 'nope' } }),
                         (e) => invalid(e, 'tool_choice.name'));
    await assert.rejects(client.messages.create({ ...REQ, seed: 'x' }), (e) => invalid(e, 'seed'));
    const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create(REQ),
                         (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 &&
                                e.error?.error?.type === 'authentication_error');
  });
});
