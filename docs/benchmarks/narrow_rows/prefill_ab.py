"""Whole calls with the prefill's linears the library's way ("off") and over the kinds the engine timed faster
("on", what hf_specgen does since 2026-11-29 later: SpeculativeDecoder._set_prefill_routes): stock `generate`, the
engine's plain steps and the default DFlash call on a batch of the batch benchmark's prompts (HumanEval, GSM8K,
MT-Bench, QA), in turns, medians of 3, prefill included, with the engine's prefill time of each call.

    python docs/benchmarks/narrow_rows/prefill_ab.py fp32|bf16 BATCH NEW_TOKENS THREADS
"""

import statistics
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.harness import time_in_turns
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.engine import loop
from hf_specgen.targets import resolve_target

CATEGORIES = ("humaneval", "math_reasoning", "mt_bench", "qa")


def main() -> None:
    name, batch, new_tokens, threads = sys.argv[1], *(int(arg) for arg in sys.argv[2:5])
    torch.set_num_threads(threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    dflash = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-dflash-b16", dtype=dtype)
    records = [r for r in pick_prompts(["specbench", "humaneval"], 4) if r.get("category") in CATEGORIES][:batch]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for r in records]
    inputs = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    common = dict(**inputs, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                  return_dict_in_generate=True)
    set_prefill_routes = loop.SpeculativeDecoder._set_prefill_routes
    prefill_on = [True]

    def prefill_routes(self, *args) -> None:  # "off": the prefill without routes (the decoding forwards keep theirs)
        set_prefill_routes(self, *args)
        if not prefill_on[0]:
            self._routes = None

    loop.SpeculativeDecoder._set_prefill_routes = prefill_routes

    def engine(routes_on: bool, **kwargs):
        def call():
            prefill_on[0] = routes_on
            return target.generate(**common, **kwargs)
        return call

    target.generate(**common, speculative_mode="autoregressive")  # times the kinds once, for every call after
    calls = {"stock": lambda: target.generate(**common)}
    for label, kwargs in (("plain steps", dict(speculative_mode="autoregressive")),
                          ("dflash", dict(assistant_model=dflash, speculative_mode="dflash"))):
        calls[f"engine {label}, prefill off"] = engine(False, **kwargs)
        calls[f"engine {label}, prefill on"] = engine(True, **kwargs)
    seconds, outputs = time_in_turns(calls, repeats=3)
    print(f"{name}, batch {batch} ({inputs['input_ids'].shape[1]} tokens padded), {new_tokens} new tokens, "
          f"{threads} thread(s), medians of 3")
    stock = statistics.median(seconds["stock"])
    for label, times in seconds.items():
        stats = getattr(outputs[label], "speculative_stats", None)
        prefill = f", prefill {stats.prefill_time:.3f} s" if stats is not None else ""
        same = outputs[label].sequences.tolist() == outputs["stock"].sequences.tolist()
        print(f"{label}: {statistics.median(times):.3f} s, {stock / statistics.median(times):.3f}x stock{prefill}, "
              f"{'same tokens as stock' if same else 'tokens differ from stock'}")


if __name__ == "__main__":
    main()
