"""so_args on stories260K: every output is checked by an independent validator (Python's
jsonschema for JSON, re.fullmatch for regexes, a Python regex equivalent of each EBNF grammar)."""

import json
import re

import jsonschema
import pytest

from deepinfer import SamplingParams

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["cat", "dog",
                                                                                  "ball"]},
                                               "minItems": 1, "maxItems": 3},
                                      "ok": {"type": "boolean"}},
     "required": ["tags", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object",
                                                "properties": {"x": {"type": "number"},
                                                               "y": {"type": "number"}},
                                                "required": ["x", "y"],
                                                "additionalProperties": False},
                                      "label": {"anyOf": [{"type": "null"},
                                                          {"type": "string", "pattern": "^[a-z]{1,6}$"}]}},
     "required": ["point", "label"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
]

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park."]


def _run(llm, so_args, seeds=(1, 2, 3), max_tokens=96):
    params = [SamplingParams(temperature=0.8, max_tokens=max_tokens, seed=s, so_args=so_args)
              for s in seeds]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(seeds))]
    return [o.outputs[0] for o in llm.generate(prompts, params)]


@pytest.mark.parametrize("schema", SCHEMAS, ids=["person", "tags", "nested_anyof", "array"])
def test_json_schema_outputs_validate(stories_llm, schema):
    for o in _run(stories_llm, {"schema_type": "json_schema", "schema": schema}):
        assert o.finish_reason == "stop", o.text  # the grammar completed (EOS allowed)
        jsonschema.validate(json.loads(o.text), schema)


def test_json_schema_as_text_and_flexible_whitespace(stories_llm):
    schema = SCHEMAS[0]
    for o in _run(stories_llm, {"schema_type": "json_schema", "schema": json.dumps(schema),
                                "whitespace": "flexible"}):
        jsonschema.validate(json.loads(o.text), schema)


def test_json_object(stories_llm):
    for o in _run(stories_llm, {"schema_type": "json_object"}, max_tokens=64):
        value = json.loads(o.text)
        jsonschema.validate(value, {"type": "object"})


@pytest.mark.parametrize("pattern", [r"(yes|no), [a-z]{2,8}!", r"[0-9]{3}-[0-9]{4}",
                                     r"(The|A) (cat|dog) (ran|sat)\."])
def test_regex(stories_llm, pattern):
    for o in _run(stories_llm, {"schema_type": "regex", "schema": pattern}, max_tokens=48):
        assert re.fullmatch(pattern, o.text), (pattern, o.text)


EBNF = [
    ('root ::= "The " animal " is " colour "."\n'
     'animal ::= "cat" | "dog" | "bird"\n'
     'colour ::= "red" | "blue" | "green"\n',
     r"The (cat|dog|bird) is (red|blue|green)\."),
    ('root ::= "[" item ("," item){0,3} "]"   # a short list of small numbers\n'
     'item ::= [1-9] [0-9]?\n',
     r"\[[1-9][0-9]?(,[1-9][0-9]?){0,3}\]"),
]


@pytest.mark.parametrize("grammar,equivalent", EBNF, ids=["sentence", "list"])
def test_ebnf(stories_llm, grammar, equivalent):
    for o in _run(stories_llm, {"schema_type": "ebnf", "schema": grammar}, max_tokens=48):
        assert re.fullmatch(equivalent, o.text), o.text
