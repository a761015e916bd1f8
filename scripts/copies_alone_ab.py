"""Copies verified alone (``CopyingWidthPolicy``) against copies inside the drafter's block, in one process.

For one prompt of each Spec-Bench category and of HumanEval (the README benchmark's seed-0 picks), times stock greedy
`generate`, the default call as it is ("new"), and the same call where no round is told a copy is at hand ("old":
``PromptLookup.copies_next`` reports none, so the drafter's policy chooses every width and copies go into its
block, as before copies could be verified alone). Each variant has its own drafter object, so their acceptance
estimates stay apart. One warm-up pass, then medians of ``--repeats`` passes taken in turns.

    python scripts/copies_alone_ab.py --mode dflash --drafter hub_models/smollm2-135m-instruct-dflash-b16
    python scripts/copies_alone_ab.py --mode whiflash --drafter hub_models/smollm2-135m-instruct-whiflash \\
        --dtype float32 --categories math_reasoning humaneval qa
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.engine import lookup
from hf_specgen.targets import resolve_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="dflash", choices=["dflash", "eagle3", "whiflash", "classic"])
    parser.add_argument("--drafter", default="hub_models/smollm2-135m-instruct-dflash-b16")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--categories", nargs="*", help="default: all")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafters = {name: hf_specgen.load_drafter(args.drafter, dtype=dtype) for name in ("new", "old")}
    announced = lookup.PromptLookup.copies_next
    variant = {"name": "new"}
    lookup.PromptLookup.copies_next = (  # "old": no round is told a copy is at hand
        lambda self, session: announced(self, session) * (variant["name"] == "new"))
    records = [r for r in pick_prompts(["specbench", "humaneval"], 1)
               if not args.categories or r["category"] in args.categories]
    totals = {"stock": 0.0, "new": 0.0, "old": 0.0}
    for record in records:
        ids = chat_ids(tokenizer, record["prompt"])
        common = dict(max_new_tokens=args.max_new_tokens, do_sample=False)

        def speculative(name):
            variant["name"] = name
            return target.generate(ids, **common, assistant_model=drafters[name], speculative_mode=args.mode,
                                   return_dict_in_generate=True)

        calls = {"stock": lambda: target.generate(ids, **common), "new": lambda: speculative("new"),
                 "old": lambda: speculative("old")}
        times, outputs = {name: [] for name in calls}, {}
        for repeat in range(args.repeats + 1):
            for name, call in calls.items():
                started = time.perf_counter()
                outputs[name] = call()
                if repeat:  # the first pass warms up
                    times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(seconds) for name, seconds in times.items()}
        for name in totals:
            totals[name] += medians[name]
        reference = outputs["stock"][0].tolist()
        cells = []
        for name in ("new", "old"):
            stats = outputs[name].speculative_stats
            same = outputs[name].sequences[0].tolist() == reference
            cells.append(f"{name} {medians['stock'] / medians[name]:.2f}x (tau {stats.mean_acceptance_length:.2f}, "
                         f"same as stock {same})")
        print(f"{record['category']:15s} stock {medians['stock']:.2f} s | " + " | ".join(cells), flush=True)
    print(f"all: new {totals['stock'] / totals['new']:.2f}x, old {totals['stock'] / totals['old']:.2f}x of stock")


if __name__ == "__main__":
    main()
