"""The one-process A/Bs shared by the A/B scripts under docs/benchmarks/ (dflash_confident, whiflash_reach and others).

- ``run_in_bench_order``, the tiny world's default calls in the bench's order: each pass runs stock generate and then
  every variant over the code, math and prose prompts (10 each, as `specgen bench --target tiny` takes them); it prints
  each category's speed over stock generate (wall time with the prefill) and tau, medians of the passes after one
  warm-up.
- ``run_whiflash_in_bench_order``, WhiFlash variants in that order, each run with fresh bundles.
- ``run_with_stale_dflash``, the tiny world's WhiFlash made to recover on purpose: code, then DFlash's carried
  evidence set bad, then math.
- ``run_on_the_real_target``, the real target's (SmolLM2-135M-Instruct) default calls, one prompt of each of the
  README bench's categories: each variant's speed over the first one's."""
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import chat_ids, load_prompt_set, pick_prompts

MODELS = Path(__file__).resolve().parents[2] / "hub_models"  # the shipped tiny world, of this file's tree

CATEGORIES = ("code", "math", "prose")


def tiny_world_prompts(tokenizer, per_category: int = 10, bench_order: bool = False) -> dict:
    """category -> [prompt ids [1, P]] under the chat template: each category's first prompts in the prompt set's
    order, or (``bench_order``) the ones `specgen bench --target tiny` takes, in its seeded order (--seed 0)."""
    if bench_order:
        records = pick_prompts(["tinyworld"], per_category, seed=0)
    else:
        records = [p for c in CATEGORIES for p in load_prompt_set("tinyworld") if p["category"] == c]
    return {c: [chat_ids(tokenizer, p["prompt"]) for p in records if p["category"] == c][:per_category]
            for c in CATEGORIES}


def tiny_world(dtype: torch.dtype, bench_order: bool = False):
    """One torch thread (as every A/B here runs), the tiny world's target in ``dtype`` with hf_specgen enabled, and its
    prompts (``tiny_world_prompts``): (target, prompts)."""
    torch.set_num_threads(1)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(MODELS / "specgen-tiny", dtype=dtype))
    return target, tiny_world_prompts(AutoTokenizer.from_pretrained(MODELS / "specgen-tiny"), bench_order=bench_order)


def run_in_bench_order(target, prompts: dict, variants: tuple, decode, use, repeats: int, max_new_tokens: int) -> None:
    """``use(name)``: patch in variant ``name`` (also called with "stock"); ``decode(name, ids)``: its generate call,
    returning the output (with ``speculative_stats``)."""
    names = ("stock", *variants)
    times = {(n, c): [] for n in names for c in CATEGORIES}
    taus = {(n, c): [] for n in variants for c in CATEGORIES}
    for r in range(repeats + 1):
        for n in names:
            use(n)
            for c in CATEGORIES:
                start, tokens, rounds = time.perf_counter(), 0, 0
                for ids in prompts[c]:
                    if n == "stock":
                        target.generate(ids, do_sample=False, max_new_tokens=max_new_tokens)
                        continue
                    stats = decode(n, ids).speculative_stats
                    tokens += stats.new_tokens
                    rounds += len(stats.acceptance_lengths)
                if r:
                    times[(n, c)].append(time.perf_counter() - start)
                    if n != "stock":
                        taus[(n, c)].append(tokens / rounds)
    for c in CATEGORIES:
        stock = statistics.median(times[("stock", c)])
        print(c, "  ".join(f"{n} {stock / statistics.median(times[(n, c)]):.3f}x "
                           f"({statistics.median(taus[(n, c)]):.1f})" for n in variants), flush=True)
    total = {n: sum(statistics.median(times[(n, c)]) for c in CATEGORIES) for n in names}
    print("all", "  ".join(f"{n} {total['stock'] / total[n]:.3f}x" for n in variants))


def run_whiflash_in_bench_order(dtype: torch.dtype, variants: tuple, use, runs: int, repeats: int = 2,
                                max_new_tokens: int = 192) -> None:
    """``runs`` runs of WhiFlash's default call on the tiny world in ``dtype``, each with a fresh bundle per variant
    (``use(name)`` patches variant ``name`` in), in the bench's order (``run_in_bench_order``, ``repeats`` passes
    after a warm-up)."""
    target, prompts = tiny_world(dtype)
    for run in range(runs):
        bundles = {name: hf_specgen.load_drafter(MODELS / "specgen-tiny-whiflash", dtype=dtype) for name in variants}

        def decode(name, ids):
            return target.generate(ids, assistant_model=bundles[name], speculative_mode="whiflash",
                                   max_new_tokens=max_new_tokens, return_dict_in_generate=True)

        print(f"run {run + 1}", flush=True)
        run_in_bench_order(target, prompts, variants, decode, use, repeats, max_new_tokens)


