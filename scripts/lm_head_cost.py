"""What a DFlash drafting round's lm_head costs on a target, beside the target's own steps: the product over the
drafted slots of a block, over the whole vocabulary and over draft vocabularies of N tokens (any N rows: the cost
depends on the count), and target forwards of 1, 4 and 16 rows after a 200-token context. Medians of 30 (15 for
forwards), one process.

    python scripts/lm_head_cost.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hf_specgen.training.loop import load_frozen_target  # noqa: E402


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--slots", type=int, default=15, help="drafted slots of a block (block size - 1)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    _, target = load_frozen_target(args.target)
    target = target.to(dtype)
    weight = target.get_output_embeddings().weight  # [V, H]
    hidden = torch.randn(1, args.slots, weight.shape[1], dtype=dtype)
    print(f"{args.target}, {args.dtype}, {torch.get_num_threads()} thread(s)\n\n| what | ms |\n|---|---|")
    with torch.no_grad():
        for rows in [weight.shape[0], *args.sizes]:
            part = weight[:rows].contiguous()
            ms = median_ms(lambda: (hidden @ part.T).argmax(-1), 30)
            print(f"| lm_head over {args.slots} slots, {rows} tokens | {ms:.1f} |")
        context = target(torch.randint(0, weight.shape[0], (1, 200)), use_cache=True).past_key_values
        for width in (1, 4, 16):
            ids = torch.randint(0, weight.shape[0], (1, width))

            def step():
                target(ids, past_key_values=context, use_cache=True)
                context.crop(-width)  # back to the 200-token context

            print(f"| target forward, {width} rows after 200 | {median_ms(step, 15):.1f} |")


if __name__ == "__main__":
    main()
