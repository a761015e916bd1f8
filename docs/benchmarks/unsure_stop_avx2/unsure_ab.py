"""EAGLE-3's default call on the real target with and without stopping drafting when unsure, beside stock
`generate`, fp32, one prompt of each named category (the benchmark's seeded pick), 96 new tokens: each call once to
warm up, then REPEATS passes in turns (`time_in_turns`); stock's median time over each call's. Two copies of the
drafter, so that each variant carries its own acceptance estimate from call to call.

    python docs/benchmarks/unsure_stop_avx2/unsure_ab.py THREADS REPEATS CATEGORIES SEED
"""
import statistics, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.drafters.eagle3 import Eagle3ChainProposer
from hf_specgen.targets import resolve_target
torch.set_num_threads(int(sys.argv[1])); repeats = int(sys.argv[2]); cats = sys.argv[3].split(",")
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
load = lambda: hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-eagle3", dtype=torch.float32).eval()
unsure, whole = load(), load()  # two drafters: each keeps its own carried acceptance
n = 96
common = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, return_dict_in_generate=True)
def call(ids, drafter, stops):
    def run():
        Eagle3ChainProposer.stops_when_unsure = stops
        try:
            return target.generate(ids, speculative_mode="eagle3", assistant_model=drafter, **common)
        finally:
            Eagle3ChainProposer.stops_when_unsure = True
    return run
for r in [r for r in pick_prompts(["specbench", "humaneval"], 1, seed=int(sys.argv[4])) if r["category"] in cats]:
    ids = chat_ids(tok, r["prompt"])
    calls = {"stock": lambda: target.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False),
             "eagle3 before": call(ids, whole, False), "eagle3 unsure stop": call(ids, unsure, True)}
    secs, outs = time_in_turns(calls, repeats)
    med = {k: statistics.median(v) for k, v in secs.items()}
    same = all(torch.equal(outs["stock"], outs[k].sequences) for k in ("eagle3 before", "eagle3 unsure stop"))
    print(r["category"], {k: f"{med['stock']/v:.3f}x" for k, v in med.items()}, "same as stock:", same,
          {k: round(outs[k].speculative_stats.mean_acceptance_length, 2) for k in ("eagle3 before", "eagle3 unsure stop")},
          flush=True)
