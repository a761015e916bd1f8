"""A default call with and without stopping drafting when unsure, beside stock `generate`, one prompt of each named
category (the benchmark's seeded pick), 96 new tokens: each call once to warm up, then REPEATS passes in turns
(`time_in_turns`); stock's median time over each call's. Two copies of the drafter, so that each variant carries its
own acceptance estimate from call to call.

MODE: eagle3 (default) or whiflash on the real target (its shipped drafters), or classic on the tiny world (its
draft LM and prompts); DTYPE: fp32 (default) or auto (bf16 on a CPU with bf16 units).

    python docs/benchmarks/unsure_stop_avx2/unsure_ab.py THREADS REPEATS CATEGORIES SEED [MODE] [DTYPE]
"""
import statistics, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
import hf_specgen.mixin
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.targets import resolve_target
torch.set_num_threads(int(sys.argv[1])); repeats = int(sys.argv[2]); cats = sys.argv[3].split(",")
mode = sys.argv[5] if len(sys.argv) > 5 else "eagle3"
dtype = hf_specgen.auto_dtype() if len(sys.argv) > 6 and sys.argv[6] == "auto" else torch.float32
tiny = mode == "classic"
path = "hub_models/specgen-tiny" if tiny else resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
folder = {"eagle3": "hub_models/smollm2-135m-instruct-eagle3", "whiflash": "hub_models/smollm2-135m-instruct-whiflash",
          "classic": "hub_models/specgen-tiny-draft"}[mode]
load = ((lambda: AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()) if tiny
        else (lambda: hf_specgen.load_drafter(folder, dtype=dtype).eval()))
unsure, whole = load(), load()  # two drafters: each keeps its own carried acceptance
n = 96
common = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, return_dict_in_generate=True)
rule = hf_specgen.mixin.stops_when_unsure  # the mixin asks it when it builds the call's proposer
def call(ids, drafter, stops):
    def run():
        hf_specgen.mixin.stops_when_unsure = rule if stops else (lambda target, spec: False)
        try:
            return target.generate(ids, speculative_mode=mode, assistant_model=drafter, **common)
        finally:
            hf_specgen.mixin.stops_when_unsure = rule
    return run
print(f"{mode}, {dtype}, {torch.get_num_threads()} threads")
prompts = pick_prompts(["tinyworld"] if tiny else ["specbench", "humaneval"], 1, seed=int(sys.argv[4]))
for r in [r for r in prompts if r["category"] in cats]:
    ids = chat_ids(tok, r["prompt"])
    calls = {"stock": lambda: target.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False),
             f"{mode} before": call(ids, whole, False), f"{mode} unsure stop": call(ids, unsure, True)}
    secs, outs = time_in_turns(calls, repeats)
    med = {k: statistics.median(v) for k, v in secs.items()}
    ours = (f"{mode} before", f"{mode} unsure stop")
    same = all(torch.equal(outs["stock"], outs[k].sequences) for k in ours)
    print(r["category"], {k: f"{med['stock']/v:.3f}x" for k, v in med.items()}, "same as stock:", same,
          {k: round(outs[k].speculative_stats.mean_acceptance_length, 2) for k in ours}, flush=True)
