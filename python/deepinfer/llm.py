"""LLM: DeepInfer's offline API (vLLM's LLM shape) over the C++ engine::LLM.

    from deepinfer import LLM, SamplingParams
    llm = LLM(model="path/to/hf_dir")          # or DEEPINFER_HF_MODEL_DIR
    outs = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32))

The engine runs on its own C++ threads; the GIL is released while Python waits for it, and
Ctrl-C (KeyboardInterrupt) aborts the call's requests, which free their KV blocks before the
exception propagates.
"""

import json
import os

from ._native import native
from .outputs import request_output
from .sampling_params import SamplingParams

# Engine options accepted as keyword arguments (EngineConfig / LLMOptions; docs/python.md).
_ENGINE_OPTIONS = {
    "kv_memory_bytes": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "enable_prefix_caching": bool,
    "async_scheduling": bool,
    "compile_threads": int,
    "fp32_activations": bool,
}

# How long one wait on the engine lasts before Python gets the chance to handle Ctrl-C (s).
_POLL_S = 0.05


def _normalise_prompts(prompts):
    """str | list[int] | {"prompt"|"prompt_token_ids": ...} | a list of those -> list."""
    def one(p):
        if isinstance(p, str):
            return p
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                return one(list(p["prompt_token_ids"]))
            if "prompt" in p and isinstance(p["prompt"], str):
                return p["prompt"]
            raise TypeError("prompts: a dict prompt needs 'prompt' (str) or 'prompt_token_ids'")
        if isinstance(p, (list, tuple)) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in p):
            if not all(0 <= t < (1 << 31) for t in p):
                raise ValueError("prompts: token ids must be in [0, 2**31)")
            return list(p)
        raise TypeError("prompts: each prompt must be a str, a list of token ids or a dict, got "
                        f"{type(p).__name__}")

    if isinstance(prompts, (str, dict)):
        return [one(prompts)], True
    if isinstance(prompts, (list, tuple)):
        if prompts and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
            return [one(list(prompts))], True
        return [one(p) for p in prompts], False
    raise TypeError(f"prompts: expected a str, a list of token ids or a list of prompts, got "
                    f"{type(prompts).__name__}")


