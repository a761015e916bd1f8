"""texts.py CATEGORIES [DTYPE]: for one prompt of each category (comma-separated; the README bench's first), how far
each call's text agrees with stock greedy generate's: EAGLE-3's and WhiFlash's default calls, three calls each (the
policy carries what each call learned into the next), 96 new tokens, one thread.

    python docs/benchmarks/whiflash_delivered/texts.py qa,translation,humaneval bfloat16
"""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

torch.set_num_threads(1)
categories = sys.argv[1].split(",")
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "bfloat16")
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
drafters = {mode: hf_specgen.load_drafter(f"hub_models/smollm2-135m-instruct-{mode}", dtype=dtype)
            for mode in ("eagle3", "whiflash")}
records = {r["category"]: r for r in pick_prompts(["humaneval", "specbench"], 1) if r.get("category") in categories}
for category in categories:
    inputs = tok.apply_chat_template([{"role": "user", "content": records[category]["prompt"]}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    width = inputs["input_ids"].shape[1]
    stock = target.generate(**inputs, max_new_tokens=96, do_sample=False)[0, width:].tolist()
    for mode, drafter in drafters.items():
        for call in range(3):
            text = target.generate(**inputs, max_new_tokens=96, do_sample=False, assistant_model=drafter,
                                   speculative_mode=mode)[0, width:].tolist()
            agree = next((i for i, (a, b) in enumerate(zip(text, stock)) if a != b), min(len(text), len(stock)))
            print(f"{category} {mode} call {call + 1}: {len(text)} tokens, the first {agree} as stock's "
                  f"({len(stock)} tokens)", flush=True)
