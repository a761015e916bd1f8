"""estimate_ab.py DTYPE REPEATS VARIANT [MAX_NEW_TOKENS]: tried, not kept (2026-11-30): two changes to how DFlash's default call rates
the slots past its evidence, patched here (the engine is unchanged), against the engine as it is ("now") and the
fixed block of 16, on the tiny world in the bench's order (code, math, prose, 10 prompts each, per pass), each with
its own drafter, in one process; speed over stock generate (wall time with the prefill), medians of REPEATS passes
after one warm-up, and tau. VARIANT:

  mean     a slot's prior is the mean rate of the slots before it, not the rate of the slot just before: one
           unlucky round at the last verified slot no longer caps every slot past it
  capped   after two rounds in a row that kept every draft they verified, the next round verifies the next width
           up (within reach): a round that keeps its whole width says nothing of the slots past it

    python docs/benchmarks/dflash_confident/estimate_ab.py bfloat16 3 mean
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from hf_specgen.engine import width_policy as wp  # noqa: E402
from tiny_ab import run_in_bench_order, tiny_world_prompts  # noqa: E402

torch.set_num_threads(1)
dtype, repeats, tried = getattr(torch, sys.argv[1]), int(sys.argv[2]), sys.argv[3]
max_new = int(sys.argv[4]) if len(sys.argv) > 4 else 192
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype))
rates, observe, choose = wp.AcceptanceEstimate.rates, wp.WidthPolicy.observe, wp.WidthPolicy.choose


def mean_rates(self, width):
    if self.pooled is not None:
        return rates(self, width)
    found, prior = [], wp.PRIOR_ACCEPT
    for k in range(1, width):
        found.append((self.accepted[k] + prior * wp.PRIOR_WEIGHT) / (self.reached[k] + wp.PRIOR_WEIGHT))
        prior = sum(found) / len(found)
    return found


def capped_observe(self, width, accepted, seconds=None, within=None, rows=None):
    observe(self, width, accepted, seconds, within, rows)
    if width > 1 and self.rows is None:
        kept_all = all(a >= min(width, rows or width) - 1 for a in accepted)
        self.capped_run = getattr(self, "capped_run", 0) + 1 if kept_all else 0


def capped_choose(self, copying=False):
    width = choose(self, copying)
    if width > 1 and getattr(self, "capped_run", 0) >= 2 and not self.probing and self.rows is None:
        wider = [w for w in self.widths if width < w <= self.acceptance.reach()]
        if wider:
            self.capped_run = 0
            return wider[0]
    return width


def use(name):
    wp.AcceptanceEstimate.rates = mean_rates if name == "mean" else rates
    wp.WidthPolicy.observe = capped_observe if name == "capped" else observe
    wp.WidthPolicy.choose = capped_choose if name == "capped" else choose


variants = ("now", tried, "b16")
drafters = {name: hf_specgen.load_drafter(models / "specgen-tiny-dflash-b16", dtype=dtype) for name in variants}


def decode(name, ids):
    return target.generate(ids, assistant_model=drafters[name], speculative_mode="dflash", max_new_tokens=max_new,
                           return_dict_in_generate=True, **({"block_size": 16} if name == "b16" else {}))


run_in_bench_order(target, tiny_world_prompts(tok), variants, decode, use, repeats, max_new)
