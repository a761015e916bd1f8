"""Stock `generate`, the engine's plain steps and the default DFlash / EAGLE-3 calls on one batch of the batch
benchmark's prompts (HumanEval, GSM8K, MT-Bench, QA; `specgen bench --batch-sizes`'s set), in turns, medians of 3,
with each default call's round widths, batch sizes and per-row acceptance (docs/width-policy.md, "The prefill
attended the first block's slots"). bf16, one thread; add --prof for cProfile of the plain and DFlash calls.

    python scripts/batch_prompts_ratio.py BATCH NEW_TOKENS FIRST_PROMPT [--prof]   # e.g. 8 48 8
"""
import sys, time, statistics, cProfile, pstats, io
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import hf_specgen
from hf_specgen.targets import resolve_target
from hf_specgen.bench.prompt_sets import pick_prompts
torch.set_num_threads(1)
B = int(sys.argv[1]); N = int(sys.argv[2]) if len(sys.argv) > 2 else 48
path = resolve_target("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path, padding_side="left")
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval())
dfl = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=torch.bfloat16)
eag = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-eagle3", dtype=torch.bfloat16)
recs = pick_prompts(["humaneval", "specbench"], 4)
recs = [r for r in recs if r.get("category") in ("humaneval", "math_reasoning", "mt_bench", "qa")][:16]
OFF = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3].isdigit() else 0
prompts = [r["prompt"] for r in recs][OFF:OFF + B]
chats = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in prompts]
inputs = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
print("shape", inputs["input_ids"].shape)
common = dict(max_new_tokens=N, do_sample=False, pad_token_id=tok.pad_token_id)
calls = {
 "stock": lambda: target.generate(**inputs, **common),
 "ar": lambda: target.generate(**inputs, **common, speculative_mode="autoregressive"),
 "dflash": lambda: target.generate(**inputs, **common, assistant_model=dfl, speculative_mode="dflash", return_dict_in_generate=True),
 "eagle3": lambda: target.generate(**inputs, **common, assistant_model=eag, speculative_mode="eagle3", return_dict_in_generate=True),
}
for c in calls.values(): c()
sec = {k: [] for k in calls}
outs = {}
for _ in range(3):
    for k, c in calls.items():
        t = time.perf_counter(); o = c(); sec[k].append(time.perf_counter() - t); outs[k] = o
s = statistics.median(sec["stock"])
for k, v in sec.items():
    print(k, f"{statistics.median(v):.3f}s", f"{s/statistics.median(v):.3f}x", [round(x,3) for x in v])
for k in ("dflash", "eagle3"):
    st = outs[k].speculative_stats; print(k, "widths", st.round_widths); print(k, "batch", st.round_batch_sizes); print(k, "rowacc", getattr(st, "row_acceptance_lengths", None))
if "--prof" in sys.argv:
    for k in ("ar", "dflash"):
        pr = cProfile.Profile(); pr.enable(); calls[k](); pr.disable()
        st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(25); print(k); print(st.getvalue()[:6000])
