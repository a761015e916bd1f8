"""Decode speed of two or more DFlash drafters on the real target, in turns within one run: stock generate, then each
drafter's default call and its fixed block, every pass (the first pass warms up and is not counted). Made to measure
a draft vocabulary against the whole one (same weights, ``scripts/set_draft_vocab.py``).

    python scripts/draft_vocab_ab.py full=FOLDER vocab8192=FOLDER --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import hf_specgen  # noqa: E402
from hf_specgen.bench.runner import encode_prompts, load_models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drafters", nargs="+", help="NAME=FOLDER DFlash drafters")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--categories", nargs="+", default=["humaneval", "math_reasoning", "mt_bench"])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="counted passes (after one warm-up pass)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    parser.add_argument("--threads", type=int, default=0)
    cli = parser.parse_args()
    if cli.threads:
        torch.set_num_threads(cli.threads)
    args = SimpleNamespace(target=cli.target, synthetic=None, prompts=None, categories=cli.categories, dtype=cli.dtype,
                           device="cpu", drafter=None, draft_model=None, eagle3=None, whiflash=None, num_prompts=1,
                           seed=0, thinking=False, command="bench")
    models = load_models(args)
    target, dtype = models.target, models.target.get_input_embeddings().weight.dtype
    prompts, _ = encode_prompts(models, args)
    calls = {"stock generate": {}}
    for spec in cli.drafters:
        name, _, folder = spec.partition("=")
        drafter = hf_specgen.load_drafter(folder, dtype=dtype).eval()
        calls[f"{name}, default call"] = dict(assistant_model=drafter, speculative_mode="dflash")
        calls[f"{name}, block_size=16"] = dict(assistant_model=drafter, speculative_mode="dflash", block_size=16)
    speed, tau = {name: [] for name in calls}, {name: [] for name in calls}
    for rep in range(cli.repeats + 1):
        for name, kwargs in calls.items():
            seconds = tokens = 0
            rounds = []
            for prompt in prompts:
                start = time.perf_counter()
                out = target.generate(prompt, max_new_tokens=cli.max_new_tokens, do_sample=False,
                                      return_dict_in_generate=True, **kwargs)
                seconds += time.perf_counter() - start
                tokens += out.sequences.shape[1] - prompt.shape[1]
                stats = getattr(out, "speculative_stats", None)
                rounds += stats.acceptance_lengths if stats is not None else []
            if rep:
                speed[name].append(tokens / seconds)
                tau[name].append(sum(rounds) / len(rounds) if rounds else 1.0)
    base = statistics.median(speed["stock generate"])
    print(f"{models.names['target']}, {args.dtype}, {len(prompts)} prompts ({', '.join(cli.categories)}), "
          f"{cli.max_new_tokens} new tokens, medians of {cli.repeats} passes (prefill included)\n")
    print("| call | tok/s | against stock | tau |\n|---|---|---|---|")
    for name in calls:
        median = statistics.median(speed[name])
        print(f"| {name} | {median:.1f} | {median / base:.2f}x | {statistics.median(tau[name]):.2f} |")


if __name__ == "__main__":
    main()
