"""ab.py WORLD DTYPE N: WhiFlash's default call with the engine's exploring rounds as they are ("again": an exploring
round whose tokens over its cost beat the preferred drafter's expected rate explores again at the vote's next round)
and with one exploring round per gap ("per gap": the next exploring round forced back to its gap, as before 2026-11-30's
fourth session; not quite that engine: a round that beat the leader still has its first gap back, where the engine
before doubled the gap of one that left the drafter behind on its estimate), in one process.

- ``tiny``: N runs, each with fresh bundles, in the bench's order (docs/benchmarks/tiny_ab.py, 2 passes after a
  warm-up): speed over stock generate per category, and tau.
- ``real``: the real target, EAGLE-3's default call alone beside both, N passes after a warm-up (tiny_ab's
  run_on_the_real_target): speed over EAGLE-3 alone per category, and tau.

    python docs/benchmarks/whiflash_surprise/ab.py tiny bfloat16 3
    python docs/benchmarks/whiflash_surprise/ab.py real float32 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402
from tiny_ab import run_on_the_real_target, run_whiflash_in_bench_order  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
_observe = width_policy.RoutedWidthPolicy.observe


def _observe_per_gap(self, *args, **kwargs):
    _observe(self, *args, **kwargs)
    for by_vote in self.estimates.values():
        for estimate in by_vote.values():
            estimate.explore_width = 0  # no exploring round due before its gap


def use(name: str) -> None:
    width_policy.RoutedWidthPolicy.observe = _observe_per_gap if name == "per gap" else _observe


world, dtype, n = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3])
if world == "real":
    run_on_the_real_target(dtype, n, {"eagle3": ("eagle3", "smollm2-135m-instruct-eagle3"),
                                      "again": ("whiflash", "smollm2-135m-instruct-whiflash"),
                                      "per gap": ("whiflash", "smollm2-135m-instruct-whiflash")}, use)
else:
    run_whiflash_in_bench_order(dtype, ("again", "per gap"), use, n)
