"""Compiled steps on a CPU against stock `generate`: the engine's plain decoding and the default DFlash / EAGLE-3 calls
with `speculative_compile=True` or `"max-autotune"` (inductor's own GEMM kernels on frozen weights), in one run.

On a CPU with AVX2 only, MKL's fp32 GEMM for 2-16 rows costs about two single-row steps; inductor's templates,
which need frozen weights, cost little more than one row (docs/width-policy.md, "Compiled steps on an AVX2 CPU").
This times, per prompt (one of HumanEval, GSM8K and MT-Bench, the benchmark's own), stock greedy `generate` (eager)
and each compiled call in turns, after one warm-up call each that compiles (its time and the process's peak memory
are printed: compiling with max-autotune takes minutes per call kind), and checks every text against stock's and
against the compiled plain decoding's (in fp32 inductor's kernels sum in another order than eager's, so at a
near-tie the compiled target's greedy choice can differ from eager's; speculation adds no difference of its own when
a method's text equals the compiled plain decoding's).

    python scripts/compiled_cpu_ratio.py --compile max-autotune --modes autoregressive dflash eagle3 --threads 2
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.targets import resolve_target

DRAFTERS = {"dflash": "hub_models/smollm2-135m-instruct-dflash-b16",
            "eagle3": "hub_models/smollm2-135m-instruct-eagle3"}
CATEGORIES = ("humaneval", "math_reasoning", "mt_bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile", default="max-autotune", choices=["true", "max-autotune"])
    parser.add_argument("--modes", nargs="+", default=["autoregressive", "dflash", "eagle3"],
                        choices=["autoregressive", "dflash", "eagle3"])
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5, help="which benchmark prompt of each category")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    setting = True if args.compile == "true" else args.compile
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    drafters = {mode: hf_specgen.load_drafter(DRAFTERS[mode], dtype=torch.float32).eval()
                for mode in args.modes if mode in DRAFTERS}
    records = [r for r in pick_prompts(["specbench", "humaneval"], 1, args.seed) if r["category"] in CATEGORIES]
    n = args.max_new_tokens
    common = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, return_dict_in_generate=True)
    compiled = dict(common, speculative_compile=setting, max_cache_len=512)  # one cache size: one graph per step

    def call(ids, mode):
        if mode == "stock":
            return lambda: target.generate(ids, **common)
        return lambda: target.generate(ids, speculative_mode=mode, assistant_model=drafters.get(mode), **compiled)

    first = chat_ids(tokenizer, records[0]["prompt"])
    print(f"{torch.get_num_threads()} threads, CPU capability {torch.backends.cpu.get_cpu_capability()}, fp32, "
          f"speculative_compile={setting!r}, {n} new tokens, medians of {args.repeats} passes in turns\n")
    for mode in ["stock", *args.modes]:  # the compiling calls, timed apart from the passes
        start = time.perf_counter()
        call(first, mode)()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"warm-up {mode}: {time.perf_counter() - start:.0f} s, process peak memory {peak:.1f} GB", flush=True)
    print("\n| prompt | " + " | ".join(f"{m} (compiled)" if m != "stock" else m for m in ["stock", *args.modes])
          + " |\n|---|" + "---|" * (1 + len(args.modes)))
    for record in records:
        ids = chat_ids(tokenizer, record["prompt"])
        seconds, outputs = time_in_turns({mode: call(ids, mode) for mode in ["stock", *args.modes]}, args.repeats)
        stock = statistics.median(seconds["stock"])
        cells = [f"{1000 * stock / n:.0f} ms/token"]
        for mode in args.modes:
            out = outputs[mode]
            same = ["stock" if out.sequences.equal(outputs["stock"].sequences) else None]
            if "autoregressive" in args.modes and mode != "autoregressive":
                same.append("plain" if out.sequences.equal(outputs["autoregressive"].sequences) else None)
            tau = out.speculative_stats.mean_acceptance_length if mode != "autoregressive" else 1.0
            text = "text = " + ", ".join(s for s in same if s) if any(same) else "text differs"
            cells.append(f"{stock / statistics.median(seconds[mode]):.2f}x (tau {tau:.2f}; {text})")
        print(f"| {record['category']} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
