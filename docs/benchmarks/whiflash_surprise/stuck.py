"""stuck.py DTYPE RUNS [bench]: how often WhiFlash's default call on the tiny world gets stuck on EAGLE-3's chains for
math, with the hf_specgen of the tree this file is in (copy it and docs/benchmarks/tiny_ab.py into a checkout of
another commit to measure that one). Each run loads a fresh bundle and decodes the code, math and prose prompts (10
each) twice in the bench's order (the first pass is the bench's warm-up); it prints each pass's math tau, wall
seconds and the share of drafting rounds DFlash ran. In the stuck runs math runs at tau 2.7-2.8 with DFlash in almost
no round, where the others run at tau 6-7: no clock is needed to tell them apart. With ``bench``, the prompts are the
ones `specgen bench --target tiny` takes, in its seeded order (tiny_ab.tiny_world_prompts); without, each category's
first 10.

    python docs/benchmarks/whiflash_surprise/stuck.py bfloat16 20
    python docs/benchmarks/whiflash_surprise/stuck.py float32 20 bench
    python docs/benchmarks/whiflash_surprise/stuck.py summary FILE...   (per file and pass: runs, stuck runs (math tau
        under 3.5), weak runs (under 5), the median and mean math tau)
"""
import re
import statistics
import sys
import time
from pathlib import Path

if sys.argv[1] == "summary":
    for name in sys.argv[2:]:
        runs = [[float(t) for t in re.findall(r"math tau ([\d.]+)", line)] for line in open(name)
                if line.startswith("run")]
        for p in (0, 1):
            taus = [run[p] for run in runs]
            print(f"{Path(name).name} pass {p + 1}: {len(taus)} runs, stuck {sum(t < 3.5 for t in taus)}, weak "
                  f"{sum(t < 5 for t in taus)}, math tau median {statistics.median(taus):.2f} mean "
                  f"{statistics.mean(taus):.2f}")
    sys.exit()

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from tiny_ab import CATEGORIES, MODELS, tiny_world  # noqa: E402

assert Path(hf_specgen.__file__).resolve().is_relative_to(ROOT), "hf_specgen must come from this tree"
dtype, runs = getattr(torch, sys.argv[1]), int(sys.argv[2])
target, prompts = tiny_world(dtype, bench_order=sys.argv[3:] == ["bench"])
for ids in prompts["code"][:2]:  # the target's own first calls (allocations) outside the runs
    target.generate(ids, do_sample=False, max_new_tokens=192)
for run in range(runs):
    bundle = hf_specgen.load_drafter(MODELS / "specgen-tiny-whiflash", dtype=dtype)
    line = []
    for _ in range(2):
        for category in CATEGORIES:
            start, tokens, rounds, drafters = time.perf_counter(), 0, 0, []
            for ids in prompts[category]:
                stats = target.generate(ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=192,
                                        return_dict_in_generate=True).speculative_stats
                tokens, rounds = tokens + stats.new_tokens, rounds + stats.num_rounds
                drafters += [d for d in stats.drafter_per_round if d in ("eagle3", "dflash")]
            if category == "math":
                line.append(f"math tau {tokens / rounds:.2f} {time.perf_counter() - start:.2f} s "
                            f"DFlash {drafters.count('dflash')}/{len(drafters)}")
    print(f"run {run + 1}: " + " | ".join(line), flush=True)
