"""ab_real.py DTYPE PASSES: the real target (SmolLM2-135M-Instruct), one prompt of each of the README bench's
categories (its order), 96 new tokens: EAGLE-3's default call alone, WhiFlash's as the engine runs it ("now") and
WhiFlash's with this folder's patch ("delivered", patch.py), each with its own bundle, in one process, the variants'
order turned each pass. Per category and over all: wall time per token with the prefill, medians of PASSES passes
after one warm-up, as a speed over EAGLE-3 alone, and tau.

    python docs/benchmarks/whiflash_delivered/ab_real.py bfloat16 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import patch  # noqa: E402
from tiny_ab import run_on_the_real_target  # noqa: E402

run_on_the_real_target(getattr(torch, sys.argv[1]), int(sys.argv[2]),
                       {"eagle3": ("eagle3", "smollm2-135m-instruct-eagle3"),
                        "now": ("whiflash", "smollm2-135m-instruct-whiflash"),
                        "delivered": ("whiflash", "smollm2-135m-instruct-whiflash")},
                       lambda name: patch.enable(name == "delivered"))
