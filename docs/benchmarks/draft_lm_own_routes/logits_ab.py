"""The tiny world's draft LM (classic default call) with its read and steps computing the last row's logits only
against every row's, beside stock generate, in one process (batch 1: 20 prompts one by one; larger: the first 2
batches of the 30 tiny-world prompts; 96 new tokens, medians of REPEATS passes):

    python docs/benchmarks/draft_lm_own_routes/logits_ab.py bfloat16 1,4,16 3
"""
import statistics, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import hf_specgen
from hf_specgen.bench.prompt_sets import load_prompt_set
from hf_specgen.drafters import draft_lm
torch.set_num_threads(1)
dtype, sizes = getattr(torch, sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
repeats = int(sys.argv[3])
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny"); tok.padding_side = "left"
target = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype); hf_specgen.enable(target)
V = ("last-only", "all-rows")
drafters = {n: AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=dtype) for n in V}
FLAG = {"all": False}
init = draft_lm.DraftModelProposer.__init__
def patched(self, *a, **k):
    init(self, *a, **k)
    if FLAG["all"]: self._last_logits_only = {}
draft_lm.DraftModelProposer.__init__ = patched
texts = [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False, add_generation_prompt=True) for p in load_prompt_set("tinyworld")]
for size in sizes:
    batches = [texts[i:i + size] for i in range(0, len(texts) - size + 1, size)][:2] if size > 1 else [[t] for t in texts[:: 9][:20]]
    secs = {n: [] for n in ("stock",) + V}
    for r in range(repeats + 1):
        for n in secs:
            FLAG["all"] = n == "all-rows"
            t0 = time.perf_counter()
            for b in batches:
                enc = tok(b, return_tensors="pt", padding=True, add_special_tokens=False)
                if n == "stock": target.generate(**enc, do_sample=False, max_new_tokens=96)
                else: target.generate(**enc, assistant_model=drafters[n], speculative_mode="classic", max_new_tokens=96)
            if r: secs[n].append(time.perf_counter() - t0)
    s = statistics.median(secs["stock"])
    print(f"batch {size}: " + " ".join(f"{n} {s / statistics.median(v):.3f}x" for n, v in secs.items() if n != "stock"), flush=True)
