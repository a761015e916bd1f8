"""Training prompts for real targets: the three sources, and no overlap with any benchmark prompt."""

from __future__ import annotations

import re

import pytest

from hf_specgen.bench.prompt_sets import PROMPT_SETS, load_prompt_set
from hf_specgen.training.instructions import build_prompts, code_prompts, general_prompts, gsm8k_train

# The counts scripts/build_smollm2.sh asks for.
BUILD_COUNTS = dict(n_math=600, n_code=576, n_general=552)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i: i + n]) for i in range(len(words) - n + 1)}


@pytest.fixture(scope="module")
def training():
    """The build's prompt set, made once (it reads the documentation of the standard library)."""
    return build_prompts(**BUILD_COUNTS, seed=0)


def test_training_prompts_share_nothing_with_any_benchmark_prompt(training):
    """Not one benchmark prompt (Spec-Bench, HumanEval, the tiny world's held-out set) among the training prompts,
    and no run of 12 words in common: close paraphrases of a benchmark question would show up as shared runs."""
    benchmark = [row["prompt"] for name in PROMPT_SETS for row in load_prompt_set(name)]
    normalized = {" ".join(_words(p)) for p in benchmark}
    assert not [p for p in training if " ".join(_words(p["prompt"])) in normalized]
    bench_grams = set().union(*(_ngrams(p, 12) for p in benchmark))
    shared = [p["id"] for p in training if _ngrams(p["prompt"], 12) & bench_grams]
    assert shared == []


def test_all_gsm8k_training_problems_are_disjoint_from_spec_bench_math():
    spec_math = {" ".join(_words(r["prompt"])) for r in load_prompt_set("specbench") if r["category"] == "math_reasoning"}
    train = gsm8k_train()
    assert len(train) == 7473 and len(spec_math) == 80
    assert not [r for r in train if " ".join(_words(r["prompt"])) in spec_math]
    assert all(r["answer_format"] == "last_number" and float(r["answer"]) == float(r["answer"]) for r in train)


def test_prompt_sources_give_the_asked_counts_domains_and_unique_prompts(training):
    records = training
    by_domain = {d: [r for r in records if r["domain"] == d] for d in ("math", "code", "general")}
    assert len(by_domain["math"]) == 600 and len(by_domain["general"]) == 552
    assert 550 <= len(by_domain["code"]) <= 576  # duplicate phrasings are dropped
    assert len({r["prompt"] for r in records}) == len(records) and len({r["id"] for r in records}) == len(records)
    assert [r["id"] for r in build_prompts(**BUILD_COUNTS, seed=0)] == [r["id"] for r in records]  # deterministic
    code = code_prompts(50)
    assert all("`" in r["prompt"] or "function named" in r["prompt"] for r in code)
    assert len({r["prompt"] for r in general_prompts(200)}) == 200
