"""ab.py DTYPE REPEATS [MAX_NEW_TOKENS]: WhiFlash's default call on the tiny world, its EAGLE-3 rounds drafting the
chosen width (as the engine does: RoutedWidthPolicy.unsure_drafting_width) or drafting on to the reach while sure, as
a chain alone does (patched here), the widths the buckets either way. The bench's order (code, math, prose, 10 prompts each, per pass),
each variant with its own bundle, in one process; speed over stock generate (wall time with the prefill), medians of
REPEATS passes after one warm-up, and tau.

    python docs/benchmarks/whiflash_reach/ab.py bfloat16 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
from hf_specgen.engine.width_policy import RoutedWidthPolicy  # noqa: E402
from tiny_ab import run_whiflash_in_bench_order  # noqa: E402

dtype, repeats = getattr(torch, sys.argv[1]), int(sys.argv[2])
max_new = int(sys.argv[3]) if len(sys.argv) > 3 else 192
chosen = RoutedWidthPolicy.unsure_drafting_width


def use(name):
    RoutedWidthPolicy.unsure_drafting_width = chosen if name != "reach" else (
        lambda self, width: self.current.unsure_drafting_width(width))


run_whiflash_in_bench_order(dtype, ("now", "reach"), use, 1, repeats, max_new)
