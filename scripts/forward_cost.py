"""How a target's forward time grows with the number of tokens it verifies, per dtype (median of repeats).

Speculative decoding pays off when verifying n drafted tokens costs little more than one decoding step. On CPUs
without bf16 matrix units (no AVX512-BF16 / AMX), bf16 matrix products run element by element, so a 16-token verify
costs almost 16 steps; in fp32 it costs a few. This measures it on the machine at hand:

    python scripts/forward_cost.py --target smollm2-135m-instruct --dtypes bf16 fp32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from hf_specgen.engine.support import cache_keyword
from hf_specgen.targets import resolve_target

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@torch.no_grad()
def forward_ms(model, n_tokens: int, context: int, repeats: int) -> float:
    """Median time of one forward of ``n_tokens`` new tokens after a cached ``context``-token prompt."""
    ids = torch.randint(100, 1000, (1, context + n_tokens))
    times = []
    for _ in range(repeats + 1):  # the first run warms up allocations
        cache = model(ids[:, :context], use_cache=True).past_key_values
        start = time.perf_counter()
        model(ids[:, context:], **{cache_keyword(model): cache}, use_cache=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=list(DTYPES))
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    path = resolve_target(args.target)
    print(f"forward time of n new tokens after a {args.context}-token context, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}, median of {args.repeats}\n")
    print("| dtype | " + " | ".join(f"n={n}" for n in args.tokens) + " | n=16 / n=1 |")
    print("|---|" + "---|" * (len(args.tokens) + 1))
    for name in args.dtypes:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[name]).eval()
        cost = {n: forward_ms(model, n, args.context, args.repeats) for n in args.tokens}
        ratio = f"{cost[16] / cost[1]:.1f}x" if 16 in cost and 1 in cost else "-"
        print(f"| {name} | " + " | ".join(f"{cost[n]:.0f} ms" for n in args.tokens) + f" | {ratio} |")


if __name__ == "__main__":
    main()
