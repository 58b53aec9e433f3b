// /v1/responses on the `demo` preset through the official openai client (client.responses.create
// and the SDK's own accumulating client.responses.stream). Random weights: the checks are on the
// protocol — the SDK parses every event, the streamed result (response.completed and the SDK's
// accumulated snapshot) equals the non-streamed one for the same seeded request (temperature 0
// and seeded temperature-1 sampling; text, reasoning and tool calls), tool-call history is
// accepted, forced tool calls (tool_choice required / named; grammar-constrained, issue #11)
// carry arguments that ajv accepts against the tool's schema, and errors have OpenAI's shape.
// `seed` is our extension field (docs/protocol.md), sent as an extra body field.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { collectEvents, DEMO_ARCH, demoModel, startServer, TIME, WEATHER } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';
const REQ = { model: 'demo', instructions: 'Be terse.', input: 'Say hello.', max_output_tokens: 12,
              temperature: 0, reasoning: { effort: 'high' } };
// Seeded sampling: temperature 1 with a nucleus, reproducible through `seed`.
const SAMPLED = { temperature: 1, top_p: 0.9, seed: 1234 };

const TOOLS = [
  { type: 'function', name: 'get_weather', description: 'Weather forecast', parameters: WEATHER, strict: true },
  { type: 'function', name: 'get_time', description: 'Current time', parameters: TIME, strict: true },
];
const ajv = new Ajv({ strict: false });
const VALIDATE = { get_weather: ajv.compile(WEATHER), get_time: ajv.compile(TIME) };

// History with a tool round trip: function_call + function_call_output items.
const HISTORY = [
  { role: 'user', content: 'Weather in Paris for 2 days?' },
  // Thinking mode needs the reasoning of a tool-calling turn passed back (spec §5 case 20c).
  { type: 'reasoning', id: 'rs_prev', summary: [],
    content: [{ type: 'reasoning_text', text: 'I need the forecast tool.' }] },
  { type: 'function_call', call_id: 'call_abc', name: 'get_weather', arguments: '{"city":"Paris","days":2}' },
  { type: 'function_call_output', call_id: 'call_abc', output: '{"forecast":"sunny"}' },
  { role: 'assistant', content: [{ type: 'output_text', text: 'Sunny.' }] },
  { role: 'user', content: [{ type: 'input_text', text: 'And the time in UTC?' }] },
];

function strip(r) {  // ids differ between two requests (call ids are random)
  return r.output.map((item) => {
    const { id, call_id, ...rest } = item;
    return rest;
  });
}

// Checks the framing of one streamed response's events and that the deltas of every item
// concatenate to its `.done` value; returns the terminal event.
function checkEvents(events) {
  const deltas = new Map();  // item_id -> concatenated delta
  const dones = new Map();   // item_id -> .done text / arguments
  let seq = -1;
  for (const ev of events) {
    assert.ok(ev.sequence_number > seq, 'sequence numbers increase');
    seq = ev.sequence_number;
    if (ev.type.endsWith('.delta')) deltas.set(ev.item_id, (deltas.get(ev.item_id) ?? '') + ev.delta);
    if (ev.type === 'response.function_call_arguments.done') dones.set(ev.item_id, ev.arguments);
    if (ev.type === 'response.output_text.done' || ev.type === 'response.reasoning_text.done') {
      dones.set(ev.item_id, ev.text);
    }
    if (ev.type === 'response.output_item.done' && ev.item.type === 'function_call') {
      assert.equal(ev.item.arguments, dones.get(ev.item.id));
    }
  }
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  const last = events.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  for (const [id, text] of dones) assert.equal(deltas.get(id) ?? '', text, `deltas of ${id}`);
  return last;
}

