"""The tiny world's default call with and without follow-up probes (WidthPolicy.follow_up_width), beside stock
`generate`, in one process: each variant has its own drafter object (so its own carried estimates), the three
interleaved, 3 repeats, the median per category; tau from the first repeat.

    python docs/benchmarks/follow_up_probes/timed_ab.py classic code,math,prose float32
    python docs/benchmarks/follow_up_probes/timed_ab.py whiflash code,math,prose bfloat16

With MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 for an AVX2-only CPU's fp32.
"""
import statistics
import sys
import time

import torch
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
from hf_specgen.engine import width_policy as wp
from hf_specgen.bench.prompt_sets import load_prompt_set, chat_ids
torch.set_num_threads(1)
mode, cats, dtype = sys.argv[1], sys.argv[2].split(","), getattr(torch, sys.argv[3])
H = str(ROOT / "hub_models") + "/"
tok = AutoTokenizer.from_pretrained(H + "specgen-tiny")
target = AutoModelForCausalLM.from_pretrained(H + "specgen-tiny", dtype=dtype)
hf_specgen.enable(target)
def load():
    return (AutoModelForCausalLM.from_pretrained(H + "specgen-tiny-draft", dtype=dtype) if mode == "classic"
         else hf_specgen.load_drafter(H + {"eagle3": "specgen-tiny-eagle3", "dflash": "specgen-tiny-dflash-b16", "whiflash": "specgen-tiny-whiflash"}[mode], dtype=dtype))
drafters = {"follow-up": load(), "without": load()}
real = wp.WidthPolicy.follow_up_width
prompts = [(c, chat_ids(tok, p["prompt"])) for c in cats for p in [p for p in load_prompt_set("tinyworld") if p["category"] == c][:10]]
times = {}; taus = {}
for rep in range(3):
    for name in ("stock", "follow-up", "without"):
        wp.WidthPolicy.follow_up_width = real if name != "without" else (lambda self: None)
        for c, ids in prompts:
            t = time.perf_counter()
            if name == "stock":
                out = target.generate(ids, do_sample=False, max_new_tokens=192); n = out.shape[1] - ids.shape[1]; r = n
            else:
                out = target.generate(ids, assistant_model=drafters[name], speculative_mode=mode, max_new_tokens=192, return_dict_in_generate=True)
                n = out.sequences.shape[1] - ids.shape[1]; r = len(out.speculative_stats.acceptance_lengths)
            d = times.setdefault((name, c), [[0, 0.0, 0] for _ in range(3)])[rep]
            d[0] += n; d[1] += time.perf_counter() - t; d[2] += r
for c in cats:
    base = statistics.median(n / s for n, s, _ in times[("stock", c)])
    print(c, " ".join(f"{name}: {statistics.median(n / s for n, s, _ in times[(name, c)]) / base:.3f}x tau {times[(name, c)][0][0] / times[(name, c)][0][2]:.2f}" for name in ("follow-up", "without")))
