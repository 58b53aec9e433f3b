"""Documented exceptions for bad arguments, engine errors as Python exceptions with the Status
message, Ctrl-C aborts cleanly, and no KV block stays in use after 1,000 requests."""

import os
import signal
import threading
import time

import pytest

import deepinfer
from deepinfer import LLM, SamplingParams


@pytest.mark.parametrize("kwargs,exc,word", [
    ({"temperature": -0.5}, ValueError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": float("nan")}, ValueError, "top_p"),
    ({"top_k": 1.5}, TypeError, "top_k"),
    ({"max_tokens": 0}, ValueError, "max_tokens"),
    ({"max_tokens": 1 << 40}, ValueError, "max_tokens"),
    ({"top_k": 1 << 70}, ValueError, "top_k"),
    ({"min_tokens": 20, "max_tokens": 10}, ValueError, "min_tokens"),
    ({"n": 0}, ValueError, "n"),
    ({"logprobs": 50}, ValueError, "logprobs"),
    ({"presence_penalty": 3.0}, ValueError, "presence_penalty"),
    ({"repetition_penalty": 0.0}, ValueError, "repetition_penalty"),
    ({"seed": "1"}, TypeError, "seed"),
    ({"seed": 1 << 64}, ValueError, "seed"),
    ({"seed": 1, "seq_seed": 2}, ValueError, "seq_seed"),
    ({"stop": 5}, TypeError, "stop"),
    ({"stop_token_ids": ["a"]}, TypeError, "stop_token_ids"),
    ({"ignore_eos": 1}, TypeError, "ignore_eos"),
    ({"so_args": "json"}, TypeError, "so_args"),
    ({"so_args": {"schema_type": "yaml", "schema": "x"}}, ValueError, "schema_type"),
    ({"so_args": {"schema_type": "regex", "schema": "(a"}}, ValueError, "regex"),
    ({"so_args": {"schema_type": "json_schema", "schema": "{not json"}}, ValueError, "so_args"),
    ({"so_args": {"schema_type": "json_object", "schema": "{}"}}, ValueError, "json_object"),
    ({"so_args": {"schema_type": "regex"}}, ValueError, "schema"),
    ({"so_args": {"schema_type": "regex", "schema": "a", "whitespace": "flexible"}}, ValueError,
     "whitespace"),
    ({"so_args": {"schema_type": "regex", "schema": "a", "extra": 1}}, ValueError, "extra"),
    ({"bogus": 1}, TypeError, "bogus"),
])
def test_sampling_params_errors(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        SamplingParams(**kwargs)


def test_llm_errors(stories_dir, stories_llm, monkeypatch):
    monkeypatch.delenv("DEEPINFER_HF_MODEL_DIR", raising=False)
    with pytest.raises(ValueError, match="model"):
        LLM()
    with pytest.raises(FileNotFoundError, match="/nonexistent"):
        LLM(model="/nonexistent/model")
    with pytest.raises(TypeError, match="gpu_memory"):
        LLM(model=stories_dir, gpu_memory_utilization=0.9)
    with pytest.raises(TypeError, match="max_num_seqs"):
        LLM(model=stories_dir, max_num_seqs="8")
    with pytest.raises(ValueError, match="kv_memory_bytes"):
        LLM(model=stories_dir, kv_memory_bytes=0)
    with pytest.raises(TypeError, match="model"):
        LLM(model=42)
    with pytest.raises(ValueError, match="model_dir"):
        deepinfer.protocol.Encoder()
    # DEEPINFER_HF_MODEL_DIR is the default model.
    monkeypatch.setenv("DEEPINFER_HF_MODEL_DIR", stories_dir)
    assert LLM(kv_memory_bytes=8 << 20).model == stories_dir

    with pytest.raises(TypeError, match="prompts"):
        stories_llm.generate(5)
    with pytest.raises(TypeError, match="prompts"):
        stories_llm.generate([1.5, 2.5])
    with pytest.raises(TypeError, match="sampling_params"):
        stories_llm.generate("x", {"temperature": 0})
    with pytest.raises(ValueError, match="sampling_params"):
        stories_llm.generate(["a", "b"], [SamplingParams(), SamplingParams(), SamplingParams()])
    # Engine errors keep the Status message.
    with pytest.raises(ValueError, match="vocabulary"):
        stories_llm.generate([[1, 100000]])
    with pytest.raises(ValueError, match="prompt 0"):
        stories_llm.generate([[1] * 600])  # longer than the 512-token context
    with pytest.raises(RuntimeError, match="chat template"):
        stories_llm.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(TypeError, match="messages"):
        stories_llm.chat("hi")
    with pytest.raises(RuntimeError, match="chat template"):
        deepinfer.protocol.Encoder(stories_dir)
    with pytest.raises(ValueError, match="token_ids"):
        stories_llm.decode([-1])
    # Nothing above left a request behind.
    _wait_idle(stories_llm)


def _wait_idle(llm, timeout_s=10.0):
    # The engine frees a finished request's blocks on its own thread right after the last
    # output: give it a moment.
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        s = llm.stats()
        if s["kv_blocks_used"] == 0 and s["state_slots_used"] == 0 and s["num_running"] == 0 \
                and s["num_waiting"] == 0:
            return s
        time.sleep(0.01)
    return llm.stats()


def test_thousand_requests_leave_no_blocks_in_use(stories_dir):
    llm = LLM(model=stories_dir, kv_memory_bytes=16 << 20, max_num_seqs=64)
    words = ["Once", "The", "Lily", "Tom", "A", "One", "Ben", "She"]
    prompts = [f"{words[i % 8]} {words[(i // 8) % 8]} saw a {i % 13} day" for i in range(1000)]
    params = [SamplingParams(temperature=0.9, max_tokens=4 + i % 9, seed=i,
                             stop=["zzz"] if i % 5 == 0 else None, n=1 + (i % 7 == 0))
              for i in range(1000)]
    outs = llm.generate(prompts, params)
    assert len(outs) == 1000
    assert all(o.finished for o in outs)
    for i, o in enumerate(outs):
        assert len(o.outputs) == params[i].n
        for c in o.outputs:
            assert c.finish_reason in ("stop", "length")
            assert 1 <= len(c.token_ids) <= params[i].max_tokens
    s = _wait_idle(llm)
    assert s["kv_blocks_used"] == 0, s
    assert s["state_slots_used"] == 0, s
    assert s["num_running"] == 0 and s["num_waiting"] == 0, s
    assert s["num_finished_requests"] >= 1000


def test_ctrl_c_aborts_and_frees(stories_dir):
    llm = LLM(model=stories_dir, kv_memory_bytes=16 << 20, max_num_seqs=8)
    p = SamplingParams(temperature=0.8, max_tokens=400, ignore_eos=True, seed=1)
    # SIGINT from another thread while the main thread waits in generate().
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.time()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["Once upon a time"] * 64, p)  # 64 x 400 tokens: far longer than 0.3 s
    assert time.time() - start < 20
    timer.join()
    s = _wait_idle(llm)
    assert s["kv_blocks_used"] == 0 and s["num_running"] == 0, s
    # The LLM still works after the interrupt.
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4


def test_stream_break_aborts(stories_dir):
    llm = LLM(model=stories_dir, kv_memory_bytes=16 << 20, max_num_seqs=8)
    it = llm.stream(["Once upon a time"] * 4, SamplingParams(temperature=0.8, max_tokens=400,
                                                             ignore_eos=True, seed=3))
    for n, _ in enumerate(it):
        if n == 3:
            break
    it.close()
    s = _wait_idle(llm)
    assert s["kv_blocks_used"] == 0 and s["num_running"] == 0, s


def test_gil_released_while_generating(stories_dir):
    llm = LLM(model=stories_dir, kv_memory_bytes=16 << 20, max_num_seqs=8)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    llm.generate(["Once upon a time"] * 8, SamplingParams(temperature=0.8, max_tokens=200,
                                                          ignore_eos=True, seed=4))
    stop.set()
    t.join()
    assert len(ticks) > 10  # the other Python thread ran while the engine worked
