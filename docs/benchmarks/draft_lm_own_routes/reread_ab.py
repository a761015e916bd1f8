"""reread_ab.py DTYPE classic REPEATS: the bench order (code, math, prose, 10 prompts each, per pass), the draft LM re-reading the copies a drafted round kept in place of its drafts (commit_accepted(..., copied=True); commit_copied when this ran) against not (a stale draft cache), each its own drafter; wall time over stock generate, medians of REPEATS:

    python docs/benchmarks/draft_lm_own_routes/reread_ab.py bfloat16 classic 5
"""
import json, statistics, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import hf_specgen
from hf_specgen.bench.prompt_sets import load_prompt_set
torch.set_num_threads(1)
dtype, mode, repeats = getattr(torch, sys.argv[1]), sys.argv[2], int(sys.argv[3])
kw = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype); hf_specgen.enable(target)
from hf_specgen.drafters import draft_lm as dl
own = dl.DraftModelProposer.commit_accepted
drafters = {n: AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=dtype) for n in ("reread", "stale")}
cats = ("code", "math", "prose")
ids = {c: [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"] for p in load_prompt_set("tinyworld") if p["category"] == c][:10] for c in cats}
names = ("stock", "plain", "reread", "stale")
times = {(n, c): [] for n in names for c in cats}
for r in range(repeats + 1):
    for n in names:
        dl.DraftModelProposer.commit_accepted = own if n == "reread" else (lambda self, accepted, copied=False: own(self, accepted))
        for c in cats:
            t = 0.0
            for x in ids[c]:
                t0 = time.perf_counter()
                if n == "stock": target.generate(x, do_sample=False, max_new_tokens=96)
                elif n == "plain": target.generate(x, speculative_mode="autoregressive", max_new_tokens=96)
                else: target.generate(x, assistant_model=drafters[n], speculative_mode=mode, max_new_tokens=96, **kw)
                t += time.perf_counter() - t0
            if r: times[(n, c)].append(t)
tot = {n: sum(statistics.median(times[(n, c)]) for c in cats) for n in names}
for c in cats:
    s = statistics.median(times[("stock", c)])
    print(c, " ".join(f"{n} {s / statistics.median(times[(n, c)]):.3f}x" for n in names[1:]), flush=True)
print("all", " ".join(f"{n} {tot['stock'] / tot[n]:.3f}x" for n in names[1:]))
