"""stale.py DTYPE RUNS: how WhiFlash's default call recovers when its DFlash drafter's carried evidence is stale and bad
(the tiny world's rare bad run: its first code rounds left DFlash rated below EAGLE-3 under both router votes, its
exploring rounds then verified 2 rows, and math ran on EAGLE-3's chains at tau 2.7, 1.6x stock, where DFlash's blocks
run at tau 7, 3.4x). "per call" starts each call's count of rounds towards the other drafter's exploring round from
none, as the engine did before 2026-11-30's third session; "carried" carries it, as the engine does now. Run in a
checkout of bb07b2d with this folder's explore.patch applied (``git apply``; this file and docs/benchmarks/tiny_ab.py
copied in), the two measure that patch's wider exploring rounds and dropped evidence with and without the count carried
(results.txt). Each run, for each variant, a fresh bundle decodes the 10 code prompts, then every carried DFlash
estimate is set to 4 rounds' worth of slots kept 20% of the time, and the 10 math prompts follow: their wall time over
stock generate's, tau, and the share of drafting rounds DFlash ran.

    python docs/benchmarks/whiflash_explore/stale.py bfloat16 2
"""
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_specgen  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402
from tiny_ab import MODELS, tiny_world  # noqa: E402

dtype, runs = getattr(torch, sys.argv[1]), int(sys.argv[2])
target, prompts = tiny_world(dtype)


def start_counts(bundle):
    """The old engine's count: none carried into a call."""
    for estimate in width_policy._ACCEPTANCE.get(target, {}).get(bundle, {}).values():
        estimate.rounds_without = 0

for ids in prompts["math"]:
    target.generate(ids, do_sample=False, max_new_tokens=192)
start = time.perf_counter()
for ids in prompts["math"]:
    target.generate(ids, do_sample=False, max_new_tokens=192)
stock = time.perf_counter() - start
for run in range(runs):
    for name in ("per call", "carried"):
        bundle = hf_specgen.load_drafter(MODELS / "specgen-tiny-whiflash", dtype=dtype)
        for ids in prompts["code"]:
            if name == "per call":
                start_counts(bundle)
            target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=192)
        for context, estimate in width_policy._ACCEPTANCE[target][bundle].items():
            if context.startswith("dflash"):
                estimate.reached = [0.0] + [4.0] * (len(estimate.reached) - 1)
                estimate.accepted = [0.0] + [0.8] * (len(estimate.accepted) - 1)
                estimate.widest = 2
        start, tokens, rounds, drafters = time.perf_counter(), 0, 0, []
        for ids in prompts["math"]:
            if name == "per call":
                start_counts(bundle)
            stats = target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=192,
                                    return_dict_in_generate=True).speculative_stats
            tokens, rounds = tokens + stats.new_tokens, rounds + stats.num_rounds
            drafters += [d for d in stats.drafter_per_round if d in ("eagle3", "dflash")]
        seconds = time.perf_counter() - start
        print(f"run {run + 1} {name}: math {stock / seconds:.2f}x stock, tau {tokens / rounds:.2f}, "
              f"DFlash {drafters.count('dflash')} of {len(drafters)} drafting rounds", flush=True)
