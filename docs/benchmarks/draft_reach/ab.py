"""ab.py DTYPE MODE REPEATS [MAX_NEW_TOKENS]: the default call of a token-by-token drafter (classic, eagle3) on the
tiny world in the bench's order (code, math, prose, 10 prompts each, per pass), each variant with its own drafter,
in one process; speed over stock generate (wall time with the prefill), medians of REPEATS passes after one warm-up:

  now        every width up to the block, drafting on to the estimate's reach until unsure whatever the chosen
             width, the draft LM's one-row first step
  twice      now, but drafting up to twice the chosen width (within reach): tried, not kept
  two rows   now, but the draft LM's first step always feeds two rows (as before 2026-11-30; classic only)
  buckets    widths 1, 2, 4, 8, drafting up to the chosen width, two rows (as before 2026-11-30)

    python docs/benchmarks/draft_reach/ab.py bfloat16 classic 4
"""
import statistics, sys, time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import hf_specgen  # noqa: E402
from hf_specgen.bench.prompt_sets import load_prompt_set  # noqa: E402
from hf_specgen.drafters.draft_lm import DraftModelProposer  # noqa: E402
from hf_specgen.engine import loop as engine_loop  # noqa: E402
from hf_specgen.engine.width_policy import WidthPolicy, width_buckets  # noqa: E402

torch.set_num_threads(1)
dtype, mode, repeats = getattr(torch, sys.argv[1]), sys.argv[2], int(sys.argv[3])
max_new = int(sys.argv[4]) if len(sys.argv) > 4 else 192
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype))


def drafter():
    if mode == "classic":
        return AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=dtype)
    return hf_specgen.load_drafter(models / "specgen-tiny-eagle3", dtype=dtype)


accepted, reach = DraftModelProposer.commit_accepted, WidthPolicy.unsure_drafting_width


def twice(self, chosen):
    return min(reach(self, chosen), max(w for w in self.widths if w <= 2 * chosen))


def two_rows(self, kept, copied=False):
    accepted(self, kept, copied)
    self.reads_newest_only = False


def variant(name):
    DraftModelProposer.commit_accepted = accepted if name == "now" else two_rows
    WidthPolicy.unsure_drafting_width = {"buckets": lambda self, chosen: chosen, "twice": twice}.get(name, reach)
    engine_loop.width_buckets = ((lambda width, compiled, every_width=False: width_buckets(width, compiled))
                                 if name == "buckets" else width_buckets)


variants = ("now", "twice", "two rows", "buckets") if mode == "classic" else ("now", "twice", "buckets")
drafters = {name: drafter() for name in variants}
cats = ("code", "math", "prose")
ids = {c: [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], add_generation_prompt=True,
                                   return_tensors="pt", return_dict=True)["input_ids"]
           for p in load_prompt_set("tinyworld") if p["category"] == c][:10] for c in cats}
names = ("stock", *variants)
times = {(n, c): [] for n in names for c in cats}
for r in range(repeats + 1):
    for n in names:
        if n != "stock":
            variant(n)
        for c in cats:
            start = time.perf_counter()
            for x in ids[c]:
                if n == "stock":
                    target.generate(x, do_sample=False, max_new_tokens=max_new)
                else:
                    target.generate(x, assistant_model=drafters[n], speculative_mode=mode, max_new_tokens=max_new)
            if r:
                times[(n, c)].append(time.perf_counter() - start)
for c in cats:
    s = statistics.median(times[("stock", c)])
    print(c, "  ".join(f"{n} {s / statistics.median(times[(n, c)]):.3f}x" for n in names[1:]), flush=True)
total = {n: sum(statistics.median(times[(n, c)]) for c in cats) for n in names}
print("all", "  ".join(f"{n} {total['stock'] / total[n]:.3f}x" for n in names[1:]))
