"""SmolLM2-135M-Instruct's eager forward of 1-32 new tokens over a 200-token cache on this CPU, with its linears
computed the library's way and the ways of hf_specgen/engine/narrow_rows.py (every kind of the dtype: fp32 one row
over the weights' halves and more rows over packed weights; bf16 any rows over packed weights), and the linears' own
share of each (timed around every linear's forward). Medians of 7 forwards.

    python docs/benchmarks/narrow_rows/forward_rows.py THREADS [fp32|bf16]
"""

import copy
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from hf_specgen.engine.narrow_rows import RoutedLinears, kinds_for, pack_linears, routable_linears
from hf_specgen.targets import resolve_target

ROWS = (1, 2, 3, 4, 8, 16, 32)


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]))
    name = sys.argv[2] if len(sys.argv) > 2 else "fp32"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
    model = AutoModelForCausalLM.from_pretrained(resolve_target("smollm2-135m-instruct"), dtype=dtype).eval()
    linears = routable_linears(model)
    assert pack_linears(linears, dtype)
    routes = RoutedLinears(linears, kinds_for(torch.device("cpu"), dtype, compiled=False))
    linear_seconds = [0.0]

    def started(module, args):
        module.started = time.perf_counter()

    def ended(module, args, out):  # the linears' share of a forward (whichever forward the module runs)
        linear_seconds[0] += time.perf_counter() - module.started

    for module in linears:
        module.register_forward_pre_hook(started)
        module.register_forward_hook(ended)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(torch.randint(100, 20000, (1, 200), generator=generator), past_key_values=cache)

        def forward(rows: int, routed: bool) -> tuple[float, float]:
            step_cache = copy.deepcopy(cache)
            ids = torch.randint(100, 20000, (1, rows), generator=generator)
            linear_seconds[0] = 0.0
            start = time.perf_counter()
            if routed:
                with routes:
                    model(ids, past_key_values=step_cache)
            else:
                model(ids, past_key_values=step_cache)
            return time.perf_counter() - start, linear_seconds[0]

        print(f"{sys.argv[1]} thread(s), {name}: forward ms (of which linears ms), medians of 7")
        for routed in (False, True):
            cells = []
            for rows in ROWS:
                forward(rows, routed)  # warm-up
                runs = [forward(rows, routed) for _ in range(7)]
                total = statistics.median(r[0] for r in runs) * 1000
                linears_ms = statistics.median(r[1] for r in runs) * 1000
                cells.append(f"{rows}: {total:.1f} ({linears_ms:.1f})")
            print(("routed  " if routed else "library ") + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
