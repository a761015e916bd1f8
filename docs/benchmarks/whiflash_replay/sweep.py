"""WhiFlash's default call against its drafters' default calls, replayed without a clock (scripts/policy_replay.py)
on the real target's benchmark answers: seeds 0 and 1 of docs/benchmarks/unsure_stop_avx2 (28 prompts each, with the
router's vote after every answer token), both call orders, clock noise 0 and 0.1; for each call and category the
geometric mean over those 8 cells of stock's decode time over the call's, and WhiFlash's over the better drafter
alone's. The calls: each drafter alone; WhiFlash now; WhiFlash with the router's vote ignored (one estimate per
drafter); WhiFlash with an oracle's vote for the router's (at each answer token, the drafter whose draft keeps more
tokens there, EAGLE-3 at a tie: what a perfect router would vote); and WhiFlash without some of the changes of
2026-11-28 (``patched``): each of the third session's alone, both (the call as that session found it), and
those and the earlier ones (the call before that day). Both drafters share one verify table, as in a WhiFlash call.

    python docs/benchmarks/whiflash_replay/sweep.py                                   # the data's costs (AVX2, fp32)
    python docs/benchmarks/whiflash_replay/sweep.py --costs docs/benchmarks/whiflash_replay/costs_bf16_avx512.json
    python docs/benchmarks/whiflash_replay/sweep.py --last-gap 64                     # another cap for the back-off

The earlier calls patch RoutedWidthPolicy and the exploring gap's cap in this process only; the package is
unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import policy_replay  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

Routed = width_policy.RoutedWidthPolicy
SETS = [ROOT / "docs/benchmarks/unsure_stop_avx2" / f"seed{n}.json" for n in (0, 1)]


def before_drafter_for(self, vote, context, now=Routed._drafter_for):
    """Before: the most promising drafter's policy took every plain round and every probe (no turns)."""
    self.last_prober = None
    return now(self, vote, context)


def before_observe(self, width, accepted_per_row, seconds=None, within=None, rows=None):
    """Before: a passing probe dropped the estimate under the round's vote only (WidthPolicy.observe's own)."""
    width_policy.PolicyOfPolicies.observe(self, width, accepted_per_row, seconds, within, rows)
    if width > 1:
        self.pooled[self.round_drafters[-1]].observe(min(width, rows or width), accepted_per_row)


def one_streak_prepare(self, copying=False, now=Routed.prepare):
    """Before: one plain streak per drafter policy, over every vote's rounds (prepare swaps in the vote's; undone)."""
    streaks = {name: policy.plain_streak for name, policy in self.policies.items()}
    now(self, copying)
    for name, policy in self.policies.items():
        policy.plain_streak = streaks[name]


@contextlib.contextmanager
def patched(*undone: str):
    """WhiFlash without some of the changes of 2026-11-28: "back-off" (the exploring rounds' gap stays at its first
    value), "streaks" (one plain streak per drafter, not per vote), "turns" (the most promising drafter's policy ran
    every probe, and a passing probe dropped the vote's estimate only)."""
    unknown = set(undone) - {"back-off", "streaks", "turns"}
    if unknown:
        raise ValueError(f"patched: no change named {sorted(unknown)}; undo any of back-off, streaks, turns")
    now = (Routed._drafter_for, Routed.observe, Routed.prepare, width_policy.LAST_OTHER_DRAFTER_EVERY)
    if "back-off" in undone:
        width_policy.LAST_OTHER_DRAFTER_EVERY = width_policy.OTHER_DRAFTER_EVERY
    if "streaks" in undone:
        Routed.prepare = one_streak_prepare
    if "turns" in undone:
        Routed._drafter_for, Routed.observe = before_drafter_for, before_observe
    try:
        yield
    finally:
        Routed._drafter_for, Routed.observe, Routed.prepare, width_policy.LAST_OTHER_DRAFTER_EVERY = now


def with_oracle_votes(data: dict) -> dict:
    """The data with each vote replaced by the drafter whose draft keeps more tokens at that answer token."""
    calls = [dict(call, whiflash_votes=["dflash" if d > e else "eagle3" for e, d in zip(call["eagle3"], call["dflash"])])
             for call in data["calls"]]
    return dict(data, calls=calls)


def cells(data: dict, order: str, noise: float) -> dict[str, dict[str, float]]:
    """Each call's median ratio per category in one replay of 2 passes."""
    def median(ratios):
        return {category: statistics.median(values) for category, values in ratios.items()}
    out = {"EAGLE-3 alone": median(policy_replay.replay(data, "eagle3", 2, noise, 0, order, unsure=True)),
           "DFlash alone": median(policy_replay.replay(data, "dflash", 2, noise, 0, order)),
           "WhiFlash now": median(policy_replay.replay_routed(data, 2, noise, 0, order, "router")),
           "WhiFlash now, the vote ignored": median(policy_replay.replay_routed(data, 2, noise, 0, order, "one")),
           "WhiFlash now, an oracle's vote": median(
               policy_replay.replay_routed(with_oracle_votes(data), 2, noise, 0, order, "router"))}
    earlier = {"WhiFlash now, exploring every 16 rounds": ("back-off",),
               "WhiFlash now, one plain streak per drafter": ("streaks",),
               "WhiFlash at the start of the third session of 2026-11-28": ("back-off", "streaks"),
               "WhiFlash before 2026-11-28": ("back-off", "streaks", "turns")}
    for name, undone in earlier.items():
        with patched(*undone):
            out[name] = median(policy_replay.replay_routed(data, 2, noise, 0, order, "router"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", help="a cost table to replay under instead of the data's (policy_replay --costs)")
    parser.add_argument("--last-gap", type=int, help="the exploring gap's cap for the calls marked now "
                        f"(width_policy.LAST_OTHER_DRAFTER_EVERY, {width_policy.LAST_OTHER_DRAFTER_EVERY})")
    args = parser.parse_args()
    if args.last_gap:
        width_policy.LAST_OTHER_DRAFTER_EVERY = args.last_gap
    table: dict[str, dict[str, list[float]]] = {}
    for path in SETS:
        data = json.loads(path.read_text())
        if args.costs:
            data["costs"] = {k: v for k, v in json.loads(Path(args.costs).read_text()).items()
                             if k in policy_replay.DRAFTERS}
        verify = policy_replay.shared_verify(data)
        for costs in data["costs"].values():
            costs["verify"] = {w: s for w, s in verify.items() if w in costs["verify"]}
        for order in ("blocks", "round-robin"):
            for noise in (0.0, 0.1):
                run = cells(data, order, noise)
                best = {c: max(run["EAGLE-3 alone"][c], run["DFlash alone"][c]) for c in run["EAGLE-3 alone"]}
                for name, ratios in run.items():
                    for category, ratio in ratios.items():
                        table.setdefault(name, {}).setdefault(category, []).append(ratio)
                        if name.startswith("WhiFlash"):
                            table.setdefault(f"{name} / the better drafter alone", {}).setdefault(
                                category, []).append(ratio / best[category])
    categories = sorted(next(iter(table.values())))

    def geomean(values):
        return math.exp(sum(map(math.log, values)) / len(values))
    print("| call | " + " | ".join(categories) + " | all | worst cell |")
    print("|---|" + "---|" * (len(categories) + 2))
    for name, by_category in table.items():
        every = [r for c in categories for r in by_category[c]]
        print(f"| {name} | " + " | ".join(f"{geomean(by_category[c]):.3f}" for c in categories)
              + f" | {geomean(every):.3f} | {min(every):.3f} |")


if __name__ == "__main__":
    main()
