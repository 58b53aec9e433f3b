"""Offline generation on stories260K: goldens, streaming, seeds, batch companions."""

import json

import pytest

from conftest import STORIES
from deepinfer import LLM, SamplingParams
from deepinfer.sampling_params import SamplingParams as SamplingParams2

GOLDENS = ["once_upon_a_time", "lily_and_ben", "cafe_emoji", "llama2c_test_all_bos_200"]


def load_golden(name):
    with open(STORIES / "golden" / f"{name}.json") as f:
        return json.load(f)


def test_import_paths():
    assert SamplingParams is SamplingParams2


def test_greedy_outputs_equal_goldens(stories_llm):
    goldens = [load_golden(n) for n in GOLDENS]
    # All four in one batch (continuous batching runs them together), from text prompts.
    params = [SamplingParams(temperature=0, max_tokens=g["max_new_tokens"], ignore_eos=True)
              for g in goldens]
    outs = stories_llm.generate([g["prompt"] for g in goldens], params)
    for g, out in zip(goldens, outs):
        assert out.prompt == g["prompt"]
        assert out.prompt_token_ids == g["prompt_ids"], g["prompt"]
        o = out.outputs[0]
        assert o.token_ids == g["generated_ids"], g["prompt"]
        assert o.finish_reason == "length"
        assert g["prompt"] + o.text == g["text"]
        assert out.finished


def test_greedy_from_token_ids(stories_llm):
    g = load_golden("lily_and_ben")
    out = stories_llm.generate({"prompt_token_ids": g["prompt_ids"]},
                               SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
    assert out[0].prompt is None
    assert out[0].outputs[0].token_ids == g["generated_ids"]
    # A bare id list is one prompt too.
    out2 = stories_llm.generate(g["prompt_ids"], SamplingParams(temperature=0, max_tokens=8,
                                                                ignore_eos=True))
    assert out2[0].outputs[0].token_ids == g["generated_ids"][:8]


def test_logprobs_and_cumulative(stories_llm):
    g = load_golden("once_upon_a_time")
    out = stories_llm.generate(g["prompt"], SamplingParams(temperature=0, max_tokens=8,
                                                           ignore_eos=True, logprobs=3))
    o = out[0].outputs[0]
    assert len(o.logprobs) == 8
    total = 0.0
    for tid, lp in zip(o.token_ids, o.logprobs):
        assert tid in lp and lp[tid].rank == 1  # greedy picks the top token
        assert len(lp) >= 3
        total += lp[tid].logprob
    assert o.cumulative_logprob == pytest.approx(total, abs=1e-4)
    # Each step's top-3 ids against the golden's (float64 reference logits): the top-3 of
    # stories260K's first steps are separated by far more than float32 noise.
    for step in g["top5_first8"]:
        k = step["step"]
        ranked = sorted(o.logprobs[k].items(), key=lambda kv: -kv[1].logprob)
        assert ranked[0][0] == step["top5"][0]["id"]
        assert {t for t, _ in ranked[:3]} == {e["id"] for e in step["top5"][:3]} or \
            abs(step["top5"][2]["logit"] - step["top5"][3]["logit"]) < 1e-3


def test_stream_matches_generate(stories_llm):
    g = load_golden("once_upon_a_time")
    p = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    seen = []
    for ro in stories_llm.stream([g["prompt"]], p):
        seen.append(ro)
    assert len(seen) >= 2  # several updates, not one at the end
    assert seen[-1].finished
    texts = [r.outputs[0].text for r in seen]
    for a, b in zip(texts, texts[1:]):
        assert b.startswith(a)  # cumulative
    assert seen[-1].outputs[0].token_ids == g["generated_ids"][:32]


def test_stop_strings(stories_llm):
    g = load_golden("once_upon_a_time")
    out = stories_llm.generate(g["prompt"], SamplingParams(temperature=0, max_tokens=64,
                                                           stop=["Lily"]))
    o = out[0].outputs[0]
    assert o.text == ", there was a little girl named "
    assert o.finish_reason == "stop" and o.stop_reason == "Lily"


def test_generation_config_defaults(stories_dir):
    # stories260K's generation_config.json sets no sampling value: vLLM's defaults apply.
    llm_defaults = LLM(model=stories_dir, kv_memory_bytes=8 << 20).get_default_sampling_params()
    assert llm_defaults.temperature == 1.0 and llm_defaults.top_p == 1.0
    assert llm_defaults.max_tokens == 16
    assert SamplingParams().max_tokens == 16


def test_default_max_tokens_is_16(stories_llm):
    out = stories_llm.generate("Once upon a time", SamplingParams(temperature=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 16


PROMPTS = ["Once upon a time", "The cat", "Lily and Ben", "A big dog", "Tom had a ball"]


def _sampled(llm, prompt, **kw):
    p = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=24, ignore_eos=True, **kw)
    return llm.generate(prompt, p)[0].outputs[0].token_ids


def test_seq_seed_deterministic_across_runs_and_batches(stories_llm):
    alone = _sampled(stories_llm, PROMPTS[0], seq_seed=1234)
    again = _sampled(stories_llm, PROMPTS[0], seq_seed=1234)
    assert alone == again
    # With batch companions (unseeded and seeded, other prompts, several samples each): the
    # seeded request's tokens do not depend on what else runs.
    params = [SamplingParams(temperature=1.0, top_p=0.95, max_tokens=24, ignore_eos=True,
                             seq_seed=1234)]
    prompts = [PROMPTS[0]]
    for i, p in enumerate(PROMPTS[1:] * 3):
        prompts.append(p)
        params.append(SamplingParams(temperature=0.9, max_tokens=30, ignore_eos=True, n=2,
                                     seed=None if i % 2 else i))
    prompts.append(PROMPTS[0])
    params.append(params[0])
    outs = stories_llm.generate(prompts, params)
    assert outs[0].outputs[0].token_ids == alone
    assert outs[-1].outputs[0].token_ids == alone
    # A different seed gives a different sample (24 tokens at temperature 1: all equal by chance
    # is negligible).
    assert _sampled(stories_llm, PROMPTS[0], seq_seed=99) != alone


def test_seed_is_seq_seed(stories_llm):
    a = _sampled(stories_llm, PROMPTS[1], seq_seed=7)
    b = _sampled(stories_llm, PROMPTS[1], seed=7)
    c = _sampled(stories_llm, PROMPTS[1], seed=7, seq_seed=7)
    assert a == b == c
    sp = SamplingParams(seed=7)
    assert sp.seq_seed == 7 and sp.seed == 7
    with pytest.raises(ValueError, match="seq_seed"):
        SamplingParams(seed=1, seq_seed=2)
    # Negative seeds are taken modulo 2**64 (as the CLI's --seed).
    assert _sampled(stories_llm, PROMPTS[1], seed=-1) == _sampled(stories_llm, PROMPTS[1],
                                                                  seed=(1 << 64) - 1)


def test_n_samples_with_seed(stories_llm):
    out = stories_llm.generate(PROMPTS[2], SamplingParams(temperature=1.0, max_tokens=16, n=3,
                                                          seed=5, ignore_eos=True))
    outs = out[0].outputs
    assert [o.index for o in outs] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in outs}) > 1  # samples differ from each other
    again = stories_llm.generate(PROMPTS[2], SamplingParams(temperature=1.0, max_tokens=16, n=3,
                                                            seed=5, ignore_eos=True))
    assert [o.token_ids for o in again[0].outputs] == [o.token_ids for o in outs]


