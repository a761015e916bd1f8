"""DFlash's default call on the tiny world with the prior of the slots past the first worth one round (as before
2026-12-02) and two (SLOT_PRIOR_WEIGHT, now), beside its fixed block of 16, in one process in the bench's order
(``tiny_ab.run_in_bench_order``: a warm-up pass, then medians of 3 passes; each variant with a drafter of its own, so
each carries its own estimate from call to call). fp32, one thread.

    python docs/benchmarks/slot_prior/ab.py 2   # runs
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_ab import MODELS, run_in_bench_order, tiny_world  # noqa: E402

import hf_specgen  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

VARIANTS = ("one round", "two rounds", "fixed 16")


def main(runs: int) -> None:
    target, prompts = tiny_world(torch.float32, bench_order=True)
    drafters = {name: hf_specgen.load_drafter(MODELS / "specgen-tiny-dflash-b16", dtype=torch.float32)
                for name in VARIANTS}

    def use(name):
        width_policy.SLOT_PRIOR_WEIGHT = 1.0 if name == "one round" else 2.0

    def decode(name, ids):
        return target.generate(ids, assistant_model=drafters[name], speculative_mode="dflash", max_new_tokens=192,
                               return_dict_in_generate=True, **({"block_size": 16} if name == "fixed 16" else {}))

    for run in range(runs):
        print(f"run {run + 1}", flush=True)
        run_in_bench_order(target, prompts, VARIANTS, decode, use, repeats=3, max_new_tokens=192)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
