"""torch.compile path (CUDA graphs on GPU): identical tokens, one graph per step, no recompiles.

CPU only here: inductor without CUDA graphs. The CUDA-graph replay itself was not run in this project's CI.
"""

from __future__ import annotations

import random

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from conftest import make_dflash, make_target, random_prompt


def test_compiled_steps_match_eager_without_recompiles():
    torch._dynamo.reset()
    counters.clear()
    target = make_target("qwen3", seed=21)
    drafter = make_dflash(target)
    rng = random.Random(0)
    for call, prompt_len in enumerate((12, 37, 60)):  # one cache bucket: the graphs must be reused
        prompt = random_prompt(rng, prompt_len)
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", speculative_compile=True,
                              max_new_tokens=40, do_sample=False, eos_token_id=None, return_dict_in_generate=True)
        assert out.sequences.tolist() == ref.tolist()
        assert out.speculative_stats.num_rounds > 3  # many rounds with varying acceptance ran through the graphs
        if call == 0:
            graphs = counters["stats"]["unique_graphs"]
            assert graphs == 2, dict(counters["stats"])  # one verify graph, one draft graph
            torch._dynamo.config.error_on_recompile = True
    try:
        assert counters["stats"]["unique_graphs"] == graphs
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()
