"""trace_bench.py PASSES DTYPE: WhiFlash's default call traced inside `specgen bench --target tiny --threads 1`'s own
order (every method taking turns on each prompt, the bench's seeded prompts), with the hf_specgen of this file's tree.
For each of its calls it prints the pass, category, prompt, tokens, rounds, tau and the rounds each drafter (or a plain
step) ran; for the last two code prompts and the math prompts, every drafting round too: its drafter, width, drafts
kept, each drafter's expected rate (tokens per second at its best width) under the round's context (the router's
vote), and for an exploring round its own rate against the leader's. It stops after PASSES passes (no report).

    MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \\
        python docs/benchmarks/whiflash_opening_schedule/trace_bench.py 3 fp32
"""
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import hf_specgen  # noqa: E402
from hf_specgen.bench import runner  # noqa: E402
from hf_specgen.cli import main  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
passes, dtype = int(sys.argv[1]), sys.argv[2]
TRACED = "whiflash neural, default call"
LOG = {"on": False, "records": None}


def traced_turns(target, prompts, methods, repeats, progress=None):
    """runner.run_methods_in_turns's order (a warm-up of each method, then passes with the methods' turn rotating),
    printing the traced method's calls."""
    records = LOG["records"]
    for _, kwargs, before in methods:
        if before is not None:
            before(0)
        target.generate(prompts[0], **kwargs)
    for p in range(passes):
        turn = [(p + k) % len(methods) for k in range(len(methods))]
        for i, ids in enumerate(prompts):
            for m in turn:
                name, kwargs, before = methods[m]
                if before is not None:
                    before(i)
                LOG["on"] = name == TRACED and records[i]["category"] in ("code", "math") and (
                    records[i]["category"] == "math" or i >= 8)
                out = target.generate(ids, return_dict_in_generate=True, **kwargs)
                LOG["on"] = False
                if name == TRACED:
                    stats = out.speculative_stats
                    rounds = len(stats.acceptance_lengths)
                    print(f"pass {p} {records[i]['category']:5s} #{i:2d} new {stats.new_tokens:3d} rounds {rounds:3d} "
                          f"tau {stats.new_tokens / max(rounds, 1):.2f} "
                          f"{dict(collections.Counter(stats.drafter_per_round))}", flush=True)
    raise SystemExit(0)


_encode = runner.encode_prompts


def encode(models, args):
    ids, records = _encode(models, args)
    LOG["records"] = records
    return ids, records


_observe = width_policy.RoutedWidthPolicy.observe


def observe(self, width, accepted_per_row, seconds=None, within=None, rows=None):
    """RoutedWidthPolicy.observe, printing the round first (while LOG is on)."""
    explored = self.explored
    line = None
    if LOG["on"]:
        rates = self._drafting_rates()
        line = (f"   r{len(self.round_drafters) - 1:3d} {self.round_drafters[-1]:6s} w{width:2d} kept "
                f"{min(accepted_per_row):2d} rates "
                + " ".join(f"{k}={v:.0f}@{self.policies[k].best_drafting_width()}" for k, v in rates.items())
                + f" ctx {self.streak_context}")
        if explored is not None:
            other, best, _ = explored
            own = (min(accepted_per_row) + 1) / self.policies[other].round_seconds(width)
            line += f" EXPLORE{' (opening)' if self.opening_explored else ''} own={own:.0f} vs {rates[best]:.0f}"
    _observe(self, width, accepted_per_row, seconds, within, rows)
    if line is not None:
        print(line, flush=True)


runner.encode_prompts = encode
runner.run_methods_in_turns = traced_turns
width_policy.RoutedWidthPolicy.observe = observe
main(["bench", "--target", "tiny", "--threads", "1", "--dtype", dtype, "--out", "/tmp/trace_bench_unused"])
