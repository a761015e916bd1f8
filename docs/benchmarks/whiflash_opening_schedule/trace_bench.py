"""trace_bench.py PASSES DTYPE: WhiFlash's default call traced inside `specgen bench --target tiny --threads 1`'s own
order (every method taking turns on each prompt, the bench's seeded prompts: the bench's own loop, whose traced
method's generate calls this wraps), with the hf_specgen of this file's tree. For each of its calls it prints the
pass, category, prompt, tokens, rounds, tau and the rounds each drafter (or a plain step) ran; for the last two code
prompts and the math prompts, every drafting round too: its drafter, width, drafts kept, each drafter's expected rate
(tokens per second at its best width) under the round's context (the router's vote), and for an exploring round its
own rate against the leader's. It stops once the traced method has run PASSES passes (no report).

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
from hf_specgen.bench.harness import run_methods_in_turns  # noqa: E402
from hf_specgen.cli import main  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
passes, dtype = int(sys.argv[1]), sys.argv[2]
TRACED = "whiflash neural, default call"
LOG = {"on": False, "records": None}


def traced_turns(target, prompts, methods, repeats, progress=None):
    """The bench's own run_methods_in_turns, with each of the traced method's calls after its warm-up printed (its
    rounds too, where LOG is on); it stops once the traced method has decoded every prompt PASSES times."""
    records, traced = LOG["records"], next(kwargs for name, kwargs, _ in methods if name == TRACED)
    place = {id(ids): i for i, ids in enumerate(prompts)}
    generate, calls = target.generate, [0]

    def generate_traced(ids, **kwargs):
        if kwargs.get("assistant_model") is not traced["assistant_model"]:
            return generate(ids, **kwargs)
        calls[0] += 1
        if calls[0] == 1:  # the warm-up
            return generate(ids, **kwargs)
        p, i = (calls[0] - 2) // len(prompts), place[id(ids)]
        category = records[i]["category"]
        LOG["on"] = category == "math" or (category == "code" and i >= 8)
        out = generate(ids, **kwargs)
        LOG["on"] = False
        stats = out.speculative_stats
        rounds = len(stats.acceptance_lengths)
        print(f"pass {p} {category:5s} #{i:2d} new {stats.new_tokens:3d} rounds {rounds:3d} "
              f"tau {stats.new_tokens / max(rounds, 1):.2f} {dict(collections.Counter(stats.drafter_per_round))}",
              flush=True)
        if calls[0] == 1 + passes * len(prompts):
            raise SystemExit(0)
        return out

    target.generate = generate_traced
    return run_methods_in_turns(target, prompts, methods, repeats, progress)


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
