"""WhiFlash's default call against its own drafters' default calls (EAGLE-3, DFlash) and stock `generate`, one
prompt of each chosen category, in turns, medians of 3, with each call's rounds, tau, copy rounds and drafters
(docs/real-target.md). One thread.

    python scripts/whiflash_vs_drafters.py float32 humaneval,qa,rag,summarization 96
"""
import sys, time, statistics, collections
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
from hf_specgen.targets import resolve_target
from hf_specgen.bench.prompt_sets import pick_prompts
torch.set_num_threads(1)
dtype = getattr(torch, sys.argv[1]); cats = sys.argv[2].split(","); N = int(sys.argv[3])
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
eag = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-eagle3", dtype=dtype)
whi = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-whiflash", dtype=dtype)
dfl = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=dtype)
recs = [r for r in pick_prompts(["humaneval", "specbench"], 1) if r.get("category") in cats]
for r in recs:
    ids = tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    common = dict(**ids, max_new_tokens=N, do_sample=False)
    calls = {"stock": lambda: target.generate(**common, return_dict_in_generate=True),
             "eagle3": lambda: target.generate(**common, assistant_model=eag, speculative_mode="eagle3", return_dict_in_generate=True),
             "dflash": lambda: target.generate(**common, assistant_model=dfl, speculative_mode="dflash", return_dict_in_generate=True),
             "whiflash": lambda: target.generate(**common, assistant_model=whi, speculative_mode="whiflash", return_dict_in_generate=True)}
    for c in calls.values(): c()
    sec = {k: [] for k in calls}; outs = {}
    for _ in range(3):
        for k, c in calls.items():
            t = time.perf_counter(); outs[k] = c(); sec[k].append(time.perf_counter() - t)
    s = statistics.median(sec["stock"])
    print("==", r["category"], "prompt tokens", ids["input_ids"].shape[1])
    for k in calls:
        o = outs[k]; st = getattr(o, "speculative_stats", None)
        line = f"{k:9s} {statistics.median(sec[k]):.3f}s {s/statistics.median(sec[k]):.2f}x new={o.sequences.shape[1]-ids['input_ids'].shape[1]}"
        if st is not None:
            line += f" rounds={st.num_rounds} tau={st.mean_acceptance_length:.2f} lookup={st.lookup_drafts} draft_s={sum(st.round_draft_seconds):.3f} round_s={sum(st.round_seconds):.3f} prefill={st.prefill_time:.3f}"
            line += f" widths={collections.Counter(st.round_widths).most_common()}"
            if st.drafter_per_round: line += f" drafters={collections.Counter(st.drafter_per_round).most_common()}"
        print(line)
