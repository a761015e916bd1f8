"""A/B in turns, one process: stock generate, the engine's plain steps, the default call rating the mean row (the
policy's rows switched off) and the default call with each batch row's own estimate until the last row is done
(``WidthPolicy.set_rows``, docs/width-policy.md "A batch waits for its slowest row"). Both default calls share the
target's carried acceptance estimate, so they are not independent. The CPU's default dtype, one thread.
Run from the repository root:

    python docs/benchmarks/batch_finish_model/batch_ab.py TARGET(tiny|smollm2) MODE(dflash|eagle3) BATCH NEW REPEATS \
        [PROMPTS(chat|bench) FIRST]

chat: the 8 prompts of scripts/default_call_ratio.py; bench: `specgen bench --batch-sizes`'s set from FIRST."""
import sys, statistics, time, torch
import hf_specgen
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_specgen.engine import width_policy as wp
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target
sys.path.insert(0, "scripts")
from default_call_ratio import PROMPTS
torch.set_num_threads(1)
tgt, mode, B, new, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
src = sys.argv[6] if len(sys.argv) > 6 else "chat"; first = int(sys.argv[7]) if len(sys.argv) > 7 else 0
tp = {"tiny": "hub_models/specgen-tiny", "smollm2": "smollm2-135m-instruct"}[tgt]
dp = {"tiny": "hub_models/specgen-tiny-", "smollm2": "hub_models/smollm2-135m-instruct-"}[tgt] + {"dflash": "dflash-b16", "eagle3": "eagle3"}[mode]
path = resolve_target(tp); tok = AutoTokenizer.from_pretrained(path, padding_side="left")
dtype = hf_specgen.auto_dtype()
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
drafter = hf_specgen.load_drafter(dp, dtype=dtype)
if src == "chat":
    texts = (PROMPTS * (B // len(PROMPTS) + 1))[:B]
else:
    CATS = ("humaneval", "math_reasoning", "mt_bench", "qa")
    texts = [r["prompt"] for r in pick_prompts(["specbench", "humaneval"], 4) if r.get("category") in CATS][first:first + B]
chats = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in texts]
inputs = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
common = dict(**inputs, max_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id, return_dict_in_generate=True)
real_set_rows = wp.WidthPolicy.set_rows
def off(self, *a): self.rows = None; self._batch_rates = None
def call(on):
    wp.WidthPolicy.set_rows = real_set_rows if on else off
    return target.generate(**common, assistant_model=drafter, speculative_mode=mode)
calls = {"stock": lambda: target.generate(**common), "plain": lambda: target.generate(**common, speculative_mode="autoregressive"),
         "mean-row": lambda: call(False), "finish-model": lambda: call(True)}
for f in calls.values(): f()
times, outs = {k: [] for k in calls}, {}
for r in range(reps):
    names = list(calls)[r % len(calls):] + list(calls)[:r % len(calls)]
    for k in names:
        t = time.perf_counter(); outs[k] = calls[k](); times[k].append(time.perf_counter() - t)
stock = statistics.median(times["stock"])
print(f"{tgt} {mode} batch {B} new {new} {dtype} reps {reps} prompts {src}:{first}")
for k, v in times.items():
    m = statistics.median(v); s = outs[k].speculative_stats if hasattr(outs[k], "speculative_stats") else None
    extra = f" widths {s.round_widths}" if s is not None and s.round_widths else ""
    print(f"  {k}: {m:.3f} s  {stock/m:.3f}x stock  runs {[round(x,3) for x in v]}{extra[:300]}")
seq = {k: o.sequences for k, o in outs.items()}
print("  same tokens as stock:", {k: bool(torch.equal(v, seq['stock'])) for k, v in seq.items()})
