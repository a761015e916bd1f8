"""Benchmark prompt sets, read from files shipped in the package (see ``prompts/LICENSES.md``).

Each prompt is ``{"id", "category", "prompt", "answer"?}``; the text becomes one user turn of the target's chat
template. ``tinyworld``: the tiny world's held-out code / math / prose prompts (math ones carry a checkable answer).
``humaneval``: HumanEval's function stubs as "Complete this function" requests (category ``humaneval``).
``specbench``: Spec-Bench's first turns, by its categories (the MT-Bench ones grouped as ``mt_bench``).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from importlib import resources

PROMPT_SETS = ("tinyworld", "humaneval", "specbench")
MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def _lines(name: str) -> list[dict]:
    path = resources.files("hf_specgen.bench") / "prompts" / name
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if name.endswith(".gz") else raw.decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _imports(source: str) -> str:
    """The import lines of a HumanEval stub, which a completion that rewrites the function still needs."""
    return "\n".join(line for line in source.splitlines() if line.startswith(("import ", "from ")))


def load_prompt_set(name: str) -> list[dict]:
    if name == "tinyworld":
        return _lines("tinyworld.jsonl")
    if name == "humaneval":
        return [{"id": r["task_id"], "category": "humaneval", "prompt": "Complete this function:\n" + r["prompt"].strip("\n"),
                 "stub": r["prompt"], "stub_imports": _imports(r["prompt"]), "test": r["test"],
                 "entry_point": r["entry_point"]} for r in _lines("HumanEval.jsonl.gz")]
    if name == "specbench":
        return [{"id": str(r["question_id"]), "category": "mt_bench" if r["category"] in MT_BENCH else r["category"],
                 "prompt": r["turns"][0]} for r in _lines("spec_bench_questions.jsonl")]
    raise ValueError(f"unknown prompt set {name!r}: choose one of {', '.join(PROMPT_SETS)}")


def pick_prompts(names: list[str], per_category: int, seed: int = 0, skip_first: int = 0) -> list[dict]:
    """``per_category`` prompts of every category of the given sets, in a seeded order, after the first
    ``skip_first`` of that order (calibration skips the prompts a benchmark with the same seed uses)."""
    picked = []
    for name in names:
        by_category: dict[str, list[dict]] = {}
        for row in load_prompt_set(name):
            by_category.setdefault(row["category"], []).append(row)
        for category in sorted(by_category):
            rows = list(by_category[category])
            random.Random(f"{seed}-{category}").shuffle(rows)
            picked += rows[skip_first: skip_first + per_category]
    return picked


def word_ngrams(text: str, n: int = 12) -> set[tuple[str, ...]]:
    """The runs of ``n`` words of a text (lower-cased letters and digits): a shared run marks a shared passage."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i: i + n]) for i in range(len(words) - n + 1)}


_BENCHMARK_NGRAMS: set | None = None


def shares_text_with_a_benchmark(prompt: str) -> bool:
    """Whether a prompt shares a run of 12 words with any benchmark prompt of PROMPT_SETS: training prompts must not
    (the tiny world's held-out code tasks quote standard-library functions, as code-with-context training prompts do)."""
    global _BENCHMARK_NGRAMS
    if _BENCHMARK_NGRAMS is None:
        _BENCHMARK_NGRAMS = set().union(*(word_ngrams(row["prompt"]) for name in PROMPT_SETS
                                          for row in load_prompt_set(name)))
    return bool(word_ngrams(prompt) & _BENCHMARK_NGRAMS)


def chat_ids(tokenizer, prompt: str, **template_kwargs):
    """``prompt`` as one user turn of ``tokenizer``'s chat template, ready to generate from: token ids [1, L]. The
    template's text already holds its special tokens, so the tokenizer adds none (a second BOS would change the
    answer). ``template_kwargs`` go to ``apply_chat_template`` (``enable_thinking=`` for Qwen3)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, **template_kwargs)
    return tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
