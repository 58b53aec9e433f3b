// Issue #22 parts 2, 5 and the image point, through the official `openai` and
// `@anthropic-ai/sdk` clients on the `demo` preset (random weights: every assertion holds for
// any numerics, i.e. whatever the model reasons or samples):
//   * forced tool calls with thinking on (tool_choice required / named, Messages any / tool,
//     Responses required): the model reasons, then the grammar forces the DSML call after
//     `</think>`; the call parses and validates with ajv, stream equals non-stream. With `</think>`
//     biased away the reasoning never ends by itself, so only the forced `</think>` (tokens left
//     would no longer fit the call) can produce the call.
//   * reasoning budgets: vLLM's thinking_token_budget on Chat (reasoning tokens <= budget + 1),
//     Messages thinking.budget_tokens (the reply goes past the thinking within max_tokens);
//   * generation_config.json defaults (temperature 0 there: seeds stop mattering);
//   * min_tokens holds back stop strings (Chat, Messages), stop_token_ids on Responses and
//     Messages;
//   * image parts are a 400 in each API's error shape.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { collectEvents, demoModel, startServer, TIME, WEATHER } from './helpers.mjs';

const dir = demoModel();
const skip = dir ? false : 'the demo checkpoint could not be generated (deepinfer make-test-model)';

const ajv = new Ajv({ strict: false });
const VALIDATE = { get_weather: ajv.compile(WEATHER), get_time: ajv.compile(TIME) };
const CHAT_TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: WEATHER } },
  { type: 'function', function: { name: 'get_time', description: 'Time', parameters: TIME } },
];

// Token ids read from the checkpoint's tokenizer.json (not from the server).
function tokenizerJson() {
  return JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
}
function addedId(content) {
  const t = tokenizerJson().added_tokens.find((x) => x.content === content);
  assert.ok(t, `${content} in tokenizer.json`);
  return t.id;
}
function vocabSize() {
  const tok = tokenizerJson();
  let max = 0;
  for (const id of Object.values(tok.model.vocab)) max = Math.max(max, id);
  for (const t of tok.added_tokens) max = Math.max(max, t.id);
  return max + 1;
}

function checkChatCalls(choice, names) {
  assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
  const calls = choice.message.tool_calls ?? [];
  assert.ok(calls.length >= 1, 'at least one call');
  for (const c of calls) {
    assert.ok(names.includes(c.function.name), c.function.name);
    const args = JSON.parse(c.function.arguments);
    const v = VALIDATE[c.function.name];
    assert.ok(v(args), `${c.function.name}(${c.function.arguments}): ${ajv.errorsText(v.errors)}`);
  }
  return calls;
}

// The streamed chat choice 0 accumulated like the SDK user would.
async function streamedChat(client, req) {
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const out = { content: '', reasoning_content: '', tool_calls: [], finish_reason: null };
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) out.finish_reason = ch.finish_reason;
    out.content += ch.delta?.content ?? '';
    out.reasoning_content += ch.delta?.reasoning_content ?? '';
    for (const d of ch.delta?.tool_calls ?? []) {
      out.tool_calls[d.index] ??= { name: '', arguments: '' };
      if (d.function?.name) out.tool_calls[d.index].name += d.function.name;
      if (d.function?.arguments) out.tool_calls[d.index].arguments += d.function.arguments;
    }
  }
  return out;
}

describe('generation_config.json defaults for omitted sampling fields', { skip }, () => {
  let server;
  let tmp;
  before(async () => {
    // The demo checkpoint's files (symlinked) plus a generation_config.json asking for greedy
    // decoding: requests that omit temperature must then not depend on their seed.
    tmp = fs.mkdtempSync(path.join(path.dirname(dir), 'gen-config-'));
    for (const f of fs.readdirSync(dir)) {
      if (f !== 'generation_config.json') fs.symlinkSync(path.resolve(dir, f), path.join(tmp, f));
    }
    fs.writeFileSync(path.join(tmp, 'generation_config.json'), JSON.stringify({ temperature: 0, top_p: 0.5 }));
    server = await startServer(tmp, ['--served-model-name', 'demo', '--prefix-cache-mode', 'exact']);
  });
  after(async () => {
    await server?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });
  test('temperature from generation_config.json: seeds do not matter; a sent temperature wins', async () => {
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
    const req = { model: 'demo', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12,
                  thinking: { type: 'disabled' } };
    const texts = [];
    for (const seed of [1, 2, 3]) {
      texts.push((await client.chat.completions.create({ ...req, seed })).choices[0].message.content);
    }
    assert.equal(new Set(texts).size, 1, JSON.stringify(texts));
    const sampled = [];
    for (const seed of [1, 2, 3, 4]) {
      sampled.push((await client.chat.completions.create({ ...req, seed, temperature: 1, top_p: 1 })).choices[0].message.content);
    }
    assert.ok(new Set(sampled).size > 1, 'temperature 1 sent by the client samples');
  });
});

