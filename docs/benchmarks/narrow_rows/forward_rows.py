"""SmolLM2-135M-Instruct's eager forward of 1-16 new tokens over a 200-token cache, in fp32 on this CPU, with its
linears computed the library's way and the narrow way (hf_specgen/engine/narrow_rows.py: 2-4 rows as W @ x.T), and
the linears' own share of each (timed around every nn.Linear call). Medians of 7 forwards.

    python docs/benchmarks/narrow_rows/forward_rows.py THREADS
"""

import copy
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from hf_specgen.engine.narrow_rows import NarrowRowLinears
from hf_specgen.targets import resolve_target

ROWS = (1, 2, 3, 4, 8, 16)


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]))
    model = AutoModelForCausalLM.from_pretrained(resolve_target("smollm2-135m-instruct"), dtype=torch.float32).eval()
    linear_seconds = [0.0]
    library_forward = torch.nn.Linear.forward

    def timed_forward(self, x):  # the linears' share of a forward
        start = time.perf_counter()
        out = library_forward(self, x)
        linear_seconds[0] += time.perf_counter() - start
        return out

    torch.nn.Linear.forward = timed_forward
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(torch.randint(100, 20000, (1, 200), generator=generator), past_key_values=cache)

        def forward(rows: int, narrow: bool) -> tuple[float, float]:
            step_cache = copy.deepcopy(cache)
            ids = torch.randint(100, 20000, (1, rows), generator=generator)
            linear_seconds[0] = 0.0
            start = time.perf_counter()
            if narrow:
                with NarrowRowLinears():
                    model(ids, past_key_values=step_cache)
            else:
                model(ids, past_key_values=step_cache)
            return time.perf_counter() - start, linear_seconds[0]

        print(f"{sys.argv[1]} thread(s), fp32: forward ms (of which linears ms), medians of 7")
        for narrow in (False, True):
            cells = []
            for rows in ROWS:
                forward(rows, narrow)  # warm-up
                runs = [forward(rows, narrow) for _ in range(7)]
                total = statistics.median(r[0] for r in runs) * 1000
                linears = statistics.median(r[1] for r in runs) * 1000
                cells.append(f"{rows}: {total:.1f} ({linears:.1f})")
            print(("narrow  " if narrow else "library ") + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
