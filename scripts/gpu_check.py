"""Everything this project could not run without a GPU, in one run on one (see scripts/gpu_check.sh).

On CUDA, for random-weight Qwen3 stand-ins (fp32, where every lossless mode must give exactly stock greedy tokens):
  1. exactness: every mode, eager and compiled (torch.compile "reduce-overhead" = CUDA graphs), batch 1 and a
     left-padded batch of 4 for the modes that batch;
  2. no recompiles: ten compiled calls with different prompt lengths and max_new_tokens inside one max_cache_len;
  3. host reads per round (the engine's own device-to-host reads: at most one per round);
  4. speed: the shipped tiny world (hub_models/) in bf16, eager and compiled, through `specgen bench --quick`;
  5. a hybrid target (Qwen3.5-style linear attention): plain and DFlash chain decoding with CUDA graphs, each partly
     rejected round restoring the recurrent states and re-feeding its committed rows eagerly between replays.
Writes a JSON report (and the bench's files) under --out, rewritten after every check, and exits non-zero if a check
fails. Checks not reached within --budget-seconds (or before the run was stopped: SIGTERM from `timeout`) are listed
in the report as "not_checked", and the exit status is then non-zero too.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import hf_specgen  # noqa: E402
from hf_specgen.bench.models import synthetic_pair  # noqa: E402

# Modes whose greedy rounds read the device once (WhiFlash's router and FLy's prompt lookup read tokens on the host).
ONE_READ_PER_ROUND = {"autoregressive", "dflash", "dflash-drafter-alone", "dflash-draft-vocab", "dflash-tree", "classic",
                      "eagle3-chain", "eagle3-tree", "eagle3-chain-adaptive", "fly"}


def assistants(drafter, draft_lm, eagle) -> dict[str, tuple]:
    """name -> (assistant_model, generate kwargs naming the mode)."""
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=drafter, router="entropy")
    restricted = copy.deepcopy(drafter)  # proposes every other token id only (its lm_head over half the rows)
    restricted.set_draft_vocab(range(0, drafter.config.vocab_size, 2))
    return {
        "autoregressive": (None, {"speculative_mode": "autoregressive"}),
        "dflash": (drafter, {"speculative_mode": "dflash"}),  # the default call: copied tokens (prompt lookup) too
        "dflash-drafter-alone": (drafter, {"speculative_mode": "dflash", "prompt_lookup": False}),
        "dflash-draft-vocab": (restricted, {"speculative_mode": "dflash"}),
        "dflash-tree": (drafter, {"speculative_mode": "dflash", "dflash_tree_nodes": 16}),
        "classic": (draft_lm, {"speculative_mode": "classic", "num_draft_tokens": 4}),
        "eagle3-chain": (eagle, {"speculative_mode": "eagle3", "eagle_top_k": 1, "num_draft_tokens": 4}),
        "eagle3-tree": (eagle, {"speculative_mode": "eagle3"}),  # the default call on a GPU: budgets adapt
        "eagle3-chain-adaptive": (eagle, {"speculative_mode": "eagle3", "eagle_top_k": 1}),  # a CPU's default
        "whiflash": (bundle, {"speculative_mode": "whiflash"}),
        # with an EAGLE-3 chain (a CPU's default): the width policy picks each round's drafter and width
        "whiflash-chain-adaptive": (bundle, {"speculative_mode": "whiflash", "eagle_top_k": 1}),
        # a gate no mismatch passes (the top-3 entropy never reaches ln 3): FLy must give exact greedy tokens
        "fly": (drafter, {"speculative_mode": "fly", "fly_entropy_threshold": 1.0986}),
        # ... and with a draft LM, drafting with prompt lookup (FLy's MLA)
        "fly-mla": (draft_lm, {"speculative_mode": "fly", "fly_entropy_threshold": 1.0986, "num_draft_tokens": 6}),
    }


class Report:
    """The JSON report, rewritten after every check; a check past the deadline is not started but listed as not
    checked (with every other check that did not run)."""

    def __init__(self, path: Path, header: dict, budget_seconds: float):
        self.path, self.header, self.rows = path, header, []
        self.deadline = time.monotonic() + budget_seconds
        self.planned: list[str] = []
        self.wanted = lambda name: True  # main's passes narrow it (checks that never passed before go first)

    def plan(self, names: list[str]) -> None:
        self.planned += names

    def due(self, name: str) -> bool:
        """Whether to run check `name` now: time is left, this pass wants it and it has not run yet."""
        return (time.monotonic() < self.deadline and self.wanted(name)
                and name not in {row["name"] for row in self.rows})

    def add(self, name: str, row: dict) -> None:
        self.rows.append({"name": name, **row})
        self.write()

    def write(self) -> None:
        done = {row["name"] for row in self.rows}
        failed = [row["name"] for row in self.rows if not row["ok"]]
        report = {**self.header, "checks": self.rows, "failed": failed,
                  "not_checked": [name for name in self.planned if name not in done]}
        self.path.write_text(json.dumps(report, indent=1))


def padded(rng, lengths, vocab, device):
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.tensor([rng.randrange(3, vocab - 1) for _ in range(n)])
        mask[b, width - n:] = 1
    return ids.to(device), mask.to(device)


def check_exactness(report: Report, target, models, device, compiled_values=(False, True), names=None,
                    batches=([23], [5, 40, 17, 1])) -> None:
    rng = random.Random(0)
    table = assistants(*models)  # built once: a new WhiFlash bundle per case would be a new decoder (and graphs)
    cases = [(compiled, name, lengths) for compiled in compiled_values for name in table
             if names is None or name in names for lengths in batches]
    for compiled, name, lengths in cases:
        assistant, extra = table[name]
        ids, mask = padded(rng, lengths, target.config.vocab_size, device)
        check = f"exact {name} compiled={compiled} batch={len(lengths)}"
        if not report.due(check):
            continue
        ref = target.generate(ids, attention_mask=mask, max_new_tokens=48, do_sample=False)
        try:
            out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_compile=compiled,
                                  max_new_tokens=48, do_sample=False, return_dict_in_generate=True, **extra)
            ok = out.sequences.tolist() == ref.tolist()
            detail = f"tau {out.speculative_stats.mean_acceptance_length:.2f}"
        except Exception:  # a crash is a failed check, reported with its traceback
            ok, detail = False, traceback.format_exc(limit=3)
        report.add(check, {"ok": ok, "detail": detail})
        print(f"exact  {name:15s} compiled={compiled!s:5s} batch={len(lengths)}  {'ok' if ok else 'FAIL'}  "
              f"{detail.splitlines()[-1]}", flush=True)


def check_recompiles(report: Report, target, drafter, device) -> None:
    if not report.due("recompiles"):
        return
    torch._dynamo.reset()
    counters.clear()
    rng = random.Random(1)
    times, graphs_after_first = [], None
    for call in range(10):
        prompt_len, max_new = rng.randint(8, 120), rng.randint(16, 100)
        ids, mask = padded(rng, [prompt_len], target.config.vocab_size, device)
        t0 = time.perf_counter()
        target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                        speculative_compile=True, max_cache_len=512, max_new_tokens=max_new, do_sample=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if call == 0:
            graphs_after_first = counters["stats"]["unique_graphs"]
    graphs = counters["stats"]["unique_graphs"]
    report.add("recompiles", {"graphs_after_first_call": graphs_after_first, "graphs_after_ten": graphs,
                              "call_seconds": times, "ok": graphs == graphs_after_first})
    print(f"recompiles: {graphs_after_first} graphs after call 1, {graphs} after call 10; "
          f"call times {[round(t, 3) for t in times]}", flush=True)


def check_host_reads(report: Report, target, models, device) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_batch import HostReads  # the CPU test's counter, run here on CUDA

    table = assistants(*models)
    names = [name for name in table if name in ONE_READ_PER_ROUND]
    for name in names:
        if not report.due(f"host reads {name}"):
            continue
        assistant, extra = table[name]
        ids, mask = padded(random.Random(2), [10, 25, 4], target.config.vocab_size, device)
        with HostReads() as counter:
            out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_compile=True,
                                  max_new_tokens=30, do_sample=False,
                                  return_dict_in_generate=True, **extra)
        reads, rounds = sum(counter.reads.values()), out.speculative_stats.num_rounds
        # one per round, plus the prefill's, the output's and the prompt check's (as tests/test_batch.py allows)
        report.add(f"host reads {name}", {"reads": reads, "rounds": rounds, "ok": reads <= rounds + 3})
        print(f"host reads {name:15s} {reads} reads in {rounds} rounds", flush=True)


def check_hybrid(report: Report, device) -> None:
    from hf_specgen.architectures import _assistant, _build

    if not any(report.due(f"hybrid {mode} compiled") for mode in ("autoregressive", "dflash")):
        return
    target = hf_specgen.enable(_build("qwen3_5_text").to(device))  # the architecture walk's small fp32 model
    ids = torch.tensor([[5, 9, 22, 41, 7, 13, 60, 3, 88]], device=device)
    reference = target.generate(ids, max_new_tokens=32, do_sample=False, eos_token_id=None)
    for mode, extra in (("autoregressive", {}), ("dflash", {"assistant_model": _assistant("dflash", target).to(device),
                                                            "block_size": 4})):
        if not report.due(f"hybrid {mode} compiled"):
            continue
        try:
            out = target.generate(ids, speculative_mode=mode, speculative_compile=True, max_new_tokens=32,
                                  do_sample=False, eos_token_id=None, **extra)
            ok, detail = out.tolist() == reference.tolist(), ""
        except Exception:
            ok, detail = False, traceback.format_exc(limit=3)
        report.add(f"hybrid {mode} compiled", {"ok": ok, "detail": detail})
        print(f"hybrid {mode:15s} compiled  {'ok' if ok else 'FAIL'}  {detail.splitlines()[-1] if detail else ''}",
              flush=True)


def check_bench(report: Report, out: Path, device) -> None:
    for compiled in (False, True):
        if not report.due(f"bench compiled={compiled}"):
            continue
        folder = out / ("bench_compiled" if compiled else "bench_eager")
        command = [sys.executable, "-m", "hf_specgen.cli", "bench", "--quick", "--device", device.type,
                   "--out", str(folder), *(["--compile"] if compiled else [])]
        done = subprocess.run(command, capture_output=True, text=True)
        print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
        report.add(f"bench compiled={compiled}", {"ok": done.returncode == 0, "command": " ".join(command[1:])})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu_check_results")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the same checks (inductor, no CUDA graphs)")
    parser.add_argument("--budget-seconds", type=float, default=float("inf"),
                        help="start no check after this many seconds; the rest are reported as not checked")
    parser.add_argument("--compiled-first", action="store_true",
                        help="the CUDA-graph checks (exactness, recompiles, host reads, hybrid) before the eager "
                             "exactness ones, for a short budget that earlier runs spent on the eager ones")
    parser.add_argument("--passed", nargs="+", type=Path, default=[], metavar="REPORT",
                        help="earlier gpu_check.json reports: the checks none of them passed run first, then (time "
                             "left) the ones they passed, so that a short budget reaches what never ran on a GPU")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    # Every mode and batch size compiles the shared step functions with its own shapes (dynamo's default keeps 8).
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check needs a CUDA device (torch.cuda.is_available() is False); --device cpu is a dry run")
    import transformers

    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    header = {"torch": torch.__version__, "transformers": transformers.__version__, "device": name}
    print(json.dumps(header), flush=True)
    report = Report(out / "gpu_check.json", header, args.budget_seconds)
    # `timeout` stops a run with SIGTERM: leave the report (with what was not checked) before exiting.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    try:
        target, drafter, draft_lm, eagle = (m.to(device) for m in synthetic_pair("tiny", block_size=8,
                                                                                 dtype=torch.float32))
        models = (drafter, draft_lm, eagle)
        report.plan([f"exact {n} compiled={c} batch={b}" for c in (False, True) for n in assistants(*models)
                     for b in (1, 4)] + ["recompiles"] + [f"host reads {n}" for n in assistants(*models)
                                                           if n in ONE_READ_PER_ROUND]
                    + [f"hybrid {m} compiled" for m in ("autoregressive", "dflash")]
                    + ["exact dflash compiled=max-autotune batch=1"]
                    + ([] if args.skip_bench else [f"bench compiled={c}" for c in (False, True)]))
        passed_before = {row["name"] for path in args.passed for row in json.loads(path.read_text())["checks"]
                         if row["ok"]}
        passes = [lambda name: name not in passed_before, lambda name: name in passed_before] if passed_before \
            else [lambda name: True]
        for wanted in passes:
            report.wanted = wanted
            check_exactness(report, target, models, device, (True,) if args.compiled_first else (False, True))
            check_recompiles(report, target, drafter, device)
            check_host_reads(report, target, models, device)
            check_hybrid(report, device)
            # torch's "max-autotune" mode (autotuned GEMMs and CUDA graphs): written for GPUs, run on CPUs only so far
            check_exactness(report, target, models, device, ("max-autotune",), names=("dflash",), batches=([23],))
            if args.compiled_first:
                check_exactness(report, target, models, device, (False,))
            if not args.skip_bench:
                check_bench(report, out, device)
    finally:
        report.write()
        done = {row["name"] for row in report.rows}
        missing = [n for n in report.planned if n not in done]
        failed = [row["name"] for row in report.rows if not row["ok"]]
        print(f"{len(report.rows) - len(failed)} checks passed, {len(failed)} failed, {len(missing)} not checked"
              + (f": {', '.join(missing)}" if missing else ""), flush=True)
    sys.exit(1 if failed or missing else 0)


if __name__ == "__main__":
    main()