// Non-stream, the SDK's accumulating stream helper (client.responses.stream) and, with `raw`, a
// plain client.responses.create({stream: true}) for the same request; all must agree. They run
// concurrently (one batch; the server runs batch-invariant, see below). Returns the non-stream
// response.
async function agreeAll(client, req, { raw = false } = {}) {
  const helper = client.responses.stream(req);
  const helperEvents = [];
  helper.on('event', (ev) => helperEvents.push(ev));
  const [whole, final, rawList] = await Promise.all([
    client.responses.create(req),
    helper.finalResponse(),  // accumulated by the SDK from the deltas
    raw ? collectEvents(client.responses.create({ ...req, stream: true })) : null,
  ]);
  for (const events of rawList ? [helperEvents, rawList] : [helperEvents]) {
    const last = checkEvents(events);
    assert.deepEqual(strip(last.response), strip(whole));
    assert.equal(last.response.status, whole.status);
    assert.deepEqual(last.response.usage, whole.usage);
  }
  // The SDK replaces its snapshot only on response.completed (otherwise it keeps the items as
  // added, status in_progress, with the deltas appended) and adds parsed / parsed_arguments.
  const sdkView = (r, all) => strip(r).map(({ status, parsed_arguments, ...rest }) => ({
    ...rest, ...(all ? { status } : {}),
    ...(rest.content ? { content: rest.content.map(({ parsed, ...c }) => c) } : {}),
  }));
  assert.deepEqual(sdkView(final, whole.status === 'completed'),
                   sdkView(whole, whole.status === 'completed'));
  return whole;
}

function checkCalls(r, allowed) {
  assert.equal(r.status, 'completed', JSON.stringify(r.incomplete_details));
  const calls = r.output.filter((i) => i.type === 'function_call');
  assert.ok(calls.length >= 1, 'at least one function_call item');
  assert.deepEqual(r.output.filter((i) => i.type !== 'function_call' && i.type !== 'reasoning'), [],
                   'nothing but calls (and reasoning) in a forced response');
  for (const c of calls) {
    assert.ok(allowed.includes(c.name), c.name);
    assert.match(c.call_id, /^call_/);
    assert.match(c.id, /^fc_/);
    assert.equal(c.status, 'completed');
    const args = JSON.parse(c.arguments);
    assert.ok(VALIDATE[c.name](args), `${c.name} ${c.arguments}: ${ajv.errorsText(VALIDATE[c.name].errors)}`);
  }
  return calls;
}

