"""Where DFlash's default call at batch 4 spends its rounds on the real target in fp32 (2 threads): 4 prompts of
HumanEval and of MT-Bench in one left-padded batch, the engine's plain steps and DFlash's default call in turns, 3
passes; prints each call's seconds and how many rounds verified each width (1: a plain step), then the target's
measured cost tables (verify ms by width, drafting ms).

    python docs/benchmarks/narrow_rows/batch4_rounds.py
"""
import collections
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.engine.width_policy import costs_of
from hf_specgen.targets import resolve_target

torch.set_num_threads(2)
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path, padding_side="left")
t = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
d = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=torch.float32)
recs = pick_prompts(["humaneval", "specbench"], 4)
for cat in ("humaneval", "mt_bench"):
    group = [r for r in recs if r["category"] == cat][:4]
    inputs = tok.apply_chat_template([[{"role": "user", "content": r["prompt"]}] for r in group],
                                     add_generation_prompt=True, padding=True, return_tensors="pt", return_dict=True)
    for rep in range(3):
        for mode in ("autoregressive", "dflash"):
            extra = {"assistant_model": d} if mode == "dflash" else {}
            s = time.perf_counter()
            out = t.generate(**inputs, max_new_tokens=96, do_sample=False, speculative_mode=mode,
                             return_dict_in_generate=True, **extra)
            el = time.perf_counter() - s
            st = out.speculative_stats
            w = collections.Counter(st.round_widths) if st is not None and st.round_widths else None
            print(cat, rep, mode, f"{el:.2f}s", dict(sorted(w.items())) if w else "", flush=True)
tab = costs_of(t).tables
for k, v in tab.items():
    print(k, {w: round(s * 1000, 1) for w, s in sorted(v.verify.items())}, "draft",
          v.draft and round(v.draft * 1000, 1))
