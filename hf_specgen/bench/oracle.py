"""WhiFlash's per-step oracle, measured: at every round, the drafter that accepts more from that very position.

At temperature 0 every lossless method emits the autoregressive output, and a drafter's proposal at a position
depends only on the committed text (lazy catch-up proposes exactly what eager updating does), so for each prompt
we can compute beforehand, at every position of that output, how many tokens each drafter would get accepted
(``router_targets``: DFlash exactly; EAGLE-3 as a chain, or with top-k as a tree's upper bound). The oracle router
then picks, every round, the drafter with the better accepted tokens per second of round time (round times from
the single-drafter runs), and the decode with that routing is timed like any method: a hindsight upper reference
for a router, not a usable method.
"""

from __future__ import annotations

import copy

import torch

from ..drafters.whiflash import AR, PARALLEL
from ..training.router_trainer import router_targets


class StepOracle:
    """A WhiFlash router reading precomputed per-position accepted lengths: call ``use(i)`` before prompt i."""

    def __init__(self, tables: list[dict[int, tuple[float, float]]], eagle_round_s: float, dflash_round_s: float):
        self.tables, self.eagle_round_s, self.dflash_round_s = tables, eagle_round_s, dflash_round_s
        self.table: dict[int, tuple[float, float]] = tables[0] if tables else {}

    def use(self, index: int) -> None:
        self.table = self.tables[index]

    def __call__(self, signal: dict) -> str:
        lengths = self.table.get(int(signal["position"]))
        if lengths is None:  # near the end of the output (the drafters' horizon does not fit): DFlash's block
            return PARALLEL
        al_eagle, al_dflash = lengths
        return AR if al_eagle / self.eagle_round_s > al_dflash / self.dflash_round_s else PARALLEL


@torch.no_grad()
def accepted_length_tables(target, bundle, prompts: list[torch.Tensor], outputs: list[list[int]],
                           eagle_top_k: int, eagle_depth: int, pad_id: int) -> list[dict[int, tuple[float, float]]]:
    """Per prompt: {position of the last committed token: (AL EAGLE-3, AL DFlash)} along the autoregressive output."""
    tables = []
    for prompt, output in zip(prompts, outputs):
        ids = prompt[0].tolist() + list(output)
        _, al_eagle, al_dflash, anchors = router_targets(target, bundle.ar, bundle.parallel, (ids, prompt.shape[1]),
                                                         eagle_depth, eagle_top_k, pad_id)
        tables.append({int(a): (float(e), float(d)) for a, e, d in zip(anchors, al_eagle, al_dflash)})
    return tables


def seconds_per_round(result) -> float:
    """Mean decode seconds per verify round of a single-drafter run (all prompts)."""
    return sum(result.decode_seconds) / max(sum(len(a) for a in result.acceptance), 1)


def step_oracle_method(bundle, whiflash_kwargs: dict, tables, eagle_result, dflash_result):
    """(name, generate kwargs, before_prompt) of the measured per-step oracle."""
    router = StepOracle(tables, seconds_per_round(eagle_result), seconds_per_round(dflash_result))
    variant = copy.copy(bundle)  # shares the drafters
    variant.router, variant.lazy = router, True
    return "whiflash oracle per step (hindsight)", {**whiflash_kwargs, "assistant_model": variant}, router.use
