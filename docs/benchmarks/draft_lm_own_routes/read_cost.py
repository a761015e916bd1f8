"""A draft LM of SmolLM2-135M's size reading a 200-token prompt: every row's logits against the last row's
(``logits_to_keep=1``), medians of 4, one thread (after `specgen prepare`):

    python docs/benchmarks/draft_lm_own_routes/read_cost.py bfloat16   # or float32
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(Path.home() / ".cache/hf_specgen/targets/smollm2-135m-instruct",
                                             dtype=getattr(torch, sys.argv[1]))
prompt = torch.randint(100, 40000, (1, 200), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    for keep in ({}, {"logits_to_keep": 1}) * 2:
        seconds = []
        for _ in range(4):
            start = time.perf_counter()
            model(prompt, use_cache=False, **keep)
            seconds.append(time.perf_counter() - start)
        print(keep or "every row's logits", f"{statistics.median(seconds) * 1e3:.0f} ms")
