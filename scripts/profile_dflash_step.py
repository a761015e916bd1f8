"""Where a DFlash training step's time goes, phase by phase, on the real target's distillation data.

Issue 26 item 2: profile a step before removing what repeats. Each variant (attention kind x training vocabulary)
runs the same batches: the frozen target's tapped states, the drafter forward with the loss, the backward, the
optimizer step. Prints a markdown table of median seconds per phase and the scored tokens per second.

    python scripts/profile_dflash_step.py --drafter hub_models/smollm2-135m-instruct-dflash-b16 \
        --data datasets/smollm2-135m-instruct-distill --steps 3 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hf_specgen.models.dflash import DFlashDraftModel
from hf_specgen.reports import markdown_table
from hf_specgen.training import dflash_trainer as dt
from hf_specgen.training.corpus import read_jsonl
from hf_specgen.training.lm import chat_examples
from hf_specgen.training.loop import BudgetBatches, load_frozen_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--drafter", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--records", type=int, default=1024, help="records read (batches are drawn from these)")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--max-anchors", type=int, default=192)
    parser.add_argument("--anchor-budget", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant (after one warm-up step)")
    parser.add_argument("--attention", nargs="+", default=["dense", "blocks"], choices=dt.ATTENTION_KINDS)
    parser.add_argument("--train-vocab", nargs="+", default=["seen"], choices=["all", "seen"])
    parser.add_argument("--soft-label-weight", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer, target = load_frozen_target(args.target)
    drafter = DFlashDraftModel.from_pretrained(args.drafter, dtype=torch.float32)
    drafter.train()
    examples = chat_examples(tokenizer, read_jsonl(args.data)[: args.records], args.seq_len)
    weights = dt.slot_weights(drafter.block_size, dt.default_gamma(drafter.block_size))
    budget = BudgetBatches([dt.anchor_count(ex, args.max_anchors) for ex in examples], args.anchor_budget, seed=0)
    vocabularies = {"all": None, "seen": dt.seen_vocabulary(examples, target.config.vocab_size)}
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=0.0)  # lr 0: every variant sees the same weights

    rows = []
    for vocab_name in args.train_vocab:
        for attention in args.attention:
            phases: dict[str, list[float]] = {"target forward": [], "drafter + loss": [], "backward": [], "optimizer": []}
            scored = []
            for step in range(args.steps + 1):
                generator = torch.Generator().manual_seed(step)
                batch = dt.build_anchor_batch([examples[i] for i in budget.batch(step)], drafter.block_size,
                                              args.max_anchors, tokenizer.pad_token_id, generator)
                times = [time.perf_counter()]
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    passed = dt.target_pass(drafter, target, batch.input_ids)
                    times.append(time.perf_counter())
                    loss, n_scored = dt.dflash_loss(drafter, target, batch, weights, attention,
                                                    vocabularies[vocab_name], passed, args.soft_label_weight)
                    times.append(time.perf_counter())
                loss.backward()
                times.append(time.perf_counter())
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                times.append(time.perf_counter())
                if step == 0:
                    continue  # warm-up: first-call allocations
                for name, start, end in zip(phases, times, times[1:]):
                    phases[name].append(end - start)
                scored.append(n_scored / (times[-1] - times[0]))
            medians = {name: statistics.median(values) for name, values in phases.items()}
            rows.append([attention, f"{vocab_name} ({len(vocabularies[vocab_name]) if vocab_name == 'seen' else 'all'})",
                         *[f"{value:.2f}" for value in medians.values()], f"{sum(medians.values()):.2f}",
                         f"{statistics.median(scored):.0f}"])
            print(rows[-1], flush=True)
    print(markdown_table(rows, ["attention", "train vocab", *phases, "step s", "scored tok/s"]))


if __name__ == "__main__":
    main()
