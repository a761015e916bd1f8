"""One drafting step of the tiny world's draft LM (2 layers) over a 40-token cache, the library's linears against
each kind of engine/narrow_rows.py (best of 5 x 20 steps, one thread):

    python docs/benchmarks/draft_lm_own_routes/route_draft.py bfloat16
    MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        python docs/benchmarks/draft_lm_own_routes/route_draft.py float32
"""

import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from hf_specgen.engine.narrow_rows import KINDS, RoutedLinears, pack_linears, routable_linears  # noqa: E402

torch.set_num_threads(1)
dtype = getattr(torch, sys.argv[1])
draft = AutoModelForCausalLM.from_pretrained(ROOT / "hub_models" / "specgen-tiny-draft", dtype=dtype)
linears = routable_linears(draft)
pack_linears(linears, dtype)
for kind in (k for k in KINDS if k.dtype == dtype):
    rows, seconds = kind.fewest, {}
    for name, routes in (("library", None), ("routed", RoutedLinears(linears, (kind,)))):
        with torch.no_grad():
            cache = DynamicCache()
            draft(torch.arange(40)[None], past_key_values=cache, use_cache=True)
            step = torch.arange(rows)[None] + 5
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(20):
                    if cache.get_seq_length() > 40:
                        cache.crop(-rows)
                    if routes is None:
                        draft(step, past_key_values=cache, use_cache=True)
                    else:
                        with routes:
                            draft(step, past_key_values=cache, use_cache=True)
                best = min(best, (time.perf_counter() - start) / 20)
        seconds[name] = best
    print(kind.name, {name: f"{s * 1e3:.3f} ms" for name, s in seconds.items()})
