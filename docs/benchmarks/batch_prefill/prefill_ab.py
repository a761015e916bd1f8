"""A/B in turns, one process: stock generate, the engine's plain steps, and each mode's default call in two variants.
``--ab prefill`` (the default): a left-padded batch prefilled padded (as stock does) / in groups of rows of like length
(engine/prefill.py). ``--ab tail``: a batch that shrinks into a smaller batch bucket whose drafting was never timed
drafting untimed rounds as before / choosing by the larger batch's drafting cost (WidthPolicy.draft_fallback). One
thread, the bench's prompts (`specgen bench --batch-sizes`'s set: HumanEval, GSM8K, MT-Bench, QA, 4 of each, in that
order, repeated), 48 new tokens. Run from the repository root:

    python docs/benchmarks/batch_prefill/prefill_ab.py TARGET(tiny|smollm2) BATCH REPEATS MODES(a,b,..) [DTYPE] [--ab prefill|tail]

MODES: autoregressive, dflash, eagle3; DTYPE: bfloat16 / float32 (default: hf_specgen.auto_dtype())."""
import argparse, statistics, time, torch
import hf_specgen
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target
from hf_specgen.engine import loop as L
torch.set_num_threads(1)
parser = argparse.ArgumentParser()
for name in ("target", "batch", "repeats", "modes"):
    parser.add_argument(name)
parser.add_argument("dtype", nargs="?")
parser.add_argument("--ab", choices=("prefill", "tail"), default="prefill")
args = parser.parse_args()
tgt, B, reps, modes = args.target, int(args.batch), int(args.repeats), args.modes.split(",")
tp = {"tiny": "hub_models/specgen-tiny", "smollm2": "smollm2-135m-instruct"}[tgt]
dp = {"tiny": "hub_models/specgen-tiny-", "smollm2": "hub_models/smollm2-135m-instruct-"}[tgt]
path = resolve_target(tp); tok = AutoTokenizer.from_pretrained(path, padding_side="left")
dtype = getattr(torch, args.dtype) if args.dtype else hf_specgen.auto_dtype()
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
dr = {"dflash": hf_specgen.load_drafter(dp + "dflash-b16", dtype=dtype), "eagle3": hf_specgen.load_drafter(dp + "eagle3", dtype=dtype)}
CATS = ("humaneval", "math_reasoning", "mt_bench", "qa")
recs = [r["prompt"] for r in pick_prompts(["specbench", "humaneval"], 4) if r.get("category") in CATS]
chats = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in (recs*4)[:B]]
inputs = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
common = dict(**inputs, max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id, return_dict_in_generate=True)
real_prefill, real_policy = L.SpeculativeDecoder._prefill_without_padding, L.SpeculativeDecoder._drafter_policy


def untimed_tails(self, *a, **k):  # before WidthPolicy.draft_fallback: a shrunk batch's bucket drafts until timed
    return real_policy(self, *a, **{**k, "draft_fallback": None})


def mk(mode, new):
    def f():
        grouped = new or args.ab != "prefill"
        L.SpeculativeDecoder._prefill_without_padding = real_prefill if grouped else (lambda self, *a: None)
        L.SpeculativeDecoder._drafter_policy = real_policy if new or args.ab != "tail" else untimed_tails
        if mode == "stock": return target.generate(**common)
        if mode == "autoregressive": return target.generate(**common, speculative_mode="autoregressive")
        return target.generate(**common, assistant_model=dr[mode], speculative_mode=mode)
    return f
old_name, new_name = {"prefill": ("padded", "grouped"), "tail": ("untimed", "fallback")}[args.ab]
calls = {"stock": mk("stock", False)}
if args.ab == "tail":
    calls["plain"] = mk("autoregressive", True)
for m in modes:
    calls[f"{m}/{old_name}"] = mk(m, False); calls[f"{m}/{new_name}"] = mk(m, True)
for f in calls.values(): f()
times, outs = {k: [] for k in calls}, {}
names = list(calls)
for r in range(reps):
    for k in names[r % len(names):] + names[:r % len(names)]:
        t = time.perf_counter(); outs[k] = calls[k](); times[k].append(time.perf_counter() - t)
st = statistics.median(times["stock"])
print(tgt, B, dtype, reps, args.ab)
for k, v in times.items():
    m = statistics.median(v); s = getattr(outs[k], "speculative_stats", None)
    print(f"  {k:22s} {m:.3f}s {st/m:.3f}x", "" if s is None else f"prefill {s.prefill_time:.3f} decode {s.decode_time:.3f}"
          f" (last run: {s.num_rounds} rounds, {sum(w > 1 for w in s.round_widths)} drafting)")
print("  same tokens as stock:", {k: bool(torch.equal(o.sequences, outs['stock'].sequences)) for k, o in outs.items()})
