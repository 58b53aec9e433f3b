"""SamplingParams: vLLM's sampling parameters plus DeepInfer's ``seq_seed`` and ``so_args``.

Every argument is optional. An argument left unset takes the model's ``generation_config.json``
value when it sets one (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens ->
max_tokens), else vLLM's default (temperature 1.0, top_p 1.0, top_k -1, min_p 0.0,
max_tokens 16, ...). Reading an unset attribute gives vLLM's default.

Ranges are checked by the C++ library (engine::SamplingParams::Validate) when the object is
built: a bad value raises ValueError naming the argument; a value of the wrong type raises
TypeError naming it.
"""

import json
import math

from ._native import native

_U64 = 1 << 64

# name -> (kind, vLLM default)
_FIELDS = {
    "temperature": ("float", 1.0),
    "top_p": ("float", 1.0),
    "top_k": ("int", -1),
    "min_p": ("float", 0.0),
    "max_tokens": ("int", 16),
    "min_tokens": ("int", 0),
    "presence_penalty": ("float", 0.0),
    "frequency_penalty": ("float", 0.0),
    "repetition_penalty": ("float", 1.0),
    "n": ("int", 1),
    "logprobs": ("int", None),
    "prompt_logprobs": ("int", None),
    "seed": ("seed", None),
    "seq_seed": ("seed", None),
}

SCHEMA_TYPES = ("json_schema", "regex", "ebnf", "json_object")


def _check_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"SamplingParams: {name} must be an int, got {type(v).__name__}")
    if not -(1 << 63) <= v < (1 << 63):  # the C++ side then checks the argument's own range
        raise ValueError(f"SamplingParams: {name} = {v} is out of range")
    return v


def _check_float(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"SamplingParams: {name} must be a number, got {type(v).__name__}")
    if not math.isfinite(v):
        raise ValueError(f"SamplingParams: {name} must be finite, got {v}")
    return float(v)


