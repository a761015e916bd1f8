"""How a target's forward time grows with the number of tokens it verifies, per dtype and per matrix kernel.

Speculative decoding pays off when verifying n drafted tokens costs little more than one decoding step. On CPUs
without bf16 matrix units (no AVX512-BF16 / AMX), bf16 matrix products run element by element, so a 16-token verify
costs almost 16 steps; in fp32 it costs a few. This measures it on the machine at hand:

    python scripts/forward_cost.py --target smollm2-135m-instruct --dtypes bf16 fp32

``--kernels stock prepacked`` also times the forwards with every linear layer's weight reordered once for oneDNN
(``torch.ops.mkldnn._reorder_linear_weight``, a second copy of the weights; a measurement only, nothing in the
package does this), which is what a verify of several rows would cost with products that do not re-read the weights
per call. Passes take turns over the kernels and token counts, so a change of load on a shared machine reaches them
alike; ``--fastest`` reports each one's fastest pass instead of the median.

    python scripts/forward_cost.py --dtypes fp32 --kernels stock prepacked --tokens 1 2 4 8 16 --context 80 \\
        --repeats 12 --fastest --threads 1
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


def prepack_linears(model) -> None:
    """Every ``nn.Linear`` of ``model`` computes through a oneDNN-reordered copy of its weight (fp32 CPU)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach(), None)

            def forward(x, packed=packed, bias=module.bias):
                rows = x.reshape(-1, x.shape[-1])
                out = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")
                return out.reshape(*x.shape[:-1], -1)

            module.forward = forward


@torch.no_grad()
def forward_seconds(model, n_tokens: int, context: int) -> float:
    """One forward of ``n_tokens`` new tokens after a cached ``context``-token prompt."""
    ids = torch.randint(100, 1000, (1, context + n_tokens))
    out = model(ids[:, :context], use_cache=True)
    cache = out["cache"] if "cache" in out else out.past_key_values  # transformers renamed the output's cache
    start = time.perf_counter()
    model(ids[:, context:], **{cache_keyword(model): cache}, use_cache=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=list(DTYPES))
    parser.add_argument("--kernels", nargs="+", default=["stock"], choices=["stock", "prepacked"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--fastest", action="store_true", help="each forward's fastest pass (default: the median)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if "prepacked" in args.kernels and args.dtypes != ["fp32"]:
        parser.error("--kernels prepacked is measured in fp32 only (--dtypes fp32)")
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_target(args.target)
    statistic = "fastest" if args.fastest else "median"
    print(f"forward time of n new tokens after a {args.context}-token context, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {statistic} of {args.repeats} passes in turns\n")
    models = {}
    for dtype in args.dtypes:
        for kernel in args.kernels:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]).eval()
            if kernel == "prepacked":
                prepack_linears(model)
            models[dtype, kernel] = model
    times = {(key, n): [] for key in models for n in args.tokens}
    for key, model in models.items():  # warm-up: allocations
        for n in args.tokens:
            forward_seconds(model, n, args.context)
    for _ in range(args.repeats):
        for key, model in models.items():
            for n in args.tokens:
                times[key, n].append(forward_seconds(model, n, args.context))
    pick = min if args.fastest else statistics.median
    print("| dtype | kernel | " + " | ".join(f"n={n}" for n in args.tokens) + " | n=16 / n=1 |")
    print("|---|---|" + "---|" * (len(args.tokens) + 1))
    for dtype, kernel in models:
        cost = {n: 1000 * pick(times[(dtype, kernel), n]) for n in args.tokens}
        ratio = f"{cost[16] / cost[1]:.2f}x" if 16 in cost and 1 in cost else "-"
        print(f"| {dtype} | {kernel} | " + " | ".join(f"{cost[n]:.1f} ms" for n in args.tokens) + f" | {ratio} |")


if __name__ == "__main__":
    main()
