"""tiny_ab_routers.py DTYPE RUNS: WhiFlash's default call on the tiny world with the bundle's neural router ("neural",
as `specgen bench` runs it) against its entropy router ("entropy") as each round's vote, the context of the width
policy's estimates; fresh bundles each run, in the bench's order (docs/benchmarks/tiny_ab.py's run_in_bench_order, two
passes after a warm-up): speed over stock generate per category, and tau.

    python docs/benchmarks/whiflash_router_context/tiny_ab_routers.py bfloat16 3
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from tiny_ab import MODELS, run_in_bench_order, tiny_world  # noqa: E402


dtype, runs = getattr(torch, sys.argv[1]), int(sys.argv[2])
target, prompts = tiny_world(dtype, bench_order=True)
VARIANTS = ("neural", "entropy")
for run in range(runs):
    bundles = {}
    for name in VARIANTS:
        bundles[name] = hf_specgen.load_drafter(MODELS / "specgen-tiny-whiflash", dtype=dtype)
        bundles[name].router = name

    def decode(name, ids):
        return target.generate(ids, assistant_model=bundles[name], speculative_mode="whiflash", max_new_tokens=192,
                               return_dict_in_generate=True)
    print(f"run {run + 1}", flush=True)
    run_in_bench_order(target, prompts, VARIANTS, decode, lambda name: None, 2, 192)