def run_with_stale_dflash(target, prompts: dict, variants: tuple, use, runs: int, before_call=None) -> None:
    """How WhiFlash's default call recovers where its DFlash drafter's carried evidence is stale and bad (the tiny
    world's rare bad run: its first code rounds left DFlash rated below EAGLE-3 under both router votes, and math ran
    on EAGLE-3's chains at tau 2.7, 1.6x stock, where DFlash's blocks run at tau 7, 3.4x). Each run, for each variant
    (``use(name)`` patches it in), a fresh bundle decodes the 10 code prompts, then every carried DFlash estimate is
    set to 4 rounds' worth of slots kept 20% of the time, and the 10 math prompts follow: their wall time over stock
    generate's, tau, and the share of drafting rounds DFlash ran. ``before_call(name, bundle)``: run before each
    call."""
    from hf_specgen.engine import width_policy

    for ids in prompts["math"]:
        target.generate(ids, do_sample=False, max_new_tokens=192)
    start = time.perf_counter()
    for ids in prompts["math"]:
        target.generate(ids, do_sample=False, max_new_tokens=192)
    stock = time.perf_counter() - start
    for run in range(runs):
        for name in variants:
            use(name)
            bundle = hf_specgen.load_drafter(MODELS / "specgen-tiny-whiflash", dtype=target.dtype)
            for ids in prompts["code"]:
                if before_call is not None:
                    before_call(name, bundle)
                target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=192)
            for context, estimate in width_policy._ACCEPTANCE[target][bundle].items():
                if context.startswith("dflash"):
                    estimate.reached = [0.0] + [4.0] * (len(estimate.reached) - 1)
                    estimate.accepted = [0.0] + [0.8] * (len(estimate.accepted) - 1)
                    estimate.widest = 2
            start, tokens, rounds, drafters = time.perf_counter(), 0, 0, []
            for ids in prompts["math"]:
                if before_call is not None:
                    before_call(name, bundle)
                stats = target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=192,
                                        return_dict_in_generate=True).speculative_stats
                tokens, rounds = tokens + stats.new_tokens, rounds + stats.num_rounds
                drafters += [d for d in stats.drafter_per_round if d in ("eagle3", "dflash")]
            seconds = time.perf_counter() - start
            print(f"run {run + 1} {name}: math {stock / seconds:.2f}x stock, tau {tokens / rounds:.2f}, "
                  f"DFlash {drafters.count('dflash')} of {len(drafters)} drafting rounds", flush=True)


REAL_CATEGORIES = ("humaneval", "math_reasoning", "mt_bench", "translation", "summarization", "qa", "rag")


def run_on_the_real_target(dtype: torch.dtype, passes: int, variants: dict, use, max_new_tokens: int = 96) -> None:
    """The real target in ``dtype`` (one torch thread), one prompt of each of ``REAL_CATEGORIES`` (its order),
    ``max_new_tokens`` new tokens. ``variants``: name -> (speculative_mode, drafter folder under hub_models/), each
    with a bundle of its own; ``use(name)`` patches in variant ``name``. Each pass runs every variant, their order
    turned each pass; it prints, per category and over all, wall time per token with the prefill as a speed over the
    first variant's, medians of ``passes`` passes after one warm-up, and tau."""
    from hf_specgen.targets import resolve_target

    torch.set_num_threads(1)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafters = {n: (mode, hf_specgen.load_drafter(MODELS / folder, dtype=dtype))
                for n, (mode, folder) in variants.items()}
    records = {r["category"]: r for r in pick_prompts(["humaneval", "specbench"], 1)
               if r.get("category") in REAL_CATEGORIES}
    prompts = {c: tokenizer.apply_chat_template([{"role": "user", "content": records[c]["prompt"]}],
                                                add_generation_prompt=True, return_tensors="pt", return_dict=True)
               for c in REAL_CATEGORIES}
    per_token = {(n, c): [] for n in drafters for c in REAL_CATEGORIES}
    taus = {(n, c): [] for n in drafters for c in REAL_CATEGORIES}
    names = list(drafters)
    for p in range(passes + 1):
        for n in names[p % len(names):] + names[:p % len(names)]:
            mode, drafter = drafters[n]
            use(n)
            for c in REAL_CATEGORIES:
                start = time.perf_counter()
                out = target.generate(**prompts[c], max_new_tokens=max_new_tokens, do_sample=False,
                                      return_dict_in_generate=True, assistant_model=drafter, speculative_mode=mode)
                seconds = time.perf_counter() - start
                if p:
                    per_token[(n, c)].append(seconds / out.speculative_stats.new_tokens)
                    taus[(n, c)].append(out.speculative_stats.mean_acceptance_length)
    use(names[0])
    for c in REAL_CATEGORIES:
        base = statistics.median(per_token[(names[0], c)])
        print(f"{c:15s}", "  ".join(f"{n} {base / statistics.median(per_token[(n, c)]):.3f} "
                                     f"({statistics.median(taus[(n, c)]):.2f})" for n in names), flush=True)
    total = {n: sum(statistics.median(per_token[(n, c)]) for c in REAL_CATEGORIES) for n in names}
    print("all", "  ".join(f"{n} {total[names[0]] / total[n]:.3f}" for n in names))


def run_whiflash_case(case: str, dtype: torch.dtype, n: int, variants: tuple, use) -> None:
    """The cases of the WhiFlash A/B scripts (whiflash_new_text/ab.py, whiflash_shadow/ab.py), each ``variants``
    patched in by ``use(name)``: ``real``, the real target's default calls beside EAGLE-3's alone
    (``run_on_the_real_target``, ``n`` passes); ``stale``, the case made on purpose (``run_with_stale_dflash``, ``n``
    runs); ``tiny``, fresh bundles in the bench's order (``run_whiflash_in_bench_order``, ``n`` runs)."""
    if case == "real":
        whiflash = {name: ("whiflash", "smollm2-135m-instruct-whiflash") for name in variants}
        run_on_the_real_target(dtype, n, {"eagle3": ("eagle3", "smollm2-135m-instruct-eagle3"), **whiflash}, use)
    elif case == "stale":
        target, prompts = tiny_world(dtype)
        run_with_stale_dflash(target, prompts, variants, use, n)
    else:
        run_whiflash_in_bench_order(dtype, variants, use, n)
