"""ab_tiny.py DTYPE REPEATS [MAX_NEW_TOKENS]: WhiFlash's default call on the tiny world as the engine runs it ("now")
and with this folder's patch ("delivered", patch.py), each with its own bundle, in the bench's order (code, math,
prose, 10 prompts each, per pass), in one process; speed over stock generate (wall time with the prefill), medians of
REPEATS passes after one warm-up, and tau.

    python docs/benchmarks/whiflash_delivered/ab_tiny.py bfloat16 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import patch  # noqa: E402
from tiny_ab import run_whiflash_in_bench_order  # noqa: E402

dtype, repeats = getattr(torch, sys.argv[1]), int(sys.argv[2])
max_new = int(sys.argv[3]) if len(sys.argv) > 3 else 192
run_whiflash_in_bench_order(dtype, ("now", "delivered"), lambda name: patch.enable(name == "delivered"), 1, repeats,
                            max_new)
