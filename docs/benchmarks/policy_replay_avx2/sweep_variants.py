"""Variants of the width policy replayed on this folder's three sets (docs/width-policy.md, "What else the replay
tried"): for each drafter and category, the geometric mean over the sets, both call orders and clock noise 0 / 0.1 of
stock's decode time over the policy's, and of the policy's over the best fixed width of that set and category.

    python docs/benchmarks/policy_replay_avx2/sweep_variants.py               # every variant
    python docs/benchmarks/policy_replay_avx2/sweep_variants.py current explore8

Each variant patches ``WidthPolicy`` in this process only; the package is unchanged.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "scripts"))

import policy_replay  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

Policy = width_policy.WidthPolicy
ORIGINAL = {name: getattr(Policy, name) for name in ("observe", "exploring")}


def explore_blocks(every: int, cost: float):
    """Blocks and chains also verify a wider round every ``every`` drafting rounds, as trees do."""
    def exploring(self, best):
        if isinstance(self.acceptance, width_policy.TreeAcceptanceEstimate):
            return ORIGINAL["exploring"](self, best)
        self.since_explored += 1
        wider = [w for w in self.widths if w > best and self.round_seconds(w) <= cost * self.round_seconds(best)]
        if wider and self.since_explored >= every:
            self.since_explored = 0
            return max(wider)
        return best
    return {"exploring": exploring}


def decay_in_plain_rounds(factor: float):
    """Plain rounds age the evidence too (the text moves on while nothing is drafted)."""
    def observe(self, width, accepted_per_row, seconds=None, within=None, rows=None):
        if width == 1 and isinstance(self.acceptance, width_policy.AcceptanceEstimate):
            estimate = self.acceptance
            estimate.reached = [r * factor for r in estimate.reached]
            estimate.accepted = [a * factor for a in estimate.accepted]
        return ORIGINAL["observe"](self, width, accepted_per_row, seconds, within, rows)
    return {"observe": observe}


def probe_resumes(passes):
    """A probe resumes drafting (drops the old evidence) when ``passes(policy, width, accepted)`` says so, besides
    the policy's own rule (half its drafts kept)."""
    def observe(self, width, accepted_per_row, seconds=None, within=None, rows=None):
        if width > 1 and self.probing and passes(self, width, sum(accepted_per_row) / len(accepted_per_row)):
            self.acceptance.forget()
        return ORIGINAL["observe"](self, width, accepted_per_row, seconds, within, rows)
    return {"observe": observe}


VARIANTS = {
    "current": {},
    "explore8": explore_blocks(8, 2.0),
    "explore8-cheap": explore_blocks(8, 1.3),
    "explore4-cheap": explore_blocks(4, 1.3),
    "explore16": explore_blocks(16, 2.0),
    "plain-decay-0.97": decay_in_plain_rounds(0.97),
    "plain-decay-0.93": decay_in_plain_rounds(0.93),
    "probe-quarter": probe_resumes(lambda p, w, kept: kept >= max(1.0, 0.25 * (w - 1))),
    "probe-one": probe_resumes(lambda p, w, kept: kept >= 1),
    "probe-pays": probe_resumes(lambda p, w, kept: (kept + 1) / p.round_seconds(w) > 1 / p.round_seconds(1)),
}


def best_fixed(data: dict, mode: str) -> dict[str, float]:
    verify = data["costs"][mode]["verify"]
    widths = width_policy.width_buckets(max(int(w) for w in verify), compiled=False)
    per_width = {w: policy_replay.fixed_width(data, mode, w) for w in widths}
    return {c: max(statistics.median(per_width[w][c]) for w in widths) for c in per_width[widths[0]]}


def geo_mean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    sets = [json.loads((HERE / f"seed{s}.json").read_text()) for s in (0, 1, 2)]
    best = {(i, mode): best_fixed(data, mode) for i, data in enumerate(sets) for mode in ("dflash", "eagle3")}
    for name in sys.argv[1:] or VARIANTS:
        for attribute, function in {**ORIGINAL, **VARIANTS[name]}.items():
            setattr(Policy, attribute, function)
        cells = {}  # (set, order, noise, mode, category) -> stock's time over the policy's
        for i, data in enumerate(sets):
            for order in ("blocks", "round-robin"):
                for noise, passes in ((0.0, 1), (0.1, 3)):
                    for mode in ("dflash", "eagle3"):
                        for category, ratios in policy_replay.replay(data, mode, passes, noise, 0, order).items():
                            cells[i, order, noise, mode, category] = statistics.median(ratios)
        categories = sorted({key[4] for key in cells})
        if name == (sys.argv[1:] or list(VARIANTS))[0]:
            print("variant | drafter | all | " + " | ".join(f"{c} (of best fixed)" for c in categories))
        for mode in ("dflash", "eagle3"):
            row = []
            for category in categories:
                keys = [k for k in cells if k[3] == mode and k[4] == category]
                row.append(f"{geo_mean(cells[k] for k in keys):.3f} "
                           f"({geo_mean(cells[k] / best[k[0], mode][category] for k in keys):.3f})")
            overall = geo_mean(v for k, v in cells.items() if k[3] == mode)
            print(f"{name} | {mode} | {overall:.4f} | " + " | ".join(row), flush=True)
    for attribute, function in ORIGINAL.items():
        setattr(Policy, attribute, function)


if __name__ == "__main__":
    main()
