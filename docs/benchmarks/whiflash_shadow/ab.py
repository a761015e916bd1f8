"""ab.py CASE DTYPE N: WhiFlash's default call with shadow.patch applied (``git apply
docs/benchmarks/whiflash_shadow/shadow.patch``; tried on 2026-11-30, a seventh session, and not kept): "shadow", at a
call's opening round where its exploring round is not due, DFlash drafts a block beside EAGLE-3's chain, unverified,
and where the block matched all the round committed the next round explores with DFlash; beside "no shadow" (that
block never drafted: the engine without the patch), in one process. The cases are those of
docs/benchmarks/whiflash_new_text/ab.py (tiny_ab.py's run_whiflash_case):

- ``stale``: N runs of the case made on purpose: code, DFlash's carried evidence set bad, then math.
- ``tiny``: N runs, each with fresh bundles, in the bench's order: speed over stock generate per category, and tau.
- ``real``: the real target, EAGLE-3's default call alone beside both, N passes after a warm-up.

At the end it prints how many shadow blocks were drafted and how many matched their round's commit.

    python docs/benchmarks/whiflash_shadow/ab.py tiny bfloat16 3
"""
import atexit
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402
from tiny_ab import run_whiflash_case  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
Routed = width_policy.RoutedWidthPolicy
_shadow_drafter, _observe_shadow = Routed.shadow_drafter, Routed.observe_shadow
VARIANTS = ("shadow", "no shadow")
COUNTS = {"drafted": 0, "matched": 0}


def observe_shadow(self, matched, committed):
    COUNTS["drafted"] += 1
    COUNTS["matched"] += committed >= 2 and matched >= committed
    _observe_shadow(self, matched, committed)


def use(name: str) -> None:
    Routed.shadow_drafter = (lambda self: None) if name == "no shadow" else _shadow_drafter


Routed.observe_shadow = observe_shadow
atexit.register(lambda: print(f"shadow blocks drafted {COUNTS['drafted']}, matched their round's commit "
                              f"{COUNTS['matched']}"))
run_whiflash_case(sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), VARIANTS, use)
