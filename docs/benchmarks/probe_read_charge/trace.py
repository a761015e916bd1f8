"""Each round of one default call on the real target's batch, charged and uncharged in turn (batch_ab.py's variants,
its prompts, 48 new tokens, each variant with a drafter of its own): per call its seconds, and for each round that
drafted its width, drafter (WhiFlash: d / e) and seconds (whole round / drafting), and the first row's tokens a round.

    python docs/benchmarks/probe_read_charge/trace.py MODE BATCH CALLS
"""
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import batch_ab as ab  # noqa: E402

import hf_specgen  # noqa: E402
from hf_specgen.bench.prompt_sets import pick_prompts  # noqa: E402
from hf_specgen.targets import resolve_target  # noqa: E402

mode, size, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
path = resolve_target("smollm2-135m-instruct")
tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
dtype = hf_specgen.auto_dtype()
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
drafters = {charge: hf_specgen.load_drafter(ab.ROOT / "hub_models" / ab.FOLDERS[mode], dtype=dtype)
            for charge in (True, False)}
records = [r for r in pick_prompts(["humaneval", "specbench"], 4) if r.get("category") in ab.CATEGORIES]
chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                       add_generation_prompt=True) for r in records[:size]]
inputs = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
common = dict(**inputs, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id,
              return_dict_in_generate=True)
for _ in range(calls):
    for charge in (True, False):
        ab.use(charge)
        start = time.perf_counter()
        out = target.generate(**common, assistant_model=drafters[charge], speculative_mode=mode)
        stats = out.speculative_stats
        plain = [s for s, w in zip(stats.round_seconds, stats.round_widths) if w == 1]
        print(f"{'charged' if charge else 'uncharged'} {time.perf_counter() - start:.2f} s, prefill "
              f"{stats.prefill_time:.2f} s, {len(stats.round_widths)} rounds, plain median {statistics.median(plain):.3f} s")
        drafter = getattr(stats, "drafter_per_round", None) or [""] * len(stats.round_widths)
        print("  ", " ".join(f"{w}{d[:1]}:{s:.2f}/{ds:.2f}" for w, d, s, ds in
                             zip(stats.round_widths, drafter, stats.round_seconds, stats.round_draft_seconds)
                             if w > 1 or ds > 0.005))
        print("   first row", stats.row_acceptance_lengths[0], flush=True)
ab.use(True)
