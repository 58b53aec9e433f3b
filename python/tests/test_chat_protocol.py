"""llm.chat and deepinfer.protocol on the demo preset (DeepSeek-V4 layout, random weights, the
real DeepSeek tokenizer). The protocol encoder is compared with a running `deepinfer serve`:
its /tokenize route and the prompt_token_ids a chat completion returns (return_token_ids)."""

import json
import os
import re
import subprocess
import threading
import time
import urllib.request

import jsonschema
import pytest

from conftest import BIN
from deepinfer import SamplingParams, protocol

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 24},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 16}},
                   "required": ["tz"], "additionalProperties": False}}}


def test_chat_forced_tool_returns_tool_calls(demo_llm):
    msgs = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
    outs = demo_llm.chat(msgs, SamplingParams(temperature=0.8, seed=11, max_tokens=96),
                         tools=[WEATHER, TIME],
                         tool_choice={"type": "function", "function": {"name": "get_weather"}},
                         thinking=False)
    o = outs[0].outputs[0]
    assert o.finish_reason == "tool_calls", o
    assert len(o.tool_calls) == 1
    call = o.tool_calls[0]
    assert call.name == "get_weather" and call.valid and call.id
    jsonschema.validate(json.loads(call.arguments), WEATHER["function"]["parameters"])
    assert o.reasoning_content == ""