def test_generation_config_values_are_defaults(tmp_path, stories_dir):
    # A model directory whose generation_config.json sets greedy decoding and 5 new tokens (the
    # stories260K files linked, not copied).
    from pathlib import Path
    for f in Path(stories_dir).iterdir():
        if f.is_file() and f.name != "generation_config.json":
            (tmp_path / f.name).symlink_to(f)
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.0, "max_new_tokens": 5}))
    llm = LLM(model=str(tmp_path), kv_memory_bytes=8 << 20)
    d = llm.get_default_sampling_params()
    assert d.temperature == 0.0 and d.max_tokens == 5
    g = load_golden("once_upon_a_time")
    out = llm.generate(g["prompt"], SamplingParams(ignore_eos=True))[0].outputs[0]
    assert out.token_ids == g["generated_ids"][:5]  # greedy, 5 tokens: the file's values
    # Explicit arguments win over the file.
    out = llm.generate(g["prompt"], SamplingParams(max_tokens=7, ignore_eos=True))[0].outputs[0]
    assert out.token_ids == g["generated_ids"][:7]


def test_cached_token_count(stories_dir):
    llm = LLM(model=stories_dir, kv_memory_bytes=16 << 20)
    g = load_golden("llama2c_test_all_bos_200")
    prompt = g["prompt_ids"] + g["generated_ids"]  # 201 tokens: one complete 128-token block
    p = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    first = llm.generate([prompt], p)[0]
    second = llm.generate([prompt], p)[0]
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 128
    assert second.outputs[0].token_ids == first.outputs[0].token_ids


def test_seq_seed_identical_across_processes(stories_llm, stories_dir):
    import subprocess
    import sys
    from conftest import CHECKOUT
    code = ("import sys, json; sys.path.insert(0, %r); from deepinfer import LLM, SamplingParams;"
            "llm = LLM(model=%r, kv_memory_bytes=8 << 20);"
            "p = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=24, ignore_eos=True, "
            "seq_seed=1234);"
            "print(json.dumps(llm.generate(%r, p)[0].outputs[0].token_ids))"
            % (str(CHECKOUT / "python"), stories_dir, PROMPTS[0]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == _sampled(stories_llm, PROMPTS[0],
                                                                     seq_seed=1234)
