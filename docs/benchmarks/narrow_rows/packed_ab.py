"""The default calls on the real target with their decoding forwards' linears computed the ways of
hf_specgen/engine/narrow_rows.py or the library's way, against stock `generate` in the same dtype, in one process.

One copy of the target per variant, each with its own cost model: "off" is told no kind pays before its first call,
"halves" that only fp32 one-row steps over the weights' halves may (the packed kind told it does not), "target" and
"on" time every kind of the dtype as any call does, "target" keeping the drafters' forwards on the library's way
(SpeculativeDecoder.routes_drafting off during its calls); and per variant its own drafters (each carries its own
acceptance estimates). One prompt of each category (HumanEval, then Spec-Bench's), 96 new tokens, greedy; for each
prompt every call once to warm up, then REPEATS passes in which stock and each mode's variants take turns; prints per
category and mode the median speed of the whole call over stock's and whether the text equals stock's (fp32: it
must; bf16 texts may part at a near-tie).

    python docs/benchmarks/narrow_rows/packed_ab.py THREADS REPEATS [MODES] [BATCH] [VARIANTS] [DTYPE]
    # MODES: a comma list of dflash, eagle3, whiflash, autoregressive (the engine's plain steps); BATCH (default 1):
    # that many prompts of each category in one left-padded batch, against stock batched generate; VARIANTS: a comma
    # list of off, halves, target, on (default off,on); DTYPE: fp32 (default) or bf16
"""

import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.engine.loop import SpeculativeDecoder
from hf_specgen.engine.narrow_rows import KINDS
from hf_specgen.engine.width_policy import costs_of
from hf_specgen.targets import resolve_target

FOLDERS = {"dflash": "hub_models/smollm2-135m-instruct-dflash-b16", "eagle3": "hub_models/smollm2-135m-instruct-eagle3",
           "whiflash": "hub_models/smollm2-135m-instruct-whiflash", "autoregressive": None}


def main() -> None:
    threads, repeats = int(sys.argv[1]), int(sys.argv[2])
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["dflash", "eagle3", "whiflash"]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    variants = sys.argv[5].split(",") if len(sys.argv) > 5 else ["off", "on"]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[6] if len(sys.argv) > 6 else "fp32"]
    torch.set_num_threads(threads)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    targets = {v: hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
               for v in variants}
    told = {"off": {("cpu", k.name): False for k in KINDS},
            "halves": {("cpu", k.name): False for k in KINDS if k.way == "packed"}, "target": {}, "on": {}}
    for variant, target in targets.items():
        costs_of(target).narrow_rows.update(told[variant])
    stock_target = targets[variants[0]]
    drafters = {(m, v): FOLDERS[m] and hf_specgen.load_drafter(FOLDERS[m], dtype=dtype)
                for m in modes for v in targets}
    print(f"{threads} thread(s), {sys.argv[6] if len(sys.argv) > 6 else 'fp32'}, batch {batch}, {repeats} passes; speed over stock generate (median), same text"
          " as stock")
    print(f"{'category':15s} " + " ".join(f"{m[:9] + ' ' + v:>16s}" for m in modes for v in targets))
    ratios = {key: [] for key in drafters}
    records = pick_prompts(["humaneval", "specbench"], batch)
    for group in (records[i: i + batch] for i in range(0, len(records), batch)):
        inputs = tokenizer.apply_chat_template([[{"role": "user", "content": r["prompt"]}] for r in group],
                                               add_generation_prompt=True, padding=True, return_tensors="pt",
                                               return_dict=True)

        def run(key):
            start = time.perf_counter()
            if key is None:
                out = stock_target.generate(**inputs, max_new_tokens=96, do_sample=False)
            else:
                mode, variant = key
                SpeculativeDecoder.routes_drafting = variant != "target"
                drafter = {"assistant_model": drafters[key]} if drafters[key] is not None else {}
                out = targets[variant].generate(**inputs, max_new_tokens=96, do_sample=False,
                                                speculative_mode=mode, **drafter)
            return time.perf_counter() - start, out

        keys = [None, *drafters]
        seconds = {key: [] for key in keys}
        texts = {key: run(key)[1] for key in keys}  # warm-up (and the first call's cost measurement)
        for _ in range(repeats):
            for key in keys:
                seconds[key].append(run(key)[0])
        stock = statistics.median(seconds[None])
        cells = []
        for key in drafters:
            ratio = stock / statistics.median(seconds[key])
            ratios[key].append(ratio)
            cells.append(f"{ratio:.2f}x {'=' if torch.equal(texts[key], texts[None]) else 'DIFF'}")
        print(f"{group[0]['category']:15s} " + " ".join(f"{c:>16s}" for c in cells), flush=True)
    print(f"{'geomean':15s} " + " ".join(f"{statistics.geometric_mean(r):>15.2f}x" for r in ratios.values()))


if __name__ == "__main__":
    main()
