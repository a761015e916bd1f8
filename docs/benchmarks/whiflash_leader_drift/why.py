"""why.py COSTS [NAME=CONSTANT:VALUE ...]: where WhiFlash's default call loses the tiny world's math, replayed without a
clock (scripts/policy_replay.py's WhiFlash replay: the tiny world's bench prompts, the drafters' teacher-forced
acceptance and the router's votes from docs/benchmarks/policy_replay_tiny/seed0.json, the costs of COSTS). Four noise
seeds of three passes each; for each variant, the geometric mean of stock's time over the call's by category, and
for the engine as it is, math's rounds by drafter, kind (preferred, exploring, a call's opening exploring round) and
width, with the math call each EAGLE-3-preferred round fell in.

COSTS: docs/benchmarks/policy_replay_tiny/costs_clocked.json (fp32, AVX2 kernels, clocked by the engine on
2026-12-02) or costs_bf16.json beside this file (bf16, measured by `policy_replay.py --costs` on a 2-core Intel Xeon
with AVX512-BF16 on 2026-12-02, a data job on the other core). A table measured after verify costs were shared across
drafters holds DFlash's widths in EAGLE-3's table too; EAGLE-3's are cut to its chain's 8 rows here. The variants of
leader_drift.patch need it applied (`git apply docs/benchmarks/whiflash_leader_drift/leader_drift.patch`), then
`python docs/benchmarks/whiflash_leader_drift/why.py COSTS nodrift=LEADER_DRIFT:1e9`.
"""
import collections
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
import policy_replay as replay  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

data = json.loads((ROOT / "docs/benchmarks/policy_replay_tiny/seed0.json").read_text())
data["costs"] = {k: v for k, v in json.loads(Path(sys.argv[1]).read_text()).items() if k in ("dflash", "eagle3")}
data["costs"]["eagle3"]["verify"] = {w: s for w, s in data["costs"]["eagle3"]["verify"].items() if int(w) <= 8}
verify = replay.shared_verify(data)
for costs in data["costs"].values():
    costs["verify"] = {w: s for w, s in verify.items() if w in costs["verify"]}
math_calls = [call for call in data["calls"] if call["category"] == "math"]

rounds = collections.Counter()
kept = collections.Counter()
kind = {}
choose = width_policy.RoutedWidthPolicy.choose


def choose_and_note(self, *args, **kwargs):
    """The routed policy's choice, with the round's kind noted."""
    self.explored, self.opening_explored = None, False
    width = choose(self, *args, **kwargs)
    kind["now"] = ("opening explore" if self.opening_explored else "explore") if self.explored else "preferred"
    return width


play_round = replay.play_round


def play_and_count(policy, mode, call, committed, width, widest, noisy, seconds, unsure):
    k, round_seconds = play_round(policy, mode, call, committed, width, widest, noisy, seconds, unsure)
    if call["category"] == "math":
        key = (mode if width > 1 else "plain", kind["now"], width)
        rounds[key] += 1
        kept[key] += k
        if mode == "eagle3" and width > 1 and kind["now"] == "preferred":
            rounds["EAGLE-3 preferred in math call", math_calls.index(call)] += 1
    return k, round_seconds


width_policy.RoutedWidthPolicy.choose = choose_and_note
replay.play_round = play_and_count
variants = {"engine": {}}
for spec in sys.argv[2:]:
    name, _, settings = spec.partition("=")
    variants[name] = {k: float(v) for k, v in (item.split(":") for item in settings.split(","))}
defaults = {name: getattr(width_policy, name) for changes in variants.values() for name in changes}
for name, changes in variants.items():
    for constant, value in {**defaults, **changes}.items():
        setattr(width_policy, constant, value)
    ratios = collections.defaultdict(list)
    for seed in range(4):
        for category, values in replay.replay_routed(data, 3, 0.1, seed, "blocks").items():
            ratios[category].extend(values)
    print(name, {c: round(statistics.geometric_mean(v), 3) for c, v in sorted(ratios.items())})
    if name == "engine":
        for key in sorted(rounds, key=str):
            extra = f", {kept[key]} drafts kept" if key in kept else ""
            print(f"    math rounds {key}: {rounds[key]}{extra}")
    rounds.clear()
    kept.clear()
for constant, value in defaults.items():
    setattr(width_policy, constant, value)
