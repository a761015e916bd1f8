"""Held-out tau of real-target drafters, decoded end to end: the tokens committed per round, pooled per category.

Compares drafter folders on the same held-out prompts (HumanEval, GSM8K and MT-Bench questions of the benchmark
sets, never trained on), fp32, greedy, fixed widths (DFlash block 16, EAGLE-3's tree 4/6/16), so that the figure is
the drafter's and not the width policy's. No timing: tau only (docs/benchmarks/gpu_h100/README.md).

    python scripts/drafter_tau.py --num-prompts 2 dflash=hub_models/smollm2-135m-instruct-dflash-b16 \
        eagle3=hub_models/smollm2-135m-instruct-eagle3
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

CATEGORIES = ("humaneval", "math_reasoning", "mt_bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drafters", nargs="+", help="MODE=FOLDER, MODE one of dflash, eagle3")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--num-prompts", type=int, default=2, help="prompts per category")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_target(args.target)
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    prompts = [p for p in pick_prompts(["humaneval", "specbench"], args.num_prompts) if p["category"] in CATEGORIES]
    print(f"| drafter | {' | '.join(CATEGORIES)} | all |\n|---|{'---|' * (len(CATEGORIES) + 1)}")
    for spec in args.drafters:
        mode, _, folder = spec.partition("=")
        if mode not in ("dflash", "eagle3") or not folder:
            raise ValueError(f"{spec!r}: write MODE=FOLDER with MODE dflash or eagle3")
        drafter = hf_specgen.load_drafter(folder, dtype=torch.float32)
        committed: dict[str, list[int]] = {c: [0, 0] for c in CATEGORIES}  # category -> [tokens, rounds]
        for prompt in prompts:
            input_ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt["prompt"]}],
                                                      add_generation_prompt=True, return_tensors="pt",
                                                      return_dict=True)["input_ids"]
            # the drafter's tau, not the width policy's: a fixed block, and EAGLE-3's tree 4/6/16 (its default call
            # on a CPU is an adaptive chain, whose tau is the policy's choice of lengths)
            fixed_width = ({"block_size": 16} if mode == "dflash" else
                           {"eagle_top_k": 4, "eagle_depth": 6, "eagle_total_tokens": 16, "adaptive_width": False})
            out = target.generate(input_ids, assistant_model=drafter, speculative_mode=mode, do_sample=False,
                                  max_new_tokens=args.max_new_tokens, return_dict_in_generate=True, **fixed_width)
            rounds = out.speculative_stats.acceptance_lengths
            committed[prompt["category"]][0] += sum(rounds)
            committed[prompt["category"]][1] += len(rounds)
        tokens, rounds = (sum(c[i] for c in committed.values()) for i in (0, 1))
        cells = " | ".join(f"{t / max(r, 1):.2f}" for t, r in committed.values())
        print(f"| {mode} {folder} | {cells} | {tokens / max(rounds, 1):.2f} |", flush=True)


if __name__ == "__main__":
    main()
