"""Offline tau of real-target drafters on answers no drafter trained on: the trainers' own held-out estimates
(DFlash: leading matches of a 16-token block; EAGLE-3: of a greedy chain), teacher-forced, bf16 autocast.

The answers come from distillation shards written after the drafters were trained (shards 40-41 for the drafters
of the second GPU session), 64 of them spread over the shards (every eighth), so that all domains appear.

    python scripts/offline_tau.py dflash=hub_models/smollm2-135m-instruct-dflash-b16 \
        eagle3=hub_models/smollm2-135m-instruct-eagle3 --shards 40 41
"""

from __future__ import annotations

import argparse

import torch

import hf_specgen
from hf_specgen.training.corpus import read_jsonl
from hf_specgen.training.dflash_trainer import offline_acceptance
from hf_specgen.training.eagle3_trainer import offline_chain_acceptance
from hf_specgen.training.lm import chat_examples
from hf_specgen.training.loop import load_frozen_target

DATA = "datasets/smollm2-135m-instruct-distill/data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drafters", nargs="+", help="MODE=FOLDER, MODE one of dflash, eagle3")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--shards", type=int, nargs="+", required=True, help="shard numbers no drafter trained on")
    parser.add_argument("--answers", type=int, default=64)
    parser.add_argument("--eagle-depth", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer, target = load_frozen_target(args.target)
    rows = [row for n in args.shards for row in read_jsonl(f"{DATA}/train-{n:05d}.jsonl.gz")]
    examples = chat_examples(tokenizer, rows, 512)
    examples = examples[:: max(len(examples) // args.answers, 1)][: args.answers]
    print("| drafter | offline tau | judged |\n|---|---|---|")
    for spec in args.drafters:
        mode, _, folder = spec.partition("=")
        if mode not in ("dflash", "eagle3") or not folder:
            raise ValueError(f"{spec!r}: write MODE=FOLDER with MODE dflash or eagle3")
        drafter = hf_specgen.load_drafter(folder, dtype=torch.float32).eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if mode == "dflash":
                result = offline_acceptance(drafter, target, examples, tokenizer.pad_token_id)
                judged = f"{result['blocks_judged']} blocks"
            else:
                result = offline_chain_acceptance(drafter, target, examples, tokenizer.pad_token_id,
                                                  depth=args.eagle_depth)
                judged = f"{result['rounds_judged']} chains of {args.eagle_depth}"
        print(f"| {mode} {folder} | {result['offline_tau']:.2f} | {judged} |", flush=True)


if __name__ == "__main__":
    main()