class LLM:
    """A model loaded for offline generation.

    Args:
      model: Hugging Face directory (config.json, *.safetensors, tokenizer.json). Default:
        $DEEPINFER_HF_MODEL_DIR.
      kv_memory_bytes, max_num_seqs, max_num_batched_tokens, enable_prefix_caching,
      async_scheduling, compile_threads, fp32_activations: engine options (docs/python.md).
    Raises: ValueError for a missing model / bad option value, TypeError for an unknown option or
      a value of the wrong type, FileNotFoundError for a missing directory or file.
    """

    def __init__(self, model=None, **engine_options):
        if model is None:
            model = os.environ.get("DEEPINFER_HF_MODEL_DIR") or None
        if model is None:
            raise ValueError("LLM: model: no model directory given; pass model=DIR or set "
                             "DEEPINFER_HF_MODEL_DIR (deepinfer.default_model() makes the demo "
                             "checkpoint)")
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"LLM: model must be a path, got {type(model).__name__}")
        opts = native.LLMOptions()
        opts.model = os.fspath(model)
        for name, v in engine_options.items():
            if name not in _ENGINE_OPTIONS:
                raise TypeError(f"LLM() got an unexpected keyword argument '{name}' (engine "
                                f"options: {', '.join(sorted(_ENGINE_OPTIONS))})")
            want = _ENGINE_OPTIONS[name]
            if want is int and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"LLM: {name} must be an int, got {type(v).__name__}")
            if want is bool and not isinstance(v, bool):
                raise TypeError(f"LLM: {name} must be a bool, got {type(v).__name__}")
            if want is int and not 0 < v < (1 << 62 if name == "kv_memory_bytes" else 1 << 31):
                raise ValueError(f"LLM: {name} must be positive, got {v}")
            setattr(opts, name, v)
        self.model = opts.model
        self._llm = native.LLM(opts)
        self._decode_cache = {}

    # ---- information ----

    @property
    def model_type(self):
        return self._llm.model_type

    @property
    def has_chat_template(self):
        """True for DeepSeek models (chat() and protocol_encoder() available)."""
        return self._llm.has_chat_template

    def get_default_sampling_params(self):
        """SamplingParams with the model's generation_config.json values set."""
        d = self._llm.generation_defaults
        kw = {k: getattr(d, k) for k in ("temperature", "top_p", "top_k", "min_p",
                                         "repetition_penalty", "max_tokens")
              if getattr(d, k) is not None}
        return SamplingParams(**kw)

    def stats(self):
        """Engine counters: kv_blocks_used / kv_blocks_total, state slots, requests, tokens."""
        return self._llm.stats()

    def encode(self, text):
        """Prompt ids of `text` as generate() uses them (BOS when the tokenizer adds one)."""
        if not isinstance(text, str):
            raise TypeError("encode: text must be a str")
        return self._llm.encode(text)

    def decode(self, token_ids, skip_special_tokens=True):
        return self._llm.decode(list(token_ids), skip_special_tokens)

    def protocol_encoder(self):
        """deepinfer.protocol.Encoder over this model's tokenizer (DeepSeek models)."""
        from .protocol import Encoder
        return Encoder._from_native(self._llm.protocol_encoder())

    # ---- generation ----

    def _params(self, sampling_params, count, what="prompts"):
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params._resolve(self._llm.generation_defaults)]
        if isinstance(sampling_params, (list, tuple)):
            if not all(isinstance(p, SamplingParams) for p in sampling_params):
                raise TypeError("sampling_params: a list must hold SamplingParams only")
            if len(sampling_params) != count:
                raise ValueError(f"sampling_params: {len(sampling_params)} entries for {count} "
                                 f"{what}")
            return [p._resolve(self._llm.generation_defaults) for p in sampling_params]
        raise TypeError("sampling_params must be a SamplingParams or a list of them, got "
                        f"{type(sampling_params).__name__}")

    def _decode_one(self, tid):
        s = self._decode_cache.get(tid)
        if s is None:
            s = self._llm.decode([tid], False)
            self._decode_cache[tid] = s
        return s

    def _run(self, batch):
        """Waits for the whole batch; Ctrl-C (or any exception) aborts it first."""
        try:
            while not batch.finished():
                batch.poll(_POLL_S)  # GIL released inside
        except BaseException:
            batch.abort()
            raise
        return [request_output(batch.request(i), self._decode_one) for i in range(batch.size())]

    def _iterate(self, batch):
        try:
            while not batch.finished():
                for i in batch.poll(_POLL_S):
                    yield request_output(batch.request(i), self._decode_one)
        finally:
            # Early exit from the loop (break, Ctrl-C, close()) aborts what still runs.
            if not batch.finished():
                batch.abort()

    def _start(self, prompts, sampling_params):
        plist, _ = _normalise_prompts(prompts)
        params = self._params(sampling_params, len(plist))
        return self._llm.start(plist, params)

    def generate(self, prompts, sampling_params=None, use_tqdm=False):
        """Generates for every prompt; returns one RequestOutput per prompt, in order.

        prompts: a str, a list of token ids, {"prompt": str} / {"prompt_token_ids": [...]}, or a
        list of those. sampling_params: one SamplingParams for all, or one per prompt.
        Raises: TypeError / ValueError naming the bad argument; ValueError for a rejected
        request (prompt too long, so_args that do not compile, ...); MemoryError when a prompt
        can never fit in the KV budget; KeyboardInterrupt after aborting on Ctrl-C.
        """
        return self._run(self._start(prompts, sampling_params))

    def stream(self, prompts, sampling_params=None):
        """Like generate(), as an iterator: yields a RequestOutput (cumulative text so far) each
        time a request has new tokens; the last one of each request has finished=True. Leaving
        the loop early aborts the remaining requests."""
        return self._iterate(self._start(prompts, sampling_params))

    # ---- chat ----

    @staticmethod
    def _chat_bodies(messages, tools, tool_choice, thinking, response_format, reasoning_effort,
                     parallel_tool_calls):
        if not isinstance(messages, (list, tuple)) or not messages:
            raise TypeError("messages: expected a non-empty list of message dicts (or a list of "
                            "such lists)")
        convs = [messages] if isinstance(messages[0], dict) else list(messages)
        for c in convs:
            if not isinstance(c, (list, tuple)) or not all(isinstance(m, dict) for m in c):
                raise TypeError("messages: each conversation must be a list of message dicts")
        if thinking is not None and not isinstance(thinking, bool):
            raise TypeError("thinking must be a bool or None (the model's default)")
        if tools is not None and not isinstance(tools, (list, tuple)):
            raise TypeError("tools must be a list of tool dicts")
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise TypeError("parallel_tool_calls must be a bool")
        bodies = []
        for c in convs:
            body = {"messages": list(c)}
            if tools is not None:
                body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
            if thinking is not None:
                body["thinking"] = {"type": "enabled" if thinking else "disabled"}
            if response_format is not None:
                body["response_format"] = response_format
            if reasoning_effort is not None:
                body["reasoning_effort"] = reasoning_effort
            if parallel_tool_calls is not None:
                body["parallel_tool_calls"] = parallel_tool_calls
            try:
                bodies.append(json.dumps(body))
            except TypeError as e:
                raise TypeError(f"messages / tools must be JSON-serialisable: {e}") from None
        return bodies

    def _start_chat(self, messages, sampling_params, **kw):
        bodies = self._chat_bodies(messages, **kw)
        params = self._params(sampling_params, len(bodies), "conversations")
        return self._llm.start_chat(bodies, params)

    def chat(self, messages, sampling_params=None, tools=None, tool_choice=None, thinking=None,
             response_format=None, reasoning_effort=None, parallel_tool_calls=None):
        """Chat through the model's DeepSeek template, as the server's /v1/chat/completions.

        messages: a conversation (list of OpenAI message dicts) or a list of conversations.
        tools / tool_choice / response_format / reasoning_effort: as in Chat Completions;
        tool_choice "required" or a named function constrains the output to DSML tool calls.
        thinking: True / False / None (the model's default: on).
        Returns one RequestOutput per conversation; outputs[i].text is the answer,
        .reasoning_content the reasoning, .tool_calls the parsed calls.
        Raises: RuntimeError for a model without the DeepSeek template; ValueError for a request
        the server would reject with 400 (the server's message); TypeError for bad types.
        """
        return self._run(self._start_chat(
            messages, sampling_params, tools=tools, tool_choice=tool_choice, thinking=thinking,
            response_format=response_format, reasoning_effort=reasoning_effort,
            parallel_tool_calls=parallel_tool_calls))

    def chat_stream(self, messages, sampling_params=None, **kw):
        """chat() as an iterator of cumulative RequestOutputs (see stream())."""
        return self._iterate(self._start_chat(
            messages, sampling_params, tools=kw.pop("tools", None),
            tool_choice=kw.pop("tool_choice", None), thinking=kw.pop("thinking", None),
            response_format=kw.pop("response_format", None),
            reasoning_effort=kw.pop("reasoning_effort", None),
            parallel_tool_calls=kw.pop("parallel_tool_calls", None), **kw))
