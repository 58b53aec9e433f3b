"""Result objects of LLM.generate() / LLM.chat() (vLLM's RequestOutput / CompletionOutput)."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """One token's log-probability (natural log, raw model distribution) and rank (1 = top)."""
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class ToolCall:
    """A parsed DSML tool call: `arguments` is JSON text; `valid` False means do not run it."""
    id: str
    name: str
    arguments: str
    valid: bool = True
    error: str = ""


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None  # "stop", "length", "abort", chat: "tool_calls"
    stop_reason: Optional[str] = None    # the stop string that ended the output
    # chat(): the reasoning (thinking) text and the parsed tool calls; `text` is the answer.
    reasoning_content: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]
    outputs: List[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache


def _logprob_dicts(entries, decode):
    out = []
    for e in entries:
        d = {e["token_id"]: Logprob(e["logprob"], e["rank"], decode(e["token_id"]))}
        for rank, (tid, lp) in enumerate(e["top"], start=1):
            if tid not in d:
                d[tid] = Logprob(lp, rank, decode(tid))
        out.append(d)
    return out


def request_output(d, decode):
    """Builds a RequestOutput from the extension's dict (`decode`: id -> text)."""
    outs = []
    for o in d["outputs"]:
        outs.append(CompletionOutput(
            index=o["index"], text=o["text"], token_ids=list(o["token_ids"]),
            cumulative_logprob=o["cumulative_logprob"],
            logprobs=None if o["logprobs"] is None else _logprob_dicts(o["logprobs"], decode),
            finish_reason=o["finish_reason"], stop_reason=o["stop_reason"],
            reasoning_content=o["reasoning_content"],
            tool_calls=[ToolCall(t["id"], t["name"], t["arguments"], t["valid"], t["error"])
                        for t in o["tool_calls"]]))
    prompt_lp = None
    if d["prompt_logprobs"] is not None:
        # vLLM's shape: None for the first prompt token (nothing to condition on).
        prompt_lp = [None] + _logprob_dicts(d["prompt_logprobs"], decode)
    return RequestOutput(request_id=d["request_id"], prompt=d["prompt"],
                         prompt_token_ids=list(d["prompt_token_ids"]), prompt_logprobs=prompt_lp,
                         outputs=outs, finished=d["finished"],
                         num_cached_tokens=d["num_cached_tokens"])