describe('thinking + forced tools, budgets, min_tokens, stop_token_ids, images', { skip }, () => {
  let server;
  let openai;
  let anthropic;
  let thinkEnd;

  before(async () => {
    // Exact prefix caching: a hit gives the uncached output, so stream / non-stream compare
    // whichever request hits (README "Prefix caching").
    server = await startServer(dir, ['--served-model-name', 'demo', '--prefix-cache-mode', 'exact']);
    openai = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
    anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
    thinkEnd = addedId('</think>');
  });
  after(async () => {
    const r = await server?.stop();
    assert.equal(r?.code, 0, 'graceful shutdown exits 0');
  });

  test('Chat: required / named with thinking on (the default) reason, then a valid call; stream equals non-stream', async () => {
    for (const [tool_choice, names] of [['required', ['get_weather', 'get_time']],
      [{ type: 'function', function: { name: 'get_time' } }, ['get_time']]]) {
      for (const seed of [1, 2]) {
        // `</think>` biased away: the reasoning only ends because the server forces it once the
        // tokens left would no longer fit the call (without that: finish_reason length).
        const req = { model: 'demo', messages: [{ role: 'user', content: 'Weather or time?' }],
                      tools: CHAT_TOOLS, tool_choice, max_tokens: 240, temperature: 1, seed,
                      logit_bias: { [thinkEnd]: -100 } };
        const [r, s] = await Promise.all([openai.chat.completions.create(req), streamedChat(openai, req)]);
        const calls = checkChatCalls(r.choices[0], names);
        assert.equal(typeof r.choices[0].message.reasoning_content, 'string');
        assert.ok(r.usage.completion_tokens_details.reasoning_tokens >= 1);
        assert.ok(r.usage.completion_tokens <= 240);
        assert.equal(s.finish_reason, 'tool_calls');
        assert.equal(s.reasoning_content, r.choices[0].message.reasoning_content);
        assert.deepEqual(s.tool_calls, calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })));
      }
    }
  });

  test('Chat: thinking_token_budget ends the reasoning (reasoning tokens <= budget + 1)', async () => {
    for (const budget of [0, 5, 17]) {
      const r = await openai.chat.completions.create({
        model: 'demo', messages: [{ role: 'user', content: 'Think briefly.' }], max_tokens: 40,
        temperature: 1, seed: budget, thinking_token_budget: budget, logit_bias: { [thinkEnd]: -100 },
      });
      const reasoning = r.usage.completion_tokens_details.reasoning_tokens;
      assert.ok(reasoning <= budget + 1, `reasoning ${reasoning} > ${budget} + 1`);
      // The reasoning ended before max_tokens, so the answer had its turn.
      assert.ok(r.usage.completion_tokens > reasoning || r.choices[0].finish_reason === 'stop',
        JSON.stringify(r.usage));
    }
  });

  test('Responses: tool_choice required with reasoning on: function_call items validate; stream equals non-stream', async () => {
    const req = { model: 'demo', input: 'Call a tool', max_output_tokens: 240, temperature: 1, seed: 5,
                  tool_choice: 'required',
                  tools: [{ type: 'function', name: 'get_weather', parameters: WEATHER, strict: false },
                    { type: 'function', name: 'get_time', parameters: TIME, strict: false }] };
    const r = await openai.responses.create(req);
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1, JSON.stringify(r.output));
    for (const c of calls) assert.ok(VALIDATE[c.name](JSON.parse(c.arguments)), `${c.name}(${c.arguments})`);
    const events = await collectEvents(openai.responses.create({ ...req, stream: true }));
    const done = events.find((e) => e.type === 'response.completed');
    assert.ok(done, 'response.completed');
    const streamed = done.response.output.filter((o) => o.type === 'function_call');
    assert.deepEqual(streamed.map((c) => [c.name, c.arguments]), calls.map((c) => [c.name, c.arguments]));
  });

  test('Messages: tool_choice any / tool with thinking on: thinking, then valid tool_use; stream equals create', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather', input_schema: WEATHER },
      { name: 'get_time', description: 'Time', input_schema: TIME }];
    for (const [tool_choice, names] of [[{ type: 'any' }, ['get_weather', 'get_time']],
      [{ type: 'tool', name: 'get_weather' }, ['get_weather']]]) {
      const req = { model: 'demo', max_tokens: 240, temperature: 1, seed: 3, tools, tool_choice,
                    messages: [{ role: 'user', content: 'Weather in Paris?' }] };
      const [m, final] = await Promise.all([anthropic.messages.create(req),
        anthropic.messages.stream(req).finalMessage()]);
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
      // Reasoning first (a thinking block unless the model closed it at once), never text.
      assert.deepEqual(m.content.filter((b) => b.type === 'text'), []);
      const firstUse = m.content.findIndex((b) => b.type === 'tool_use');
      assert.ok(m.content.slice(0, firstUse).every((b) => b.type === 'thinking'));
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.ok(uses.length >= 1);
      for (const u of uses) {
        assert.ok(names.includes(u.name), u.name);
        assert.ok(VALIDATE[u.name](u.input), `${u.name} ${JSON.stringify(u.input)}`);
      }
      const strip = (msg) => msg.content.map(({ id, ...rest }) => rest);
      assert.deepEqual(strip(final), strip(m));
    }
  });

  test('Messages: thinking.budget_tokens ends the reasoning before max_tokens', async () => {
    // The random model practically never closes `</think>` by itself (README "demo"); with the
    // budget the server forces it after 1024 reasoning tokens, so the reply goes on past the
    // thinking block (text, a tool call, or end_turn) within max_tokens.
    const m = await anthropic.messages.create({
      model: 'demo', max_tokens: 1064, temperature: 1, seed: 11,
      thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [{ role: 'user', content: 'Think, then answer.' }],
    });
    assert.equal(m.content[0]?.type, 'thinking', JSON.stringify(m.content).slice(0, 200));
    assert.ok(m.stop_reason !== 'max_tokens' || m.content.some((b) => b.type !== 'thinking'),
      `reasoning used the whole max_tokens: ${m.stop_reason} ${m.usage.output_tokens}`);
  });

  test('min_tokens holds back stop strings (Chat, Messages): at least min_tokens tokens', async () => {
    // Stop strings that random text hits within a few tokens; without min_tokens' hold-back the
    // output would end before 24 tokens.
    const stop = ['e', 'a', ' ', 'o', 'i'];
    for (const seed of [1, 2, 3]) {
      const c = await openai.chat.completions.create({
        model: 'demo', messages: [{ role: 'user', content: 'Write.' }], thinking: { type: 'disabled' },
        max_tokens: 40, min_tokens: 24, stop, temperature: 1, seed,
      });
      assert.ok(c.usage.completion_tokens >= 24, JSON.stringify(c.usage));
      const m = await anthropic.messages.create({
        model: 'demo', max_tokens: 40, min_tokens: 24, stop_sequences: stop, temperature: 1, seed,
        thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Write.' }],
      });
      assert.ok(m.usage.output_tokens >= 24, JSON.stringify(m.usage));
    }
  });

  test('stop_token_ids on Responses and Messages: every id listed ends at the first token', async () => {
    const ids = Array.from({ length: vocabSize() }, (_, i) => i);
    const r = await openai.responses.create({
      model: 'demo', input: 'Hi', max_output_tokens: 16, temperature: 1, seed: 1,
      reasoning: { effort: 'none' }, stop_token_ids: ids,
    });
    assert.equal(r.status, 'completed');
    assert.equal(r.usage.output_tokens, 1);
    const m = await anthropic.messages.create({
      model: 'demo', max_tokens: 16, temperature: 1, seed: 1, thinking: { type: 'disabled' },
      stop_token_ids: ids, messages: [{ role: 'user', content: 'Hi' }],
    });
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.usage.output_tokens, 1);
    await assert.rejects(
      anthropic.messages.create({ model: 'demo', max_tokens: 4, stop_token_ids: [1 << 30],
        messages: [{ role: 'user', content: 'Hi' }] }),
      (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' &&
        /stop_token_ids/.test(e.error.error.message));
  });

  test('image parts: a 400 in each API\'s error shape (no vision encoder yet)', async () => {
    const png = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
    await assert.rejects(
      openai.chat.completions.create({ model: 'demo', max_tokens: 4, messages: [{ role: 'user', content: [
        { type: 'text', text: 'What is it?' }, { type: 'image_url', image_url: { url: png } }] }] }),
      (e) => e.status === 400 && /image input is not supported/.test(e.message) &&
        e.param === 'messages[0].content');
    await assert.rejects(
      openai.responses.create({ model: 'demo', max_output_tokens: 4, input: [{ role: 'user', content: [
        { type: 'input_text', text: 'What is it?' }, { type: 'input_image', image_url: png }] }] }),
      (e) => e.status === 400 && /image input is not supported/.test(e.message));
    await assert.rejects(
      anthropic.messages.create({ model: 'demo', max_tokens: 4, messages: [{ role: 'user', content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png.split(',')[1] } },
        { type: 'text', text: 'What is it?' }] }] }),
      (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error' &&
        /image input is not supported/.test(e.error.error.message));
  });
});