describe('responses on the demo preset', { skip }, () => {
  let server;
  let client;
  before(async () => {
    // Batch-invariant kernels: a request's result does not depend on what it is batched with,
    // so the compared requests can run concurrently (and the suite stays fast).
    process.env.DEEPINFER_BATCH_INVARIANT = '1';
    // Exact prefix caching: a request that hits earlier requests' blocks gets the output it would
    // get uncached (a replayed hit is an approximation, README "Prefix caching"), so compared
    // requests agree whichever of them hits.
    server = await startServer(dir, ['--served-model-name', 'demo', '--prefix-cache-mode', 'exact']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await server?.stop(); });

  test('non-stream and stream agree at temperature 0; every event parses', async () => {
    const r = await agreeAll(client, REQ, { raw: true });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(r.output[0].type, 'reasoning', 'thinking is on: reasoning comes first');
  });

  test('seeded sampling (temperature 1, top_p 0.9, seed): stream equals non-stream', async () => {
    const req = { ...REQ, ...SAMPLED, max_output_tokens: 16 };
    const [a, b, other] = await Promise.all([agreeAll(client, req, { raw: true }), client.responses.create(req),
                                             client.responses.create({ ...req, seed: 99 })]);
    assert.deepEqual(strip(b), strip(a), 'the same seed reproduces the sample');
    assert.notDeepEqual(strip(other), strip(a), 'another seed samples something else');
  });

  test('history with function_call and function_call_output items', async () => {
    const req = { model: 'demo', input: HISTORY, tools: TOOLS, max_output_tokens: 6, temperature: 0 };
    const r = await agreeAll(client, req);
    assert.ok(r.usage.input_tokens > 60, 'the tools prompt and history are rendered');
    assert.deepEqual(r.tools.map((t) => t.name), ['get_weather', 'get_time']);
  });

  test('tool_choice required: function_call items valid against the schema; seeded stream equals non-stream', async () => {
    const req = { model: 'demo', input: 'Weather in Paris?', tools: TOOLS, tool_choice: 'required',
                  reasoning: { effort: 'none' }, max_output_tokens: 600, ...SAMPLED };
    const r = await agreeAll(client, req);
    checkCalls(r, ['get_weather', 'get_time']);
    assert.equal(r.tool_choice, 'required');
  });

  test('a forced call cut off by max_output_tokens: the same incomplete function_call streamed and not', async () => {
    // docs/protocol.md "Truncated tool calls".
    let truncated = 0;
    // V4.1's spaced DSML names (` invoke name=`) take more tokens to reach the tool name.
    for (const max_output_tokens of [5, 9, 13, 18, 24, ...(DEMO_ARCH === 'deepseek_v41' ? [30, 36, 42, 48] : [])]) {
      const req = { model: 'demo', input: 'Weather in Paris?', tools: TOOLS, tool_choice: 'required',
                    reasoning: { effort: 'none' }, max_output_tokens, ...SAMPLED, seed: 8 };
      const r = await agreeAll(client, req, { raw: true });
      const calls = r.output.filter((i) => i.type === 'function_call');
      if (r.status === 'incomplete' && calls.length > 0) {
        assert.equal(r.incomplete_details.reason, 'max_output_tokens');
        const last = calls.at(-1);
        assert.ok(['get_weather', 'get_time'].includes(last.name));
        if (last.status === 'incomplete') {
          truncated += 1;
        } else {
          // Cut after a finished call, before the next call's name (parallel calls are allowed):
          // every listed call is whole.
          assert.equal(last.status, 'completed');
          for (const c of calls) JSON.parse(c.arguments);
        }
      }
    }
    assert.ok(truncated > 0, 'some max_output_tokens value cut a call after its name');
  });

  test('named tool_choice and parallel_tool_calls false: exactly one call of that tool', async () => {
    const req = { model: 'demo', input: 'Time?', tools: TOOLS, parallel_tool_calls: false,
                  tool_choice: { type: 'function', name: 'get_time' }, reasoning: { effort: 'none' },
                  max_output_tokens: 150, ...SAMPLED, seed: 5 };
    const r = await agreeAll(client, req);
    const calls = checkCalls(r, ['get_time']);
    assert.equal(calls.length, 1);
  });

  test('errors have the OpenAI shape and class', async () => {
    const bad = (e, param) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
      e.type === 'invalid_request_error' && (param === undefined || e.param === param);
    await assert.rejects(client.responses.create({ ...REQ, previous_response_id: 'resp_x' }),
                         (e) => bad(e, 'previous_response_id'));
    await assert.rejects(client.responses.create({ model: 'demo', input: [{ role: 'tool', content: 'x' }] }),
                         (e) => bad(e, 'input[0].role'));
    await assert.rejects(client.responses.create({
      model: 'demo', input: [{ role: 'user', content: 'x' },
                             { type: 'function_call_output', call_id: 'call_nope', output: 'y' }],
    }), (e) => bad(e, 'input[1]') && /call_nope/.test(e.message));
    await assert.rejects(client.responses.create({
      model: 'demo', input: 'x', tools: TOOLS, tool_choice: { type: 'function', name: 'nope' },
    }), (e) => bad(e, 'tool_choice.name') && /nope/.test(e.message));
    await assert.rejects(client.responses.create({ ...REQ, seed: 'x' }), (e) => bad(e, 'seed'));
    // Beyond the context: the error names the Responses field, not Chat's max_tokens.
    await assert.rejects(client.responses.create({ ...REQ, max_output_tokens: 100000000 }),
                         (e) => bad(e, 'max_output_tokens') && e.code === 'context_length_exceeded');
    await assert.rejects(client.responses.create({ ...REQ, top_logprobs: 2 }),
                         (e) => bad(e, 'top_logprobs'));
  });
});
