"""Which dtype decodes faster on this CPU now that fp32 plain steps and few-row verifies take the narrow route
(hf_specgen/engine/narrow_rows.py): stock `generate` and the default calls in bf16 and in fp32, in one process.

Two copies of the real target (bf16, fp32), per dtype its own drafters; one prompt of each category (HumanEval, then
Spec-Bench's), 96 new tokens, greedy; for each prompt every call once to warm up (the fp32 copy times its routes
there, as a first call does), then REPEATS passes in which every call takes its turn; prints per category and call
the median speed of the whole call (prefill included) over stock `generate`'s in bf16, and whether the text equals
stock's in the same dtype.

    python docs/benchmarks/dtype_choice/dtype_ab.py THREADS REPEATS [MODES]
    # MODES: a comma list of autoregressive, dflash, eagle3, whiflash (default: all four)
"""

import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

FOLDERS = {"dflash": "hub_models/smollm2-135m-instruct-dflash-b16", "eagle3": "hub_models/smollm2-135m-instruct-eagle3",
           "whiflash": "hub_models/smollm2-135m-instruct-whiflash", "autoregressive": None}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def main() -> None:
    threads, repeats = int(sys.argv[1]), int(sys.argv[2])
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else list(FOLDERS)
    torch.set_num_threads(threads)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    targets = {d: hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=t).eval())
               for d, t in DTYPES.items()}
    calls = [("stock", d) for d in DTYPES] + [(m, d) for m in modes for d in DTYPES]
    drafters = {(m, d): FOLDERS[m] and hf_specgen.load_drafter(FOLDERS[m], dtype=DTYPES[d])
                for m, d in calls if m != "stock"}
    print(f"{threads} thread(s), {repeats} passes; speed of the call over stock generate's in bf16 (median), '=': the "
          "text equals stock's in the same dtype")
    print(f"{'category':15s} " + " ".join(f"{m[:9] + ' ' + d:>15s}" for m, d in calls))
    ratios = {call: [] for call in calls}
    for record in pick_prompts(["humaneval", "specbench"], 1):
        input_ids = tokenizer.apply_chat_template([{"role": "user", "content": record["prompt"]}],
                                                  add_generation_prompt=True, return_tensors="pt",
                                                  return_dict=True)["input_ids"]

        def run(call):
            mode, dtype = call
            extra = {} if mode == "stock" else {"speculative_mode": mode}
            if drafters.get(call) is not None:
                extra["assistant_model"] = drafters[call]
            start = time.perf_counter()
            out = targets[dtype].generate(input_ids, max_new_tokens=96, do_sample=False, **extra)
            return time.perf_counter() - start, out

        texts = {call: run(call)[1] for call in calls}  # warm-up (and the first call's measurements)
        seconds = {call: [] for call in calls}
        for _ in range(repeats):
            for call in calls:
                seconds[call].append(run(call)[0])
        stock = statistics.median(seconds["stock", "bf16"])
        cells = []
        for call in calls:
            ratio = stock / statistics.median(seconds[call])
            ratios[call].append(ratio)
            same = torch.equal(texts[call], texts["stock", call[1]])
            cells.append(f"{ratio:.2f}x {'=' if same else 'DIFF'}")
        print(f"{record['category']:15s} " + " ".join(f"{c:>15s}" for c in cells), flush=True)
    print(f"{'geomean':15s} " + " ".join(f"{statistics.geometric_mean(r):>14.2f}x" for r in ratios.values()))


if __name__ == "__main__":
    main()
