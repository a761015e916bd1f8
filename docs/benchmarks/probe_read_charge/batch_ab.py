"""DFlash's, EAGLE-3's and WhiFlash's default calls on the real target (SmolLM2-135M-Instruct) in batches, with a
probe charged for its drafter's read of the rows it has not seen (``PendingContextRows.unread_rows``, the engine as
it is) and without (``uncharged``: no unread rows reported, as before), beside stock batched `generate` and the
engine's plain steps, in one process.

Each variant has drafters of its own (so its own carried estimates); the batch is the first BATCH prompts of
scripts/batch_prompts_ratio.py's set (HumanEval, GSM8K, MT-Bench, QA; left-padded), 48 new tokens, the CPU's default
dtype, one thread; one warm-up call each, then REPEATS passes in turns (harness.time_in_turns); prints each call's
speed over stock's (medians) and the rounds that drafted.

    python docs/benchmarks/probe_read_charge/batch_ab.py 4,8,16 [REPEATS]

``1`` in place of the sizes runs batch 1 instead: one prompt of each README bench category, each call's speed over
the first variant's (docs/benchmarks/tiny_ab.py, ``run_on_the_real_target``; divide a pair's figures for its ratio);
a third argument names the methods (``dflash,eagle3``; all three by default).

    python docs/benchmarks/probe_read_charge/batch_ab.py 1 PASSES [MODES]
"""

import statistics
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))

import hf_specgen  # noqa: E402
from hf_specgen.bench.harness import time_in_turns  # noqa: E402
from hf_specgen.bench.prompt_sets import pick_prompts  # noqa: E402
from hf_specgen.drafters.whiflash import WhiFlashProposer  # noqa: E402
from hf_specgen.engine.proposer import PendingContextRows  # noqa: E402
from hf_specgen.targets import resolve_target  # noqa: E402

CATEGORIES = ("humaneval", "math_reasoning", "mt_bench", "qa")
FOLDERS = {"dflash": "smollm2-135m-instruct-dflash-b16", "eagle3": "smollm2-135m-instruct-eagle3",
           "whiflash": "smollm2-135m-instruct-whiflash"}
charged = (PendingContextRows.unread_rows, WhiFlashProposer.unread_rows)


def use(charge: bool) -> None:
    PendingContextRows.unread_rows = charged[0] if charge else property(lambda self: 0)
    WhiFlashProposer.unread_rows = charged[1] if charge else property(lambda self: 0)


def main() -> None:
    sizes = [int(size) for size in sys.argv[1].split(",")]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if sizes == [1]:
        from tiny_ab import run_on_the_real_target

        modes = sys.argv[3].split(",") if len(sys.argv) > 3 else list(FOLDERS)
        variants = {f"{mode}{suffix}": (mode, FOLDERS[mode]) for mode in modes for suffix in (" uncharged", "")}
        run_on_the_real_target(hf_specgen.auto_dtype(), repeats, variants, lambda name: use("uncharged" not in name))
        return
    torch.set_num_threads(1)
    path = resolve_target("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    dtype = hf_specgen.auto_dtype()
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
    drafters = {(mode, charge): hf_specgen.load_drafter(ROOT / "hub_models" / folder, dtype=dtype)
                for mode, folder in FOLDERS.items() for charge in (True, False)}
    records = [r for r in pick_prompts(["humaneval", "specbench"], 4) if r.get("category") in CATEGORIES]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for r in records]
    for size in sizes:
        inputs = tokenizer(chats[:size], return_tensors="pt", padding=True, add_special_tokens=False)
        common = dict(**inputs, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                      return_dict_in_generate=True)

        def speculative(mode, charge):
            def call():
                use(charge)
                return target.generate(**common, assistant_model=drafters[(mode, charge)], speculative_mode=mode)
            return call

        calls = {"stock": lambda: target.generate(**common),
                 "plain": lambda: target.generate(**common, speculative_mode="autoregressive")}
        for mode in FOLDERS:
            calls[mode] = speculative(mode, True)
            calls[f"{mode} uncharged"] = speculative(mode, False)
        seconds, outputs = time_in_turns(calls, repeats)
        use(True)
        stock = statistics.median(seconds["stock"])
        print(f"batch {size} ({inputs['input_ids'].shape[1]} tokens padded), {str(dtype).removeprefix('torch.')}, "
              f"medians of {repeats}: " + "  ".join(f"{name} {stock / statistics.median(times):.3f}x"
                                                    for name, times in seconds.items() if name != "stock"), flush=True)
        for name, out in outputs.items():
            stats = getattr(out, "speculative_stats", None)
            if stats is not None and name != "plain":
                drafted = [i for i, w in enumerate(stats.round_widths) if w > 1]
                print(f"  {name}: runs {[round(t, 2) for t in seconds[name]]}, drafting rounds {drafted}", flush=True)


if __name__ == "__main__":
    main()
