"""Training prompts for real targets: the three sources, and no overlap with any benchmark prompt."""

from __future__ import annotations

import re
from collections import Counter

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
    # a default shown by its address (`<function copy2 at 0x7f...>`) would make each run's prompts differ
    assert not [r["id"] for r in code_prompts(6000) if " at 0x" in r["prompt"]]
    assert len({r["prompt"] for r in general_prompts(200)}) == 200


def test_appended_prompts_are_new_numbered_on_and_math_variants_redraw_only_the_numbers(training):
    """`specgen data prompts --append`: every new prompt differs from the file's and from each other, the ids go on
    from the file's ids of the same source, a second append sees the first, and a math variant is a GSM8K training
    problem with the same words around other numbers (1 kept, digit counts kept)."""
    from hf_specgen.training.instructions import _WHOLE_NUMBER, more_prompts

    counts = {"math-variant": 40, "code": 30, "general": 30, "long": 20}
    added = more_prompts(training, counts, seed=1)
    kinds = Counter(r["id"].rsplit("-", 1)[0] for r in added)
    assert kinds == {"gsm8k-variant": 40, "code": 30, "general": 30, "long": 20}
    old = {r["prompt"] for r in training}
    assert not [r for r in added if r["prompt"] in old] and len({r["prompt"] for r in added}) == len(added)
    for kind in ("code", "general"):
        last = max(int(r["id"].rsplit("-", 1)[1]) for r in training if r["id"].rsplit("-", 1)[0] == kind)
        numbers = sorted(int(r["id"].rsplit("-", 1)[1]) for r in added if r["id"].rsplit("-", 1)[0] == kind)
        assert numbers == list(range(last + 1, last + 1 + kinds[kind]))
    assert more_prompts(training, counts, seed=1) == added  # deterministic
    # A second append sees the first one's prompts and ids.
    again = more_prompts(training + added, {"math-variant": 5}, seed=2)
    assert {r["id"] for r in again} == {f"gsm8k-variant-{i}" for i in range(40, 45)}

    skeletons = {_WHOLE_NUMBER.sub("#", r["prompt"]): r["prompt"] for r in gsm8k_train()}
    for record in (r for r in added if r["id"].startswith("gsm8k-variant")):
        assert record["domain"] == "math" and "answer" not in record
        original = skeletons[_WHOLE_NUMBER.sub("#", record["prompt"])]  # the same problem's words
        pairs = list(zip(_WHOLE_NUMBER.findall(original), _WHOLE_NUMBER.findall(record["prompt"])))
        assert all(len(a) == len(b) and (a != "1" or b == "1") for a, b in pairs)
    assert sum(a != b for r in added if r["id"].startswith("gsm8k-variant")
               for a, b in zip(_WHOLE_NUMBER.findall(skeletons[_WHOLE_NUMBER.sub("#", r["prompt"])]),
                               _WHOLE_NUMBER.findall(r["prompt"]))) > 40
    with pytest.raises(ValueError, match="unknown prompt sources"):
        more_prompts(training, {"maths": 3}, seed=1)
