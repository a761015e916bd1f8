"""real_ab_routers.py DTYPE PASSES: the real target, WhiFlash's default call with the bundle's neural router ("neural")
against its entropy router ("entropy", the bundle's default threshold) as each round's vote, beside EAGLE-3's default
call alone, the base (docs/benchmarks/tiny_ab.py's run_on_the_real_target: one prompt of each Spec-Bench category,
96 new tokens, PASSES passes after a warm-up): speed over EAGLE-3 alone per category, and tau.

    python docs/benchmarks/whiflash_router_context/real_ab_routers.py float32 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
from hf_specgen.drafters import whiflash as wf  # noqa: E402
from tiny_ab import run_on_the_real_target  # noqa: E402

CURRENT = ["neural"]
_start = wf.WhiFlashProposer.start


def start(self, session, prompt_features):
    self.settings.router = CURRENT[0]
    _start(self, session, prompt_features)


wf.WhiFlashProposer.start = start


def use(name):
    CURRENT[0] = "entropy" if name == "entropy" else "neural"


run_on_the_real_target(getattr(torch, sys.argv[1]), int(sys.argv[2]),
                       {"eagle3": ("eagle3", "smollm2-135m-instruct-eagle3"),
                        "neural": ("whiflash", "smollm2-135m-instruct-whiflash"),
                        "entropy": ("whiflash", "smollm2-135m-instruct-whiflash")}, use)
