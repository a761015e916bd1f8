"""Give a DFlash drafter (or the DFlash side of a WhiFlash bundle) a draft vocabulary: the N most frequent answer
tokens of distillation shards, the only tokens it will propose. Its lm_head product then runs over N rows instead of
the target's vocabulary (lossless: the target verifies every token). Rewrites the folder in place.

    python scripts/set_draft_vocab.py hub_models/smollm2-135m-instruct-dflash-b16 --size 8192 --exclude-shards 54 55
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import hf_specgen  # noqa: E402
from hf_specgen.training.lm import most_frequent_answer_tokens  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="DFlash drafter or WhiFlash bundle folders")
    parser.add_argument("--data", default="datasets/smollm2-135m-instruct-distill/data")
    parser.add_argument("--size", type=int, default=8192, help="N tokens (0: the whole vocabulary again)")
    parser.add_argument("--exclude-shards", type=int, nargs="*", default=[], help="held-out shards, not counted")
    args = parser.parse_args()
    excluded = {f"train-{n:05d}.jsonl.gz" for n in args.exclude_shards}
    shards = sorted(p for p in Path(args.data).glob("train-*.jsonl.gz") if p.name not in excluded)
    # (answer ids, 0): the whole sequence is answer
    answers = [(json.loads(line)["response_ids"], 0) for shard in shards for line in gzip.open(shard, "rt")]
    for folder in args.folders:
        loaded = hf_specgen.load_drafter(folder)
        drafter = loaded.parallel if isinstance(loaded, hf_specgen.WhiFlash) else loaded
        vocab = most_frequent_answer_tokens(answers, drafter.config.vocab_size, args.size) if args.size else None
        drafter.set_draft_vocab(vocab)
        loaded.save_pretrained(folder)
        print(f"{folder}: draft vocabulary of {args.size or 'every'} tokens, from {len(answers)} answers of "
              f"{len(shards)} shards")


if __name__ == "__main__":
    main()
