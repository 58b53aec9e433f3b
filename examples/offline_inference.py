#!/usr/bin/env python3
"""Offline inference with DeepInfer's Python API.

    python3 examples/offline_inference.py

Runs on $DEEPINFER_HF_MODEL_DIR when set, else on the `demo` preset checkpoint that `make demo`
serves (./models/demo, written on first use by the built `deepinfer make-test-model`; random
weights, so the text is meaningless, but every path is real). Needs the build (`make build`).
"""

import sys
from pathlib import Path

try:
    import deepinfer
except ImportError:  # run from a checkout: the package lives in python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import deepinfer

from deepinfer import LLM, SamplingParams


def main():
    model = deepinfer.default_model()
    llm = LLM(model=model)
    print(f"model: {model} ({llm.model_type})")

    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seq_seed=42)
    for out in llm.generate(prompts, params):
        print(f"\nprompt: {out.prompt!r}\ncompletion: {out.outputs[0].text!r} "
              f"({len(out.outputs[0].token_ids)} tokens, finish: {out.outputs[0].finish_reason})")

    print("\nstreaming:", end=" ", flush=True)
    shown = 0
    for out in llm.stream("Once upon a time", SamplingParams(temperature=0, max_tokens=24)):
        text = out.outputs[0].text
        print(text[shown:], end="", flush=True)
        shown = len(text)
    print()

    if llm.has_chat_template:  # DeepSeek models: chat through the DeepSeek template
        messages = [{"role": "user", "content": "Hello! Who are you?"}]
        out = llm.chat(messages, SamplingParams(temperature=0.7, max_tokens=24, seed=1),
                       thinking=False)
        print(f"\nchat answer: {out[0].outputs[0].text!r}")


if __name__ == "__main__":
    main()
