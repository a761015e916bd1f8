"""`specgen data regenerate`'s two decoders on one batch of the data set's prompts: stock batched `generate` against
the engine's plain decoding (`speculative_mode="autoregressive"`: a static cache, and a batch's finished rows leave
it, where stock computes them to the end). Prints each call's time and answer tokens per second and whether the
answers agree row by row.

    python scripts/regen_decoder_ab.py --start 26112 --batch 64 --order stock engine
    python scripts/regen_decoder_ab.py --start 26112 --batch 64 --order engine stock

``--start`` picks the prompt file's rows start..start+batch-1 (left-padded to the longest, as a batch of
``regenerate`` is; its batches are shorter, being cut from a shard's prompts sorted by length).
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.targets import resolve_target
from hf_specgen.training.corpus import read_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--data", default="datasets/smollm2-135m-instruct-distill/prompts.jsonl.gz")
    parser.add_argument("--start", type=int, default=26112)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--order", nargs=2, choices=["stock", "engine"], default=["stock", "engine"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if sorted(args.order) != ["engine", "stock"]:
        parser.error("--order takes stock and engine, in the order to run them")
    torch.set_num_threads(args.threads)
    path = resolve_target(args.target)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    records = read_jsonl(args.data)[args.start: args.start + args.batch]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for r in records]
    inputs = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    print(f"{len(chats)} prompts, padded to {inputs['input_ids'].shape[1]} tokens, {args.threads} thread(s), fp32")
    settings = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    answers = {}
    for decoder in args.order:
        extra = {"speculative_mode": "autoregressive"} if decoder == "engine" else {}
        start = time.perf_counter()
        with torch.no_grad():
            generated = model.generate(**inputs, **settings, **extra)[:, inputs["input_ids"].shape[1]:]
        seconds = time.perf_counter() - start
        rows = []
        for row in generated.tolist():  # the answer up to its end token, as regenerate writes it
            rows.append(row[: row.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in row
                        else [t for t in row if t != tokenizer.pad_token_id])
        answers[decoder] = rows
        tokens = sum(map(len, rows))
        print(f"{decoder}: {seconds:.1f} s, {tokens} answer tokens, {tokens / seconds:.1f} tok/s")
    same = sum(a == b for a, b in zip(answers["stock"], answers["engine"]))
    print(f"same answers: {same} of {len(chats)} rows")


if __name__ == "__main__":
    main()
