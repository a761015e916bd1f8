"""The default speculative call against stock `generate`, in one run (issue 27's quick check; `specgen bench` is the
full benchmark).

Times, for one batch of chat prompts: stock greedy `generate`, the engine's plain decoding
(`speculative_mode="autoregressive"`), the default DFlash call (adaptive width) and the fixed block
(`block_size=16`). Each call runs once to warm up (the width policy measures its costs then), then `--repeats` times
in turn; medians are printed with their ratio to stock, and the default call's round widths.

    python scripts/default_call_ratio.py --target smollm2 --dtype bfloat16 --batch 1 --max-new-tokens 128
    python scripts/default_call_ratio.py --target tiny --dtype bfloat16 --batch 8 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import statistics

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.targets import resolve_target

TARGETS = {"smollm2": ("smollm2-135m-instruct", "hub_models/smollm2-135m-instruct-dflash-b16"),
           "tiny": ("hub_models/specgen-tiny", "hub_models/specgen-tiny-dflash-b16")}
PROMPTS = ["Write a Python function that checks whether a number is prime.", "Hi", "What is 17 times 23?",
           "Explain why the sky is blue.", "Write a Python class for a stack.",
           "Summarize: the cat sat on the mat all day.", "def fib(n):", "List three colors."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="smollm2")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target_path, drafter_path = TARGETS[args.target]
    dtype = getattr(torch, args.dtype)
    path = resolve_target(target_path)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafter = hf_specgen.load_drafter(drafter_path, dtype=dtype)
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in (PROMPTS * (args.batch // len(PROMPTS) + 1))[: args.batch]]
    inputs = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    common = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    calls = {
        "stock generate": lambda: target.generate(**inputs, **common),
        "engine, plain steps": lambda: target.generate(**inputs, **common, speculative_mode="autoregressive"),
        "dflash, default call": lambda: target.generate(**inputs, **common, assistant_model=drafter,
                                                        speculative_mode="dflash"),
        "dflash, block_size=16": lambda: target.generate(**inputs, **common, assistant_model=drafter,
                                                         speculative_mode="dflash", block_size=16),
    }
    seconds, _ = time_in_turns(calls, args.repeats)
    stock = statistics.median(seconds["stock generate"])
    print(f"{args.target}, {args.dtype}, batch {args.batch}, {args.max_new_tokens} new tokens, "
          f"{args.threads} thread(s), medians of {args.repeats}")
    print("| call | time | against stock |\n|---|---|---|")
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"| {name} | {median:.3f} s | {stock / median:.2f}x |")
    out = target.generate(**inputs, **common, assistant_model=drafter, speculative_mode="dflash",
                          return_dict_in_generate=True)
    print("default call's round widths:", out.speculative_stats.round_widths)


if __name__ == "__main__":
    main()
