"""ab_real.py DTYPE PASSES: the real target (SmolLM2-135M-Instruct), one prompt of each of the README bench's
categories (its order), 96 new tokens: EAGLE-3's default call alone, WhiFlash's as the engine runs it ("now") and
WhiFlash's with this folder's patch ("delivered", patch.py), each with its own bundle, in one process, the variants'
order turned each pass. Per category and over all: wall time per token with the prefill, medians of PASSES passes
after one warm-up, as a speed over EAGLE-3 alone, and tau.

    python docs/benchmarks/whiflash_delivered/ab_real.py bfloat16 3
"""
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_specgen  # noqa: E402
import patch  # noqa: E402
from hf_specgen.bench.prompt_sets import pick_prompts  # noqa: E402
from hf_specgen.targets import resolve_target  # noqa: E402

torch.set_num_threads(1)
dtype, passes = getattr(torch, sys.argv[1]), int(sys.argv[2])
CATEGORIES = ("humaneval", "math_reasoning", "mt_bench", "translation", "summarization", "qa", "rag")
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
models = ROOT / "hub_models"
variants = {"eagle3": ("eagle3", hf_specgen.load_drafter(models / "smollm2-135m-instruct-eagle3", dtype=dtype)),
            "now": ("whiflash", hf_specgen.load_drafter(models / "smollm2-135m-instruct-whiflash", dtype=dtype)),
            "delivered": ("whiflash", hf_specgen.load_drafter(models / "smollm2-135m-instruct-whiflash", dtype=dtype))}
records = {r["category"]: r for r in pick_prompts(["humaneval", "specbench"], 1) if r.get("category") in CATEGORIES}
prompts = {c: tok.apply_chat_template([{"role": "user", "content": records[c]["prompt"]}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True) for c in CATEGORIES}
per_token = {(n, c): [] for n in variants for c in CATEGORIES}
taus = {(n, c): [] for n in variants for c in CATEGORIES}
names = list(variants)
for p in range(passes + 1):
    order = names[p % len(names):] + names[:p % len(names)]
    for n in order:
        mode, drafter = variants[n]
        patch.enable(n == "delivered")
        for c in CATEGORIES:
            start = time.perf_counter()
            out = target.generate(**prompts[c], max_new_tokens=96, do_sample=False, return_dict_in_generate=True,
                                  assistant_model=drafter, speculative_mode=mode)
            seconds = time.perf_counter() - start
            if p:
                per_token[(n, c)].append(seconds / out.speculative_stats.new_tokens)
                taus[(n, c)].append(out.speculative_stats.mean_acceptance_length)
patch.enable(False)
for c in CATEGORIES:
    base = statistics.median(per_token[("eagle3", c)])
    print(f"{c:15s}", "  ".join(f"{n} {base / statistics.median(per_token[(n, c)]):.3f} "
                                 f"({statistics.median(taus[(n, c)]):.2f})" for n in variants), flush=True)
total = {n: sum(statistics.median(per_token[(n, c)]) for c in CATEGORIES) for n in variants}
print("all", "  ".join(f"{n} {total['eagle3'] / total[n]:.3f}" for n in variants))
