"""SmolLM2-135M-Instruct's prefill forward (an empty cache, a prompt of P tokens, the last token's logits only) with
its linears the library's way and over the kinds of hf_specgen/engine/narrow_rows.py for the dtype (fp32: packed
weights from 2 rows; bf16: packed weights), in turns, medians of 5 after a warm-up, and the largest logit difference.

    python docs/benchmarks/narrow_rows/prefill_rows.py THREADS fp32|bf16
"""

import statistics
import sys
import time
import warnings

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from hf_specgen.engine.narrow_rows import RoutedLinears, kinds_for, pack_linears, routable_linears
from hf_specgen.targets import resolve_target


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)  # past_key_values, renamed in newer transformers
    torch.set_num_threads(int(sys.argv[1]))
    name = sys.argv[2]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
    model = AutoModelForCausalLM.from_pretrained(resolve_target("smollm2-135m-instruct"), dtype=dtype).eval()
    linears = routable_linears(model)
    assert pack_linears(linears, dtype)
    routes = RoutedLinears(linears, kinds_for(torch.device("cpu"), dtype, compiled=False))
    generator = torch.Generator().manual_seed(0)
    print(f"{sys.argv[1]} thread(s), {name}: prefill ms, library / routed, medians of 5")
    with torch.no_grad():
        for tokens in (32, 128, 256, 512):
            ids = torch.randint(100, 20000, (1, tokens), generator=generator)
            seconds, logits = {False: [], True: []}, {}
            for repeat in range(6):
                for routed in (False, True):
                    cache = DynamicCache(config=model.config)
                    start = time.perf_counter()
                    if routed:
                        with routes:
                            out = model(ids, past_key_values=cache, logits_to_keep=1)
                    else:
                        out = model(ids, past_key_values=cache, logits_to_keep=1)
                    if repeat:  # the first pass of each way warms up
                        seconds[routed].append(time.perf_counter() - start)
                    logits[routed] = out.logits.float()
            library, routed = (statistics.median(seconds[way]) * 1e3 for way in (False, True))
            print(f"{tokens} tokens: {library:.1f} / {routed:.1f} ms ({library / routed:.2f}x), largest logit "
                  f"difference {(logits[True] - logits[False]).abs().max().item():.1e}", flush=True)


if __name__ == "__main__":
    main()
