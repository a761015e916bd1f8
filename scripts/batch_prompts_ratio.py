"""Stock `generate`, the engine's plain steps and the default DFlash / EAGLE-3 / WhiFlash calls on one batch of the
batch benchmark's prompts (HumanEval, GSM8K, MT-Bench, QA; `specgen bench --batch-sizes`'s set), in turns, medians of 3,
with each default call's round widths, batch sizes and per-row acceptance (docs/width-policy.md, "The prefill
attended the first block's slots"). The CPU's default dtype (``hf_specgen.auto_dtype()``: bf16 with bf16 units,
fp32 on an AVX2-only CPU), one thread; --prof adds cProfile of the plain and DFlash calls;
--bench-order takes the prompts in `specgen bench`'s order (Spec-Bench's sets, then HumanEval: its batch of 8 is
GSM8K and MT-Bench prompts); --engine-first starts the first turn at the engine's plain steps instead of stock (the
order then turns by one each pass; what runs before a call moves its time by a few percent on a 2-core CPU:
docs/width-policy.md, "Per-row estimates, tried again").

    python scripts/batch_prompts_ratio.py BATCH NEW_TOKENS FIRST_PROMPT [--prof] [--bench-order] [--engine-first]
"""

import cProfile
import io
import pstats
import statistics
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

CATEGORIES = ("humaneval", "math_reasoning", "mt_bench", "qa")


def main() -> None:
    batch, new_tokens, first = (int(arg) for arg in sys.argv[1:4])
    torch.set_num_threads(1)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    dtype = hf_specgen.auto_dtype()
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    dflash = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=dtype)
    eagle3 = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-eagle3", dtype=dtype)
    whiflash = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-whiflash", dtype=dtype)
    prompt_sets = ["specbench", "humaneval"] if "--bench-order" in sys.argv else ["humaneval", "specbench"]
    records = [r for r in pick_prompts(prompt_sets, 4) if r.get("category") in CATEGORIES]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for r in records[first:first + batch]]
    inputs = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    common = dict(**inputs, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                  return_dict_in_generate=True)
    calls = {
        "stock": lambda: target.generate(**common),
        "engine, plain steps": lambda: target.generate(**common, speculative_mode="autoregressive"),
        "dflash": lambda: target.generate(**common, assistant_model=dflash, speculative_mode="dflash"),
        "eagle3": lambda: target.generate(**common, assistant_model=eagle3, speculative_mode="eagle3"),
        "whiflash": lambda: target.generate(**common, assistant_model=whiflash, speculative_mode="whiflash"),
    }
    if "--engine-first" in sys.argv:
        calls = {"engine, plain steps": calls.pop("engine, plain steps"), **calls}
    seconds, outputs = time_in_turns(calls, repeats=3)
    print(f"batch {batch} (prompts {first}-{first + batch - 1}, {inputs['input_ids'].shape[1]} tokens padded), "
          f"{new_tokens} new tokens, {str(dtype).removeprefix('torch.')}, one thread, medians of 3")
    stock = statistics.median(seconds["stock"])
    for name, times in seconds.items():
        print(f"{name}: {statistics.median(times):.3f} s, {stock / statistics.median(times):.3f}x stock, "
              f"runs {[round(t, 3) for t in times]}")
    for name in ("dflash", "eagle3", "whiflash"):
        stats = outputs[name].speculative_stats
        print(f"{name} round widths {stats.round_widths}\n{name} batch sizes {stats.round_batch_sizes}\n"
              f"{name} per-row acceptance {stats.row_acceptance_lengths}")
    if "--prof" in sys.argv:
        for name in ("engine, plain steps", "dflash"):
            profile = cProfile.Profile()
            profile.enable()
            calls[name]()
            profile.disable()
            report = io.StringIO()
            pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(25)
            print(name, report.getvalue())


if __name__ == "__main__":
    main()
