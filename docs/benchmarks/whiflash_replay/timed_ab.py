"""WhiFlash's default call on the real target, timed, with the policy as it is ("now"), with the third session of
2026-11-28's changes undone in-process ("start": sweep.patched("back-off", "streaks")), or with any of sweep.patched's
changes undone (a comma list). One process per variant, so that neither inherits the other's carried estimates; run
the variants in turns. Two prompts of each category (HumanEval, then Spec-Bench's; by default all but translation,
whose texts end at different lengths in bf16), each decoded 3 times in a row at 96 new tokens; prints per category,
per prompt, the median seconds, the sequence length and each call's copy rounds as JSON. One thread, bf16.

    for i in 1 2 3; do for v in now start; do echo "$v $(python docs/benchmarks/whiflash_replay/timed_ab.py $v)"; done; done
    python docs/benchmarks/whiflash_replay/timed_ab.py back-off rag    # one change undone, RAG's prompts only
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep  # noqa: E402


def main() -> None:
    variant = sys.argv[1]
    categories = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    torch.set_num_threads(1)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval())
    bundle = hf_specgen.load_drafter("hub_models/smollm2-135m-instruct-whiflash", dtype=torch.bfloat16)
    presets = {"now": (), "start": ("back-off", "streaks")}
    undone = presets[variant] if variant in presets else tuple(variant.split(","))
    out: dict[str, list] = {}
    with sweep.patched(*undone):
        for record in pick_prompts(["humaneval", "specbench"], 2):
            if record.get("category") not in (categories or {"humaneval", "math_reasoning", "mt_bench", "qa", "rag",
                                                             "summarization"}):
                continue
            inputs = tokenizer.apply_chat_template([{"role": "user", "content": record["prompt"]}],
                                                   add_generation_prompt=True, return_tensors="pt", return_dict=True)
            seconds, copies = [], []
            for _ in range(3):
                start = time.perf_counter()
                output = target.generate(**inputs, max_new_tokens=96, do_sample=False, return_dict_in_generate=True,
                                         assistant_model=bundle, speculative_mode="whiflash")
                seconds.append(time.perf_counter() - start)
                copies.append(output.speculative_stats.lookup_drafts)
            out.setdefault(record["category"], []).append((statistics.median(seconds), output.sequences.shape[1],
                                                           copies))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
