"""Stock `generate`, the engine's plain steps and the DFlash / EAGLE-3 default calls on the real target, fp32, the
first prompt of each named category, 96 new tokens: every call once to warm up, then REPEATS passes in turns
(`time_in_turns`); stock's median time over each call's, and the default calls' round widths.

    python docs/benchmarks/main_command_avx2/plain_ab.py THREADS REPEATS mt_bench,humaneval
"""
import statistics, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import chat_ids, pick_prompts
from hf_specgen.targets import resolve_target
torch.set_num_threads(int(sys.argv[1])); repeats = int(sys.argv[2]); cats = sys.argv[3].split(",")
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
dfl = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=torch.float32).eval()
e3 = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-eagle3", dtype=torch.float32).eval()
recs = [r for r in pick_prompts(["specbench", "humaneval"], 1) if r["category"] in cats]
n = 96
common = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False)
for r in recs:
    ids = chat_ids(tok, r["prompt"])
    calls = {"stock": lambda: target.generate(ids, **common),
             "plain": lambda: target.generate(ids, speculative_mode="autoregressive", **common, return_dict_in_generate=True),
             "dflash": lambda: target.generate(ids, speculative_mode="dflash", assistant_model=dfl, **common, return_dict_in_generate=True),
             "eagle3": lambda: target.generate(ids, speculative_mode="eagle3", assistant_model=e3, **common, return_dict_in_generate=True)}
    secs, outs = time_in_turns(calls, repeats)
    med = {k: statistics.median(v) for k, v in secs.items()}
    print(r["category"], ids.shape[1], {k: f"{med['stock']/v:.3f}x" for k, v in med.items()}, f"stock {med['stock']/n*1000:.1f} ms/tok", flush=True)
    print("   spread", {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in secs.items()})
    for k in ("dflash", "eagle3"):
        st = outs[k].speculative_stats
        print("  ", k, "widths", st.round_widths[:60], "tau", round(st.mean_acceptance_length, 2))
