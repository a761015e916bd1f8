"""Eager DFlash in our engine against the z-lab style reference loop, same weights, same prompts, same tokens.

The reference is ``DFlashDraftModel.spec_generate``: a plain loop over transformers' dynamic caches, the shape of
z-lab's published ``spec_generate`` (batch 1, greedy). Both decode each prompt ``--repeats`` times after a warm-up;
the ratio is our median decode time over the reference's, summed over prompts (prefill included in both, as the
reference cannot report it apart). Tokens must match (fp32 exactly; in bf16 a near-tie may part them, reported).

    python scripts/reference_loop_ratio.py                                  # the tiny world
    python scripts/reference_loop_ratio.py --target smollm2-135m-instruct   # the real target (after specgen prepare)
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

from hf_specgen.bench.runner import encode_prompts, load_models  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None, help="a packaged target's name or folder (default: the tiny world)")
    parser.add_argument("--num-prompts", type=int, default=2, help="prompts per category")
    parser.add_argument("--categories", nargs="+", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    parser.add_argument("--threads", type=int, default=0)
    cli = parser.parse_args()
    if cli.threads:
        torch.set_num_threads(cli.threads)
    args = SimpleNamespace(target=cli.target, synthetic=None, prompts=None, categories=cli.categories,
                           dtype=cli.dtype, device="cpu", drafter=None, draft_model=None, eagle3=None, whiflash=None,
                           num_prompts=cli.num_prompts, seed=0, thinking=False, command="bench")
    models = load_models(args)
    target, drafter = models.target, models.dflash
    prompts, records = encode_prompts(models, args)
    stop = target.generation_config.eos_token_id
    stop = list(stop) if isinstance(stop, (list, tuple)) else [stop]
    ours_total = reference_total = 0.0
    same = 0
    print("| prompt | ours (s) | reference loop (s) | ratio | same tokens |\n|---|---|---|---|---|")
    for prompt, record in zip(prompts, records):
        ours_s, ours = timed(lambda: target.generate(
            prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=cli.max_new_tokens,
            do_sample=False), cli.repeats)
        reference_s, reference = timed(lambda: drafter.spec_generate(
            prompt, target, max_new_tokens=cli.max_new_tokens, stop_token_ids=stop), cli.repeats)
        identical = ours.tolist() == reference.tolist()
        same += identical
        ours_total, reference_total = ours_total + ours_s, reference_total + reference_s
        print(f"| {record['category']} {record['id']} | {ours_s:.3f} | {reference_s:.3f} | {ours_s / reference_s:.2f} "
              f"| {'yes' if identical else 'no'} |")
    print(f"\n{models.names['target']} ({args.dtype}, {len(prompts)} prompts, {cli.max_new_tokens} new tokens, "
          f"median of {cli.repeats}): ours / reference loop = {ours_total / reference_total:.2f} "
          f"({ours_total:.2f} s vs {reference_total:.2f} s); same tokens on {same}/{len(prompts)} prompts")


if __name__ == "__main__":
    main()
