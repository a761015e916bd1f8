"""Probes called by sure plain steps (WidthPolicy.observe_sure), replayed without a clock (scripts/policy_replay.py)
on the real target's benchmark answers: seeds 0 and 1 of docs/benchmarks/unsure_stop_avx2 (28 prompts each, with the
target's sure tokens after every answer token), both call orders, clock noise 0 and 0.1. For each default call
(DFlash, EAGLE-3's chain stopping when unsure, WhiFlash) and category: the geometric mean over those 8 cells of stock's
decode time over the call's, with the target's verdicts on its plain steps, and without them (the calls as before).

    python docs/benchmarks/sure_probes/replay_ab.py                       # the data's costs (SmolLM2, fp32, AVX2)
    python docs/benchmarks/sure_probes/replay_ab.py --costs docs/benchmarks/whiflash_replay/costs_bf16_avx512.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import policy_replay  # noqa: E402

SETS = [ROOT / "docs/benchmarks/unsure_stop_avx2" / f"seed{n}.json" for n in (0, 1)]
DRAFTER_COSTS = ("dflash", "eagle3")


def cells(data: dict, call: str) -> dict[str, list[float]]:
    """Every cell's per-category mean ratio for one default call on one data set."""
    out: dict[str, list[float]] = {}
    for order in ("blocks", "round-robin"):
        for noise in (0.0, 0.1):
            if call == "whiflash":
                ratios = policy_replay.replay_routed(data, 2, noise, 0, order)
            else:
                ratios = policy_replay.replay(data, call, 2, noise, 0, order, unsure=call == "eagle3")
            for category, values in ratios.items():
                out.setdefault(category, []).append(statistics.fmean(values))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs",
                        help="a cost table measured by scripts/policy_replay.py --costs (default: the data's)")
    args = parser.parse_args()
    table: dict[str, dict[str, list[float]]] = {}
    for path in SETS:
        data = json.loads(path.read_text())
        if "target_sure" not in data["calls"][0]:
            raise SystemExit(f"{path} lacks the target's sure tokens: add them with scripts/policy_replay.py "
                             "--add-votes")
        if args.costs:
            costs = json.loads(Path(args.costs).read_text())
            data["costs"] = {k: v for k, v in costs.items() if k in DRAFTER_COSTS}
        shared = policy_replay.shared_verify(data)  # WhiFlash's calls share one verify table
        routed = copy.deepcopy(data)
        for costs in routed["costs"].values():
            costs["verify"] = {w: s for w, s in shared.items() if w in costs["verify"]}
        for sure in (True, False):
            for source in (data, routed):
                for call in source["calls"]:
                    if not sure:
                        call.pop("target_sure", None)
            for call, source in (("dflash", data), ("eagle3", data), ("whiflash", routed)):
                label = f"{call}, {'with' if sure else 'without'} the target's sure steps"
                for category, values in cells(source, call).items():
                    table.setdefault(label, {}).setdefault(category, []).extend(values)
    categories = sorted(next(iter(table.values())))
    print("| default call | " + " | ".join(categories) + " | all | worst cell |")
    print("|---|" + "---|" * (len(categories) + 2))
    for label, by_category in table.items():
        means = [math.exp(statistics.fmean(math.log(v) for v in by_category[c])) for c in categories]
        every = [v for c in categories for v in by_category[c]]
        overall = math.exp(statistics.fmean(math.log(v) for v in every))
        print(f"| {label} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {overall:.3f} | {min(every):.3f} |")


if __name__ == "__main__":
    main()
