"""The tiny world's default call with and without follow-up probes (WidthPolicy.follow_up_width), beside stock
`generate`, in one process: each variant has its own drafter object (so its own carried estimates), the variants
interleaved, 3 repeats, the speed over stock's as the median per category; tau from the first repeat.

    python docs/benchmarks/follow_up_probes/timed_ab.py classic code,math,prose float32
    python docs/benchmarks/follow_up_probes/timed_ab.py whiflash code,math,prose bfloat16

With MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 for an AVX2-only CPU's fp32.
``--turn`` adds a variant whose RoutedWidthPolicy gives no drafter the next round for its follow-up (commit 3415242
did; run this file copied into a checkout of it: later code gives none, and there the variant equals the default).
``--copy`` compares instead the default call ("current") with one whose rounds with a copy at hand go to the copy only
where the copy would draft ("copy-drafts": CopyingWidthPolicy._copy_leads also asks that the copy's best width is no
plain step; not kept).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import hf_specgen  # noqa: E402
from hf_specgen.bench.prompt_sets import chat_ids, load_prompt_set  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

DRAFTERS = {"eagle3": "specgen-tiny-eagle3", "dflash": "specgen-tiny-dflash-b16", "whiflash": "specgen-tiny-whiflash"}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("mode", choices=("classic", *DRAFTERS))
parser.add_argument("categories", help="comma-separated tiny-world categories, in the order run")
parser.add_argument("dtype", choices=("float32", "bfloat16"))
parser.add_argument("--turn", action="store_true")
parser.add_argument("--copy", action="store_true")
args = parser.parse_args()
torch.set_num_threads(1)
dtype, models = getattr(torch, args.dtype), ROOT / "hub_models"
tokenizer = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype)
hf_specgen.enable(target)


def load_drafter():
    if args.mode == "classic":
        return AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=dtype)
    return hf_specgen.load_drafter(str(models / DRAFTERS[args.mode]), dtype=dtype)


variants = (["current", "copy-drafts"] if args.copy
            else ["follow-up", *(["no-turn"] if args.turn else []), "without"])
drafters = {name: load_drafter() for name in variants}
follow_up_width, drafter_for = width_policy.WidthPolicy.follow_up_width, width_policy.RoutedWidthPolicy._drafter_for
copy_leads = width_policy.CopyingWidthPolicy._copy_leads


def copy_drafts(self):  # the copy leads only where its best width drafts
    drafter_rate = self.drafter.best_rate()
    if drafter_rate is None:
        return True
    best = self.copy.best_rate()
    return best >= drafter_rate and best > self.copy.rate(1)


def no_turn(self, vote, context):  # no follow-up while the router's policy picks the round's drafter
    width_policy.WidthPolicy.follow_up_width = lambda policy: None
    try:
        return drafter_for(self, vote, context)
    finally:
        width_policy.WidthPolicy.follow_up_width = follow_up_width


categories = args.categories.split(",")
prompts = [(category, chat_ids(tokenizer, p["prompt"])) for category in categories
           for p in [p for p in load_prompt_set("tinyworld") if p["category"] == category][:10]]
totals = {}  # (variant, category) -> per repeat [tokens, seconds, rounds]
for repeat in range(3):
    for name in ["stock", *variants]:
        width_policy.WidthPolicy.follow_up_width = follow_up_width if name != "without" else lambda policy: None
        width_policy.RoutedWidthPolicy._drafter_for = no_turn if name == "no-turn" else drafter_for
        width_policy.CopyingWidthPolicy._copy_leads = copy_drafts if name == "copy-drafts" else copy_leads
        for category, ids in prompts:
            start = time.perf_counter()
            if name == "stock":
                out = target.generate(ids, do_sample=False, max_new_tokens=192)
                tokens = rounds = out.shape[1] - ids.shape[1]
            else:
                out = target.generate(ids, assistant_model=drafters[name], speculative_mode=args.mode,
                                      max_new_tokens=192, return_dict_in_generate=True)
                tokens = out.sequences.shape[1] - ids.shape[1]
                rounds = len(out.speculative_stats.acceptance_lengths)
            total = totals.setdefault((name, category), [[0, 0.0, 0] for _ in range(3)])[repeat]
            total[0] += tokens
            total[1] += time.perf_counter() - start
            total[2] += rounds


def speed(name, category):
    return statistics.median(tokens / seconds for tokens, seconds, _ in totals[name, category])


for category in categories:
    print(category, " ".join(f"{name}: {speed(name, category) / speed('stock', category):.3f}x tau "
                             f"{totals[name, category][0][0] / totals[name, category][0][2]:.2f}"
                             for name in variants))
