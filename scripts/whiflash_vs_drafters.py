"""WhiFlash's default call against its own drafters' default calls (EAGLE-3, DFlash) and stock `generate`, one
prompt of each chosen category, in turns, medians of 3, with each call's rounds, tau, copy rounds and drafters
(docs/real-target.md). One thread.

    python scripts/whiflash_vs_drafters.py float32 humaneval,qa,rag,summarization 96
"""

import collections
import statistics
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target


def main() -> None:
    dtype, categories, new_tokens = getattr(torch, sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
    torch.set_num_threads(1)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafters = {mode: hf_specgen.load_drafter(f"hub_models/smollm2-135m-instruct-{folder}", dtype=dtype)
                for mode, folder in (("eagle3", "eagle3"), ("dflash", "dflash-b16"), ("whiflash", "whiflash"))}
    for record in [r for r in pick_prompts(["humaneval", "specbench"], 1) if r.get("category") in categories]:
        inputs = tokenizer.apply_chat_template([{"role": "user", "content": record["prompt"]}],
                                               add_generation_prompt=True, return_tensors="pt", return_dict=True)
        common = dict(**inputs, max_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True)
        calls = {"stock": lambda: target.generate(**common)}
        for mode, drafter in drafters.items():
            calls[mode] = lambda mode=mode, drafter=drafter: target.generate(**common, assistant_model=drafter,
                                                                             speculative_mode=mode)
        seconds, outputs = time_in_turns(calls, repeats=3)
        stock = statistics.median(seconds["stock"])
        prompt_tokens = inputs["input_ids"].shape[1]
        print(f"== {record['category']}, prompt tokens {prompt_tokens}")
        for name, out in outputs.items():
            median = statistics.median(seconds[name])
            line = f"{name:9s} {median:.3f}s {stock / median:.2f}x new={out.sequences.shape[1] - prompt_tokens}"
            stats = getattr(out, "speculative_stats", None)
            if stats is not None:
                line += (f" rounds={stats.num_rounds} tau={stats.mean_acceptance_length:.2f}"
                         f" copy_rounds={stats.lookup_drafts}"
                         f" widths={collections.Counter(stats.round_widths).most_common()}")
                if stats.drafter_per_round:
                    line += f" drafters={collections.Counter(stats.drafter_per_round).most_common()}"
            print(line)


if __name__ == "__main__":
    main()
