"""How many tokens a DFlash drafter's draft vocabulary needs: for each size N, the share of answer tokens the N most
frequent training-answer tokens cover (training shards and held-out shards), and the offline tau on held-out
answers with the drafter's lm_head product restricted to them (the block states are computed once; teacher-forced,
bf16 autocast, as ``scripts/offline_tau.py``).

    python scripts/draft_vocab_tau.py hub_models/smollm2-135m-instruct-dflash-b16 --heldout-shards 54 55 \
        --exclude-shards 60 61 62 63 64 65 66 67 68 69 70
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import hf_specgen  # noqa: E402
from hf_specgen.drafters.dflash import DraftHead  # noqa: E402
from hf_specgen.training.corpus import read_jsonl  # noqa: E402
from hf_specgen.training.dflash_trainer import offline_acceptance_by_head  # noqa: E402
from hf_specgen.training.lm import chat_examples, most_frequent_answer_tokens  # noqa: E402
from hf_specgen.training.loop import load_frozen_target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drafter", help="a DFlash drafter folder (its own draft vocabulary, if any, is set aside)")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--data", default="datasets/smollm2-135m-instruct-distill/data")
    parser.add_argument("--heldout-shards", type=int, nargs="+", required=True, help="scored, never counted")
    parser.add_argument("--exclude-shards", type=int, nargs="*", default=[], help="neither counted nor scored")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--answers", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    skipped = {f"train-{n:05d}.jsonl.gz" for n in [*args.heldout_shards, *args.exclude_shards]}
    counted = [(json.loads(line)["response_ids"], 0) for shard in sorted(Path(args.data).glob("train-*.jsonl.gz"))
               if shard.name not in skipped for line in gzip.open(shard, "rt")]
    tokenizer, target = load_frozen_target(args.target)
    vocab_size = target.config.vocab_size
    rows = [row for n in args.heldout_shards for row in read_jsonl(f"{args.data}/train-{n:05d}.jsonl.gz")]
    heldout_tokens = torch.tensor([t for row in rows for t in row["response_ids"]])
    train_counts = Counter(t for ids, _ in counted for t in ids)
    vocabularies = {n: most_frequent_answer_tokens(counted, vocab_size, n) for n in args.sizes}
    examples = chat_examples(tokenizer, rows, 512)
    examples = examples[:: max(len(examples) // args.answers, 1)][: args.answers]
    drafter = hf_specgen.load_drafter(args.drafter, dtype=torch.float32).eval()
    heads = {None: DraftHead(target.lm_head, None),
             **{n: DraftHead(target.lm_head, ids) for n, ids in vocabularies.items()}}
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as scripts/offline_tau.py
        taus, blocks = offline_acceptance_by_head(drafter, target, examples, tokenizer.pad_token_id, heads)
    total = sum(train_counts.values())
    print(f"{len(counted)} training answers ({total} tokens), {len(rows)} held-out answers; offline tau on "
          f"{len(examples)} of them ({blocks} blocks)\n")
    print("| draft vocabulary | training answer tokens covered | held-out answer tokens covered | offline tau |")
    print("|---|---|---|---|")
    print(f"| all {vocab_size} | 100% | 100% | {taus[None]:.3f} |")
    for n, ids in vocabularies.items():
        share = sum(train_counts[t] for t in ids.tolist()) / total
        held = float(torch.isin(heldout_tokens, ids).float().mean())
        print(f"| {n} | {100 * share:.1f}% | {100 * held:.1f}% | {taus[n]:.3f} |")


if __name__ == "__main__":
    main()
