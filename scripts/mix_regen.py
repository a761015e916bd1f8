"""Concatenate regenerated-data files for drafter training, optionally dropping domains.

Used by scripts/build_tiny_world.sh. Rows regenerated before the chat template's generation prompt stopped at
``<|assistant|>`` (hf_specgen before the tiny world's third DFlash stage) lack the newline that opens the assistant
turn in their ``response_ids``; with ``--tokenizer`` such rows get it prepended, so every row holds exactly the tokens
the target produces after the current generation prompt. Rows that already start with it are kept as they are.

    python scripts/mix_regen.py --tokenizer runs/tinyworld/target/model --drop-domains code \\
        --out runs/tinyworld/regen_mix2.jsonl runs/tinyworld/regen_code.jsonl runs/tinyworld/regen_mix.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="regenerated JSONL files; the first is never filtered")
    parser.add_argument("--out", required=True)
    parser.add_argument("--drop-domains", nargs="*", default=[],
                        help="drop rows of these domains from every input but the first")
    parser.add_argument("--tokenizer", help="add the turn's opening newline to rows that lack it (see above)")
    args = parser.parse_args()

    newline_ids = None
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        newline_ids = tokenizer("\n", add_special_tokens=False)["input_ids"]
    counts: Counter[str] = Counter()
    with open(args.out, "w", encoding="utf-8") as out:
        for n, path in enumerate(args.inputs):
            for line in open(path, encoding="utf-8"):
                row = json.loads(line)
                if n > 0 and row.get("domain") in args.drop_domains:
                    counts["dropped"] += 1
                    continue
                if tokenizer is not None and not tokenizer.decode(row["response_ids"]).startswith("\n"):
                    row["response_ids"] = newline_ids + row["response_ids"]
                    counts["newline added"] += 1
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                counts[f"kept {row.get('domain')}"] += 1
    print(f"wrote {args.out}: {dict(counts)}")


if __name__ == "__main__":
    main()
