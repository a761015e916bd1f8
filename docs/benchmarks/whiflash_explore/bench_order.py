"""bench_order.py DTYPE RUNS [REPEATS]: WhiFlash's default call on the tiny world with the hf_specgen of the tree this
file is in (copy it and docs/benchmarks/tiny_ab.py into a checkout of another commit to measure that one), RUNS times,
each with a fresh bundle, in the bench's order (code, math, prose, 10 prompts each, per pass); speed over stock generate
in the same process (wall time with the prefill), medians of REPEATS passes after one warm-up, and tau. Two trees'
processes, taking turns, compare the engine before and after a change.

    python docs/benchmarks/whiflash_explore/bench_order.py bfloat16 2
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from tiny_ab import run_whiflash_in_bench_order  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
dtype, runs = getattr(torch, sys.argv[1]), int(sys.argv[2])
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
run_whiflash_in_bench_order(dtype, ("whiflash",), lambda name: None, runs, repeats)
