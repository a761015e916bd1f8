"""Which dtype a CPU should decode the real target in, stock and speculative, in one run (issue 27: `auto` must stay
right on CPUs with bf16 units and on AVX2-only ones).

Loads SmolLM2-135M-Instruct twice (bf16 and fp32) and times, for one prompt of each category, whole `generate`
calls taking turns: stock greedy `generate` in each dtype and the default call of each speculative mode in each
dtype. Prints tok/s (new tokens over the whole call, prefill included) and each call's speed over stock `generate`
in the same dtype and over the faster stock dtype, with what `hf_specgen.auto_dtype()` picks here.

    python scripts/dtype_choice.py --threads 1 --repeats 3 --max-new-tokens 96
"""

from __future__ import annotations

import argparse
import statistics

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import load_prompt_set
from hf_specgen.dtypes import cpu_runs_bf16_fast
from hf_specgen.targets import resolve_target

DRAFTERS = {"dflash": "hub_models/smollm2-135m-instruct-dflash-b16",
            "eagle3": "hub_models/smollm2-135m-instruct-eagle3"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--categories", nargs="+", default=["humaneval", "math_reasoning", "mt_bench"],
                        help="Spec-Bench categories (humaneval: HumanEval's first prompt); one prompt of each")
    parser.add_argument("--modes", nargs="+", default=sorted(DRAFTERS), choices=sorted(DRAFTERS))
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    targets = {name: hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
               for name, dtype in dtypes.items()}
    drafters = {(mode, name): hf_specgen.load_drafter(DRAFTERS[mode], dtype=dtype)
                for mode in args.modes for name, dtype in dtypes.items()}
    prompts = []
    for category in args.categories:
        rows = load_prompt_set("humaneval") if category == "humaneval" else [
            r for r in load_prompt_set("specbench") if r["category"] == category]
        prompts.append(tokenizer.apply_chat_template([{"role": "user", "content": rows[0]["prompt"]}],
                                                     add_generation_prompt=True, return_tensors="pt",
                                                     return_dict=True)["input_ids"])
    common = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)

    def call(name: str, mode: str | None):
        kwargs = {} if mode is None else dict(assistant_model=drafters[mode, name], speculative_mode=mode)
        return lambda: [targets[name].generate(ids, **common, **kwargs) for ids in prompts]

    calls = {(mode or "stock generate", name): call(name, mode) for mode in (None, *args.modes) for name in dtypes}
    seconds, outputs = time_in_turns(calls, args.repeats)
    new_tokens = {key: sum(out.shape[1] - ids.shape[1] for out, ids in zip(outs, prompts))
                  for key, outs in outputs.items()}
    speed = {key: new_tokens[key] / statistics.median(times) for key, times in seconds.items()}
    best_stock = max(speed["stock generate", name] for name in dtypes)
    units = "with" if cpu_runs_bf16_fast() else "without"
    print(f"CPU {units} bf16 units (torch: {torch.backends.cpu.get_cpu_capability()}), auto picks "
          f"{hf_specgen.auto_dtype()}; {args.threads} thread(s), {len(prompts)} prompts ({', '.join(args.categories)}),"
          f" {args.max_new_tokens} new tokens, medians of {args.repeats}")
    print("| call | dtype | tok/s | over stock, same dtype | over the faster stock |\n|---|---|---|---|---|")
    for (mode, name), value in speed.items():
        print(f"| {mode} | {name} | {value:.1f} | {value / speed['stock generate', name]:.2f}x | "
              f"{value / best_stock:.2f}x |")


if __name__ == "__main__":
    main()
