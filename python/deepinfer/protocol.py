"""deepinfer.protocol: DeepSeek request encoding and streaming output parsing (the
deepseek-recipe role), for building your own gateway.

    enc = Encoder("path/to/deepseek_model")          # tokenizer.json + config.json only
    req = enc.encode({"messages": [{"role": "user", "content": "Hi"}]})   # Chat Completions
    req.prompt_token_ids    # exactly the ids `deepinfer serve` submits (and /tokenize returns)
    parser = enc.parser(req)
    for ids in model_output_chunks:
        for ev in parser.feed(ids): ...   # Event(type="reasoning" | "content" |
                                          #   "tool_call_start" | "tool_call_arguments" |
                                          #   "tool_call_end" | "finish", ...)
    parser.finish("length")               # when the stream ended without EOS

Requests: Chat Completions (api="chat.completions"), Responses ("responses") or Anthropic
Messages ("messages") bodies, as a dict or JSON text. Everything runs in the C++ protocol layer
and the server's codecs; a request the server answers with 400 raises ValueError with the
server's message.
"""

import json
import os
from dataclasses import dataclass, field
from typing import List, Optional

from ._native import native

APIS = ("chat.completions", "responses", "messages")


@dataclass
class EncodedRequest:
    prompt_token_ids: List[int]
    prompt_text: str          # the rendered template (special tokens spelled out)
    thinking: bool            # whether the prompt opens reasoning
    start: str                # parser start stage: reasoning | answer | tool_calls | tool_arguments
    forced_tool_name: str     # start == "tool_arguments": the named tool
    stop: List[str]           # the request's stop strings
    declared_tools: List[str]
    constraint: Optional[str]  # grammar the server applies: "tool_calls", "response_format"


@dataclass
class Event:
    """One parser event. Deltas concatenate; events are the same however the stream is cut."""
    type: str
    text: str = ""
    index: int = -1          # tool events: the call's index
    id: str = ""             # tool_call_start
    name: str = ""           # tool_call_start
    valid: bool = True       # tool_call_end
    error: str = ""          # tool_call_end / finish
    finish_reason: str = ""  # finish: stop | stop_sequence | length | tool_calls |
                             #         tool_call_error | cancelled
    stop_sequence: str = ""


def _events(dicts):
    return [Event(**d) for d in dicts]


class StreamParser:
    """Token ids in, Events out (one parser per output stream)."""

    def __init__(self, native_parser):
        self._p = native_parser

    def feed(self, token_ids):
        if isinstance(token_ids, int) and not isinstance(token_ids, bool):
            token_ids = [token_ids]
        if not isinstance(token_ids, (list, tuple)) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in token_ids):
            raise TypeError("feed: token_ids must be an int or a list of ints")
        return _events(self._p.feed(list(token_ids)))

    def finish(self, end="eos"):
        """Ends the stream ("eos", "length" or "cancelled"); the last event is the finish."""
        if not isinstance(end, str):
            raise TypeError("finish: end must be a str")
        return _events(self._p.finish(end))

    @property
    def finished(self):
        return self._p.finished


class Encoder:
    """Request encoder and parser factory over a DeepSeek model's tokenizer.

    Args: model_dir (default $DEEPINFER_HF_MODEL_DIR): directory with tokenizer.json and
    config.json (model_type deepseek_v4 / deepseek_v41). Weights are not loaded.
    Raises: ValueError without a directory; FileNotFoundError for missing files; RuntimeError
    for a model without the DeepSeek template.
    """

    def __init__(self, model_dir=None):
        if model_dir is None:
            model_dir = os.environ.get("DEEPINFER_HF_MODEL_DIR") or None
        if model_dir is None:
            raise ValueError("Encoder: model_dir: no model directory given; pass model_dir or "
                             "set DEEPINFER_HF_MODEL_DIR")
        if not isinstance(model_dir, (str, os.PathLike)):
            raise TypeError("Encoder: model_dir must be a path")
        self._e = native.RequestEncoder(os.fspath(model_dir))

    @classmethod
    def _from_native(cls, e):
        self = cls.__new__(cls)
        self._e = e
        return self

    @property
    def family(self):
        return self._e.family

    @property
    def markers(self):
        """Ids of <think>, </think>, ｜DSML｜ and EOS."""
        return dict(self._e.markers)

    def encode(self, request, api="chat.completions"):
        """Encodes a request body (dict or JSON text) of `api` into an EncodedRequest."""
        if api not in APIS:
            raise ValueError(f"encode: api must be one of {', '.join(APIS)}, got {api!r}")
        if isinstance(request, dict):
            body = json.dumps(request)
        elif isinstance(request, (str, bytes)):
            body = request.decode() if isinstance(request, bytes) else request
        else:
            raise TypeError("encode: request must be a dict or JSON text")
        return EncodedRequest(**self._e.encode(api, body))

    def encode_chat(self, request):
        return self.encode(request, "chat.completions")

    def encode_responses(self, request):
        return self.encode(request, "responses")

    def encode_messages(self, request):
        return self.encode(request, "messages")

    def encode_text(self, text):
        """Ordinary-text ids (never special tokens)."""
        if not isinstance(text, str):
            raise TypeError("encode_text: text must be a str")
        return self._e.encode_text(text)

    def token_id(self, token):
        """Id of a token string (e.g. "</think>"), or None."""
        return self._e.token_id(token)

    def parser(self, request=None, *, start=None, forced_tool_name=None, stop=None,
               declared_tools=None, make_tool_call_id=None):
        """A StreamParser for the output of `request` (an EncodedRequest: its start stage, forced
        tool, stop strings and declared tools), or configured by the keyword arguments (which
        also override the request's). make_tool_call_id: index -> id (default: random call_...).
        """
        if request is not None and not isinstance(request, EncodedRequest):
            raise TypeError("parser: request must be an EncodedRequest (from encode())")
        s = start if start is not None else (request.start if request else "answer")
        f = forced_tool_name if forced_tool_name is not None else (
            request.forced_tool_name if request else "")
        st = stop if stop is not None else (request.stop if request else [])
        d = declared_tools if declared_tools is not None else (
            request.declared_tools if request and request.declared_tools else None)
        if isinstance(st, str):
            st = [st]
        if make_tool_call_id is not None and not callable(make_tool_call_id):
            raise TypeError("parser: make_tool_call_id must be callable")
        return StreamParser(native.OutputParser(self._e, s, f, list(st), d, make_tool_call_id))
