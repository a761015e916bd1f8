"""ab.py DTYPE REPEATS: WhiFlash's default call on the tiny world, its EAGLE-3 rounds drafting the chosen width (as
the engine does: RoutedWidthPolicy.unsure_drafting_width) or drafting on to the reach while sure, as a chain alone does
(patched here), the widths the buckets either way. The bench's order (code, math, prose, 10 prompts each, per pass),
each variant with its own bundle, in one process; speed over stock generate (wall time with the prefill), medians of
REPEATS passes after one warm-up, and tau.

    python docs/benchmarks/whiflash_reach/ab.py bfloat16 3
"""
import statistics, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import hf_specgen  # noqa: E402
from hf_specgen.bench.prompt_sets import load_prompt_set  # noqa: E402
from hf_specgen.engine.width_policy import RoutedWidthPolicy  # noqa: E402

torch.set_num_threads(1)
dtype, repeats = getattr(torch, sys.argv[1]), int(sys.argv[2])
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype))
chosen = RoutedWidthPolicy.unsure_drafting_width


def bundle():
    return hf_specgen.load_drafter(models / "specgen-tiny-whiflash", dtype=dtype)


variants = ("now", "reach")
drafters = {n: bundle() for n in variants}
cats = ("code", "math", "prose")
ids = {c: [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"] for p in load_prompt_set("tinyworld") if p["category"] == c][:10] for c in cats}
names = ("stock", *variants)
times = {(n, c): [] for n in names for c in cats}; taus = {(n, c): [] for n in variants for c in cats}
for r in range(repeats + 1):
    for n in names:
        RoutedWidthPolicy.unsure_drafting_width = chosen if n == "now" else (lambda self, w: self.current.unsure_drafting_width(w))
        for c in cats:
            t = time.perf_counter(); tokens = rounds = 0
            for x in ids[c]:
                if n == "stock":
                    target.generate(x, do_sample=False, max_new_tokens=192); continue
                out = target.generate(x, assistant_model=drafters[n], speculative_mode="whiflash", max_new_tokens=192, return_dict_in_generate=True)
                tokens += out.speculative_stats.new_tokens; rounds += len(out.speculative_stats.acceptance_lengths)
            if r:
                times[(n, c)].append(time.perf_counter() - t)
                if n != "stock": taus[(n, c)].append(tokens / rounds)
for c in cats:
    s = statistics.median(times[("stock", c)])
    print(c, "  ".join(f"{n} {s / statistics.median(times[(n, c)]):.3f}x ({statistics.median(taus[(n, c)]):.1f})" for n in variants), flush=True)
total = {n: sum(statistics.median(times[(n, c)]) for c in cats) for n in names}
print("all", "  ".join(f"{n} {total['stock'] / total[n]:.3f}x" for n in variants))
