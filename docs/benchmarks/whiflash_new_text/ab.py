"""ab.py CASE DTYPE N: WhiFlash's default call as the engine runs it ("now") beside two variants patched in, in one
process: "best", its exploring rounds at the drafter's best width (as before 2026-11-30's fifth session; now they
draft the widest width whose round costs at most EXPLORE_WIDENING times that, WidthPolicy.exploring_width); "no
opening", no exploring round at a call's first drafting round but where its gap calls it (exploring never cheap: since
2026-11-30's sixth session a call's opening explores on a schedule counted in calls, no longer where a vote has gone 16
rounds without the drafter, which is what this file's results.txt measured as "now"). Both keep the rest of the
engine, the dropped evidence of an exploring round that beats the leader too.

- ``stale``: N runs of the case made on purpose (docs/benchmarks/tiny_ab.py's run_with_stale_dflash): code, DFlash's
  carried evidence set bad, then math; speed over stock generate, tau, DFlash's share of the drafting rounds.
- ``tiny``: N runs, each with fresh bundles, in the bench's order (tiny_ab's run_in_bench_order, 2 passes after a
  warm-up): speed over stock generate per category, and tau.
- ``real``: the real target, EAGLE-3's default call alone beside both, N passes after a warm-up (tiny_ab's
  run_on_the_real_target): speed over EAGLE-3 alone per category, and tau.

    python docs/benchmarks/whiflash_new_text/ab.py stale bfloat16 3
    python docs/benchmarks/whiflash_new_text/ab.py tiny bfloat16 3
    python docs/benchmarks/whiflash_new_text/ab.py real float32 3
"""
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
_exploring_width = width_policy.WidthPolicy.exploring_width
_cheap_to_explore = width_policy.RoutedWidthPolicy._cheap_to_explore
VARIANTS = ("now", "best", "no opening")


def use(name: str) -> None:
    width_policy.WidthPolicy.exploring_width = (width_policy.WidthPolicy.best_drafting_width if name == "best"
                                                else _exploring_width)
    width_policy.RoutedWidthPolicy._cheap_to_explore = ((lambda self, other, best: False) if name == "no opening"
                                                        else _cheap_to_explore)


run_whiflash_case(sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), VARIANTS, use)