class SamplingParams:
    """Sampling parameters of one generate() / chat() call (or of one prompt of it).

    Args:
      temperature, top_p, top_k, min_p: sampling filters (0 temperature = greedy).
      max_tokens, min_tokens: generated-token bounds per sample.
      stop: a string or list of strings; the output ends before the first match (not included).
      stop_token_ids: ids that end a sample like EOS (the id is kept in token_ids).
      seed / seq_seed: the per-sequence seed (Philox keyed by seed, sample index and step: the
        same tokens whatever else is batched). Two names for one thing; both set and different
        raises ValueError. Negative ints are taken modulo 2**64.
      n: samples per prompt.  logprobs / prompt_logprobs: None (off), 0 (chosen token) or k
        (plus the top k).  presence_penalty, frequency_penalty, repetition_penalty: penalties.
      ignore_eos: keep going after EOS.  skip_special_tokens: drop special tokens from text.
      so_args: structured output, {"schema_type": "json_schema" | "regex" | "ebnf" |
        "json_object", "schema": ..., optional "whitespace": "compact" | "flexible"}; a
        json_schema schema may be a dict (serialised with json.dumps) or JSON text.
    """

    def __init__(self, temperature=None, top_p=None, top_k=None, min_p=None, max_tokens=None,
                 min_tokens=None, stop=None, stop_token_ids=None, seed=None, seq_seed=None, n=None,
                 logprobs=None, prompt_logprobs=None, presence_penalty=None,
                 frequency_penalty=None, repetition_penalty=None, ignore_eos=False,
                 skip_special_tokens=True, so_args=None):
        self._set = {}
        values = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                      max_tokens=max_tokens, min_tokens=min_tokens, seed=seed, seq_seed=seq_seed,
                      n=n, logprobs=logprobs, prompt_logprobs=prompt_logprobs,
                      presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                      repetition_penalty=repetition_penalty)
        for name, v in values.items():
            if v is None:
                continue
            kind = _FIELDS[name][0]
            if kind == "float":
                self._set[name] = _check_float(name, v)
            elif kind == "int":
                self._set[name] = _check_int(name, v)
            else:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"SamplingParams: {name} must be an int, got "
                                    f"{type(v).__name__}")
                if not -(1 << 63) <= v < _U64:
                    raise ValueError(
                        f"SamplingParams: {name} must be in [-2**63, 2**64), got {v}")
                self._set[name] = v % _U64
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        elif isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop):
            stop = list(stop)
        else:
            raise TypeError("SamplingParams: stop must be a string or a list of strings")
        if stop_token_ids is None:
            stop_token_ids = []
        elif not isinstance(stop_token_ids, (list, tuple)) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in stop_token_ids):
            raise TypeError("SamplingParams: stop_token_ids must be a list of ints")
        elif not all(0 <= t < (1 << 31) for t in stop_token_ids):
            raise ValueError("SamplingParams: stop_token_ids must be token ids in [0, 2**31)")
        if not isinstance(ignore_eos, bool):
            raise TypeError("SamplingParams: ignore_eos must be a bool")
        if not isinstance(skip_special_tokens, bool):
            raise TypeError("SamplingParams: skip_special_tokens must be a bool")
        self.stop = stop
        self.stop_token_ids = list(stop_token_ids)
        self.ignore_eos = ignore_eos
        self.skip_special_tokens = skip_special_tokens
        self.so_args = self._check_so_args(so_args)
        # Ranges and so_args are checked by the C++ library now, so a bad value fails here.
        native.resolve_sampling(self._spec())

    @staticmethod
    def _check_so_args(so_args):
        if so_args is None:
            return None
        if not isinstance(so_args, dict):
            raise TypeError("SamplingParams: so_args must be a dict with schema_type and schema")
        unknown = set(so_args) - {"schema_type", "schema", "whitespace"}
        if unknown:
            raise ValueError(f"SamplingParams: so_args: unknown key(s) {sorted(unknown)} "
                             "(expected schema_type, schema, whitespace)")
        st = so_args.get("schema_type")
        if not isinstance(st, str):
            raise TypeError("SamplingParams: so_args['schema_type'] must be a string, one of "
                            + ", ".join(SCHEMA_TYPES))
        schema = so_args.get("schema")
        if schema is None:
            text = ""
        elif isinstance(schema, str):
            text = schema
        elif st == "json_schema" and isinstance(schema, (dict, bool)):
            text = json.dumps(schema)
        else:
            raise TypeError("SamplingParams: so_args['schema'] must be a string (or a dict for "
                            "json_schema)")
        ws = so_args.get("whitespace", "compact")
        if ws not in ("compact", "flexible"):
            raise ValueError("SamplingParams: so_args['whitespace'] must be 'compact' or "
                             f"'flexible', got {ws!r}")
        out = {"schema_type": st, "schema": text, "whitespace": ws}
        return out

    def _spec(self):
        spec = native.SamplingSpec()
        for name, v in self._set.items():
            setattr(spec, name, v)
        spec.ignore_eos = self.ignore_eos
        spec.skip_special_tokens = self.skip_special_tokens
        spec.stop = self.stop
        spec.stop_token_ids = self.stop_token_ids
        if self.so_args is not None:
            spec.so_schema_type = self.so_args["schema_type"]
            spec.so_schema = self.so_args["schema"]
            spec.so_flexible_whitespace = self.so_args["whitespace"] == "flexible"
        return spec

    def _resolve(self, defaults):
        """The C++ engine parameters over a model's generation_config defaults."""
        return native.resolve_sampling(self._spec(), defaults)

    def __getattr__(self, name):
        if name in _FIELDS:
            s = self.__dict__.get("_set", {})
            if name in s:
                return s[name]
            if name == "seed":
                return s.get("seq_seed")
            if name == "seq_seed":
                return s.get("seed")
            return _FIELDS[name][1]
        raise AttributeError(name)

    def __repr__(self):
        parts = [f"{k}={v!r}" for k, v in self._set.items()]
        if self.stop:
            parts.append(f"stop={self.stop!r}")
        if self.stop_token_ids:
            parts.append(f"stop_token_ids={self.stop_token_ids!r}")
        if self.ignore_eos:
            parts.append("ignore_eos=True")
        if self.so_args:
            parts.append(f"so_args={self.so_args!r}")
        return f"SamplingParams({', '.join(parts)})"
