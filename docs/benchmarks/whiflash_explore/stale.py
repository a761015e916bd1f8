"""stale.py DTYPE RUNS: how WhiFlash's default call recovers when its DFlash drafter's carried evidence is stale and bad
(the tiny world's rare bad run: its first code rounds left DFlash rated below EAGLE-3 under both router votes, its
exploring rounds then verified 2 rows, and math ran on EAGLE-3's chains at tau 2.7, 1.6x stock, where DFlash's blocks
run at tau 7, 3.4x). "per call" starts each call's count of rounds towards the other drafter's exploring round from
none, as the engine did before 2026-11-30's third session; "carried" carries it, as the engine does now. Run in a
checkout of bb07b2d with this folder's explore.patch applied (``git apply``; this file and docs/benchmarks/tiny_ab.py
copied in), the two measure that patch's wider exploring rounds and dropped evidence with and without the count carried
(results.txt). The runs: docs/benchmarks/tiny_ab.py's ``run_with_stale_dflash``.

    python docs/benchmarks/whiflash_explore/stale.py bfloat16 2
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_specgen.engine import width_policy  # noqa: E402
from tiny_ab import run_with_stale_dflash, tiny_world  # noqa: E402

dtype, runs = getattr(torch, sys.argv[1]), int(sys.argv[2])
target, prompts = tiny_world(dtype)


def start_counts(name, bundle):
    """The old engine's count: none carried into a call."""
    if name == "per call":
        for estimate in width_policy._ACCEPTANCE.get(target, {}).get(bundle, {}).values():
            estimate.rounds_without = 0


run_with_stale_dflash(target, prompts, ("per call", "carried"), lambda name: None, runs, start_counts)
