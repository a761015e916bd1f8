"""The tiny world, DFlash: stock generate, the default call and fixed blocks of 2, 4, 8 and 16 on a batch of the 8 chat
prompts of scripts/default_call_ratio.py, medians of 5 in one process (the CPU default dtype, one thread), with each
call's tau and per-row new tokens. Run from the repository root:

    python docs/benchmarks/batch_finish_model/tiny_fixed_widths.py BATCH NEW_TOKENS
"""
import sys, statistics, time, torch
import hf_specgen
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_specgen.targets import resolve_target
sys.path.insert(0, "scripts")
from default_call_ratio import PROMPTS
torch.set_num_threads(1)
B, new = int(sys.argv[1]), int(sys.argv[2])
path = resolve_target("hub_models/specgen-tiny"); tok = AutoTokenizer.from_pretrained(path, padding_side="left")
dtype = hf_specgen.auto_dtype()
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
drafter = hf_specgen.load_drafter("hub_models/specgen-tiny-dflash-b16", dtype=dtype)
texts = (PROMPTS * (B // len(PROMPTS) + 1))[:B]
chats = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in texts]
inputs = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
common = dict(**inputs, max_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id, return_dict_in_generate=True)
calls = {"stock": lambda: target.generate(**common), "default": lambda: target.generate(**common, assistant_model=drafter, speculative_mode="dflash")}
for bs in (2, 4, 8, 16):
    calls[f"b{bs}"] = (lambda bs=bs: target.generate(**common, assistant_model=drafter, speculative_mode="dflash", block_size=bs))
for f in calls.values(): f()
times, outs = {k: [] for k in calls}, {}
for r in range(5):
    for k, f in calls.items():
        t = time.perf_counter(); outs[k] = f(); times[k].append(time.perf_counter() - t)
stock = statistics.median(times["stock"])
for k, v in times.items():
    s = getattr(outs[k], "speculative_stats", None)
    print(k, round(statistics.median(v), 3), f"{stock/statistics.median(v):.3f}x", "tau", round(s.mean_acceptance_length, 2) if s else "", "rows new", s.row_new_tokens if s else "")
