"""DeepInfer's Python package: the offline API (LLM, SamplingParams) and deepinfer.protocol.

Thin bindings (pybind11, src/python/) over the C++ engine and protocol libraries; see
docs/python.md.
"""

from . import protocol
from .llm import LLM
from .models import default_model, demo_model
from .outputs import CompletionOutput, Logprob, RequestOutput, ToolCall
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "ToolCall",
           "protocol", "default_model", "demo_model"]