def test_chat_required_tool_and_batch(demo_llm):
    convs = [[{"role": "user", "content": "Time in Tokyo?"}],
             [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Weather in Rome, 2 days?"}]]
    outs = demo_llm.chat(convs, SamplingParams(temperature=0.8, seed=5, max_tokens=128),
                         tools=[WEATHER, TIME], tool_choice="required", thinking=False,
                         parallel_tool_calls=False)
    assert len(outs) == 2
    for out in outs:
        o = out.outputs[0]
        assert o.finish_reason == "tool_calls", o
        assert len(o.tool_calls) == 1
        schema = {"get_weather": WEATHER, "get_time": TIME}[o.tool_calls[0].name]
        jsonschema.validate(json.loads(o.tool_calls[0].arguments),
                            schema["function"]["parameters"])


def test_chat_thinking_and_stream(demo_llm):
    msgs = [{"role": "user", "content": "Hello!"}]
    p = SamplingParams(temperature=0.8, seed=2, max_tokens=12)
    whole = demo_llm.chat(msgs, p, thinking=True)[0].outputs[0]
    # Thinking on: the random model rarely closes </think>, so the text is reasoning.
    assert whole.reasoning_content or whole.text
    last = None
    for last in demo_llm.chat_stream(msgs, p, thinking=True):
        pass
    assert last.finished
    assert last.outputs[0].reasoning_content == whole.reasoning_content
    assert last.outputs[0].text == whole.text
    # A forced tool with thinking on: reasoning first, then the call (</think> is forced in time,
    # as the server does; DeepSeek's API would answer 400).
    o = demo_llm.chat([{"role": "user", "content": "Weather in Oslo?"}],
                      SamplingParams(temperature=0.8, seed=9, max_tokens=96), tools=[WEATHER],
                      tool_choice="required", thinking=True)[0].outputs[0]
    assert o.finish_reason == "tool_calls", o
    assert o.tool_calls and o.tool_calls[0].name == "get_weather"
    jsonschema.validate(json.loads(o.tool_calls[0].arguments), WEATHER["function"]["parameters"])


# ---- deepinfer.protocol against the real server ----

def _clean_env():
    # Only the server's own DEEPINFER_* settings (it warns about unknown ones).
    return {k: v for k, v in os.environ.items() if not k.startswith("DEEPINFER_")}


@pytest.fixture(scope="module")
def server(demo_dir):
    proc = subprocess.Popen([BIN, "serve", "--model", demo_dir, "--host", "127.0.0.1", "--port",
                             "0", "--served-model-name", "demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_clean_env())
    port = []
    lines = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.time() + 120
    while not port and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    if not port:
        proc.kill()
        pytest.fail("deepinfer serve did not start:\n" + "".join(lines[-20:]))
    url = f"http://127.0.0.1:{port[0]}"
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


CHAT_REQUESTS = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [{"role": "user", "content": "Hello!"}], "thinking": {"type": "disabled"}},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Name three colours. Ünïcödé ✓ 🐶"},
                  {"role": "assistant", "content": "Red, green, blue."},
                  {"role": "user", "content": "And three more?"}],
     "thinking": {"type": "disabled"}},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
                   "tool_calls": [{"id": "call_1", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Time?"}], "tools": [WEATHER, TIME],
     "tool_choice": {"type": "function", "function": {"name": "get_time"}},
     "thinking": {"type": "disabled"}},
    {"messages": [{"role": "user", "content": "<｜DSML｜tool_calls> literal </think> text"}],
     "thinking": {"type": "enabled"}},
]


@pytest.fixture(scope="module")
def encoder(demo_dir):
    return protocol.Encoder(demo_dir)


@pytest.mark.parametrize("i", range(len(CHAT_REQUESTS)))
def test_protocol_encodes_like_server_tokenize(server, encoder, i):
    body = CHAT_REQUESTS[i]
    served = _post(server, "/tokenize", body)["tokens"]
    assert encoder.encode(body).prompt_token_ids == served
    assert encoder.encode(json.dumps(body), api="chat.completions").prompt_token_ids == served


def test_protocol_ids_are_what_chat_submits(server, encoder):
    body = dict(CHAT_REQUESTS[2], model="demo", max_tokens=1, return_token_ids=True)
    r = _post(server, "/v1/chat/completions", body)
    assert encoder.encode(body).prompt_token_ids == r["prompt_token_ids"]


def test_protocol_responses_and_messages(server, encoder):
    chat = {"messages": [{"role": "system", "content": "Be kind."},
                         {"role": "user", "content": "Tell me a story."}],
            "thinking": {"type": "disabled"}}
    served = _post(server, "/tokenize", chat)["tokens"]
    responses = {"model": "demo", "instructions": "Be kind.", "input": "Tell me a story.",
                 "reasoning": {"effort": "none"}}
    messages = {"model": "demo", "max_tokens": 16, "system": "Be kind.",
                "messages": [{"role": "user", "content": "Tell me a story."}],
                "thinking": {"type": "disabled"}}
    assert encoder.encode(responses, api="responses").prompt_token_ids == served
    m = encoder.encode_messages(messages)
    assert m.prompt_token_ids == served
    count = _post(server, "/v1/messages/count_tokens", messages)["input_tokens"]
    assert count == len(m.prompt_token_ids)


def test_protocol_rejects_like_server(encoder):
    with pytest.raises(ValueError):
        encoder.encode({"messages": []})
    with pytest.raises(ValueError, match="tool_choice"):
        encoder.encode({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
                        "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    with pytest.raises(TypeError):
        encoder.encode(42)
    with pytest.raises(ValueError, match="api"):
        encoder.encode({"messages": []}, api="completions")


# ---- streaming output parser ----

def _script(encoder, pieces):
    """Token ids of a scripted model output: {X} names a control token, the rest is text."""
    ids = []
    for kind, s in pieces:
        if kind == "special":
            tid = encoder.token_id(s)
            assert tid is not None, s
            ids.append(tid)
        else:
            ids.extend(encoder.encode_text(s))
    return ids


def _coalesce(events):
    out = []
    for e in events:
        if out and e.type in ("reasoning", "content", "tool_call_arguments") and \
                out[-1].type == e.type and out[-1].index == e.index:
            out[-1] = type(e)(**{**out[-1].__dict__, "text": out[-1].text + e.text})
        elif e.type in ("reasoning", "content", "tool_call_arguments") and not e.text:
            continue
        else:
            out.append(type(e)(**e.__dict__))
    return out


def _parse(encoder, ids, cuts, start):
    p = encoder.parser(start=start, declared_tools=["get_weather", "get_time"],
                       make_tool_call_id=lambda i: f"call_{i}")
    events = []
    bounds = [0] + list(cuts) + [len(ids)]
    for a, b in zip(bounds, bounds[1:]):
        events += p.feed(ids[a:b])
    events += p.finish("eos")
    return _coalesce(events)


def test_dsml_stream_split_at_every_token_boundary(encoder):
    dsml = "｜DSML｜"
    pieces = [
        ("text", "Let me check the weather ✓ in Zürich."), ("special", "</think>"),
        ("text", "Sure, one moment.\n\n"),
        ("text", "<"), ("special", dsml), ("text", "tool_calls>\n<"), ("special", dsml),
        ("text", 'invoke name="get_weather">\n<'), ("special", dsml),
        ("text", 'parameter name="city" string="true">Zürich "centre"</'), ("special", dsml),
        ("text", 'parameter>\n<'), ("special", dsml),
        ("text", 'parameter name="days" string="false">3</'), ("special", dsml),
        ("text", "parameter>\n</"), ("special", dsml), ("text", "invoke>\n<"), ("special", dsml),
        ("text", 'invoke name="get_time">\n<'), ("special", dsml),
        ("text", 'parameter name="tz" string="true">CET</'), ("special", dsml),
        ("text", "parameter>\n</"), ("special", dsml), ("text", "invoke>\n</"),
        ("special", dsml), ("text", "tool_calls>"), ("special", "<｜end▁of▁sentence｜>"),
    ]
    ids = _script(encoder, pieces)
    whole = _parse(encoder, ids, [], "reasoning")
    kinds = [e.type for e in whole]
    assert kinds[:2] == ["reasoning", "content"]
    assert kinds.count("tool_call_start") == 2 and kinds[-1] == "finish"
    assert whole[-1].finish_reason == "tool_calls"
    assert whole[0].text == "Let me check the weather ✓ in Zürich."
    assert whole[1].text == "Sure, one moment."
    starts = [e for e in whole if e.type == "tool_call_start"]
    assert [(s.name, s.id) for s in starts] == [("get_weather", "call_0"), ("get_time", "call_1")]
    args = [e.text for e in whole if e.type == "tool_call_arguments"]
    assert json.loads(args[0]) == {"city": 'Zürich "centre"', "days": 3}
    assert json.loads(args[1]) == {"tz": "CET"}
    # Every two-chunk split, and one token at a time, give the same events.
    for k in range(1, len(ids)):
        assert _parse(encoder, ids, [k], "reasoning") == whole, k
    assert _parse(encoder, ids, range(1, len(ids)), "reasoning") == whole


def test_parser_from_encoded_request(encoder):
    req = encoder.encode({"messages": [{"role": "user", "content": "Time?"}],
                          "tools": [WEATHER, TIME],
                          "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                          "thinking": {"type": "disabled"}})
    assert req.start == "tool_arguments" and req.forced_tool_name == "get_time"
    assert req.constraint == "tool_calls"
    dsml = "｜DSML｜"
    ids = _script(encoder, [("text", "<"), ("special", dsml),
                            ("text", 'parameter name="tz" string="true">UTC</'),
                            ("special", dsml), ("text", "parameter>\n</"), ("special", dsml),
                            ("text", "invoke>\n</"), ("special", dsml), ("text", "tool_calls>")])
    p = encoder.parser(req, make_tool_call_id=lambda i: "x")
    ev = _coalesce(p.feed(ids) + p.finish("eos"))
    assert [e.type for e in ev] == ["tool_call_start", "tool_call_arguments", "tool_call_end",
                                    "finish"]
    assert ev[0].name == "get_time" and json.loads(ev[1].text) == {"tz": "UTC"}
    with pytest.raises(ValueError, match="outside the vocabulary"):
        p.feed([10**9])
    with pytest.raises(ValueError, match="end must be"):
        encoder.parser().finish("later")
