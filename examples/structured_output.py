#!/usr/bin/env python3
"""Structured output with SamplingParams(so_args=...): JSON schema, regex, EBNF, JSON object,
and a forced tool call through chat().

    python3 examples/structured_output.py

Model: $DEEPINFER_HF_MODEL_DIR when set, else the `demo` preset (see offline_inference.py).
Every output matches its constraint, whatever the weights (random ones included).
"""

import json
import re
import sys
from pathlib import Path

try:
    import deepinfer
except ImportError:  # run from a checkout: the package lives in python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import deepinfer

from deepinfer import LLM, SamplingParams

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]},
                            "maxItems": 3}},
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}
GRAMMAR = '''root   ::= "The " animal " is " colour "."
animal ::= "cat" | "dog" | "bird"
colour ::= "red" | "blue" | "green"
'''


def main():
    model = deepinfer.default_model()
    llm = LLM(model=model)
    print(f"model: {model} ({llm.model_type})")

    def run(title, so_args, prompt):
        p = SamplingParams(temperature=0.8, max_tokens=96, seq_seed=7, so_args=so_args)
        text = llm.generate(prompt, p)[0].outputs[0].text
        print(f"\n{title}: {text}")
        return text

    person = json.loads(run("json_schema", {"schema_type": "json_schema", "schema": PERSON},
                            "A person, as JSON:"))
    assert set(person) == {"name", "age", "pets"}
    phone = run("regex", {"schema_type": "regex", "schema": r"\+1-[0-9]{3}-[0-9]{4}"},
                "Phone number:")
    assert re.fullmatch(r"\+1-[0-9]{3}-[0-9]{4}", phone)
    run("ebnf", {"schema_type": "ebnf", "schema": GRAMMAR}, "Describe an animal:")
    json.loads(run("json_object", {"schema_type": "json_object"}, "Any JSON object:"))

    if llm.has_chat_template:
        tool = {"type": "function", "function": {
            "name": "get_weather", "description": "Current weather",
            "parameters": {"type": "object",
                           "properties": {"city": {"type": "string", "maxLength": 20}},
                           "required": ["city"], "additionalProperties": False}}}
        out = llm.chat([{"role": "user", "content": "Weather in Paris?"}],
                       SamplingParams(temperature=0.8, max_tokens=64, seed=3), tools=[tool],
                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                       thinking=False)
        for call in out[0].outputs[0].tool_calls:
            print(f"\ntool call: {call.name}({call.arguments})")


if __name__ == "__main__":
    main()
