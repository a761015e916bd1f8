"""Everything this project could not run without a GPU, in one run on one (see scripts/gpu_check.sh).

On CUDA, for random-weight Qwen3 stand-ins (fp32, where every lossless mode must give exactly stock greedy tokens):
  1. exactness: every mode, eager and compiled (torch.compile "reduce-overhead" = CUDA graphs), batch 1 and a
     left-padded batch of 4 for the modes that batch;
  2. no recompiles: ten compiled calls with different prompt lengths and max_new_tokens inside one max_cache_len;
  3. host reads per round (the engine's own device-to-host reads: at most one per round);
  4. speed: the shipped tiny world (hub_models/) in bf16, eager and compiled, through `specgen bench --quick`.
Writes a JSON report (and the bench's files) under --out and exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import json
import random
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
ONE_READ_PER_ROUND = {"autoregressive", "dflash", "dflash-tree", "classic", "eagle3-chain", "eagle3-tree", "fly"}


def assistants(drafter, draft_lm, eagle) -> dict[str, tuple]:
    """name -> (assistant_model, generate kwargs naming the mode)."""
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=drafter, router="entropy")
    return {
        "autoregressive": (None, {"speculative_mode": "autoregressive"}),
        "dflash": (drafter, {"speculative_mode": "dflash"}),
        "dflash-tree": (drafter, {"speculative_mode": "dflash", "dflash_tree_nodes": 16}),
        "classic": (draft_lm, {"speculative_mode": "classic", "num_draft_tokens": 4}),
        "eagle3-chain": (eagle, {"speculative_mode": "eagle3", "eagle_top_k": 1, "num_draft_tokens": 4}),
        "eagle3-tree": (eagle, {"speculative_mode": "eagle3"}),
        "whiflash": (bundle, {"speculative_mode": "whiflash"}),
        # a gate no mismatch passes (the top-3 entropy never reaches ln 3): FLy must give exact greedy tokens
        "fly": (drafter, {"speculative_mode": "fly", "fly_entropy_threshold": 1.0986}),
        # ... and with a draft LM, drafting with prompt lookup (FLy's MLA)
        "fly-mla": (draft_lm, {"speculative_mode": "fly", "fly_entropy_threshold": 1.0986, "num_draft_tokens": 6}),
    }


def padded(rng, lengths, vocab, device):
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.tensor([rng.randrange(3, vocab - 1) for _ in range(n)])
        mask[b, width - n:] = 1
    return ids.to(device), mask.to(device)


def check_exactness(target, models, device) -> list[dict]:
    rows = []
    rng = random.Random(0)
    for compiled in (False, True):
        for name, (assistant, extra) in assistants(*models).items():
            for lengths in ([23], [5, 40, 17, 1]):
                ids, mask = padded(rng, lengths, target.config.vocab_size, device)
                ref = target.generate(ids, attention_mask=mask, max_new_tokens=48, do_sample=False)
                try:
                    out = target.generate(ids, attention_mask=mask, assistant_model=assistant,
                                          speculative_compile=compiled, max_new_tokens=48, do_sample=False,
                                          return_dict_in_generate=True, **extra)
                    ok = out.sequences.tolist() == ref.tolist()
                    detail = f"tau {out.speculative_stats.mean_acceptance_length:.2f}"
                except Exception:  # a crash is a failed check, reported with its traceback
                    ok, detail = False, traceback.format_exc(limit=3)
                rows.append({"check": "exact", "mode": name, "compiled": compiled, "batch": len(lengths), "ok": ok,
                             "detail": detail})
                print(f"exact  {name:15s} compiled={compiled!s:5s} batch={len(lengths)}  {'ok' if ok else 'FAIL'}  "
                      f"{detail.splitlines()[-1]}", flush=True)
    return rows


def check_recompiles(target, drafter, device) -> dict:
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
    result = {"check": "recompiles", "graphs_after_first_call": graphs_after_first, "graphs_after_ten": graphs,
              "call_seconds": times, "ok": graphs == graphs_after_first}
    print(f"recompiles: {graphs_after_first} graphs after call 1, {graphs} after call 10; "
          f"call times {[round(t, 3) for t in times]}", flush=True)
    return result


def check_host_reads(target, models, device) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_batch import HostReads  # the CPU test's counter, run here on CUDA

    rows = []
    for name, (assistant, extra) in assistants(*models).items():
        if name not in ONE_READ_PER_ROUND:
            continue
        ids, mask = padded(random.Random(2), [10, 25, 4], target.config.vocab_size, device)
        with HostReads() as counter:
            out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_compile=True,
                                  max_new_tokens=30, do_sample=False,
                                  return_dict_in_generate=True, **extra)
        reads, rounds = sum(counter.reads.values()), out.speculative_stats.num_rounds
        # one per round, plus the prefill's, the output's and the prompt check's (as tests/test_batch.py allows)
        rows.append({"check": "host_reads", "mode": name, "reads": reads, "rounds": rounds, "ok": reads <= rounds + 3})
        print(f"host reads {name:15s} {reads} reads in {rounds} rounds", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu_check_results")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the same checks (inductor, no CUDA graphs)")
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
    report = {"torch": torch.__version__, "transformers": transformers.__version__, "device": name, "checks": []}
    print(json.dumps({k: v for k, v in report.items() if k != "checks"}), flush=True)
    target, drafter, draft_lm, eagle = (m.to(device) for m in synthetic_pair("tiny", block_size=8,
                                                                             dtype=torch.float32))
    models = (drafter, draft_lm, eagle)
    report["checks"] += check_exactness(target, models, device)
    report["checks"].append(check_recompiles(target, drafter, device))
    report["checks"] += check_host_reads(target, models, device)
    if not args.skip_bench:
        for compiled in (False, True):
            folder = out / ("bench_compiled" if compiled else "bench_eager")
            command = [sys.executable, "-m", "hf_specgen.cli", "bench", "--quick", "--device", device.type,
                       "--out", str(folder), *(["--compile"] if compiled else [])]
            done = subprocess.run(command, capture_output=True, text=True)
            print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
            report["checks"].append({"check": "bench", "compiled": compiled, "ok": done.returncode == 0,
                                     "command": " ".join(command[1:])})
    failed = [c for c in report["checks"] if not c["ok"]]
    report["failed"] = len(failed)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(f"{len(report['checks']) - len(failed)} checks passed, {len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
