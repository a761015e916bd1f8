"""What rolling a hybrid target's recurrent layers back costs per round (issue 28), against a same-size
attention-only target.

Two random targets of one width and depth: a Qwen3.5-style hybrid (three Gated DeltaNet linear-attention layers,
then one full-attention layer, repeated) and a Qwen3 target whose layers are all full attention. For each, on a
static cache after a 128-token prompt, the median time of:
  - a plain step (1 token) and a verify of W tokens (the round's main forward);
  - the snapshot of the recurrent states taken before a verify (hybrid only);
  - the roll-back after a verify whose drafts were rejected after c tokens: the snapshot put back and the c committed
    tokens re-fed (hybrid only; an attention-only target rolls back by moving a length).
Prints a markdown table. transformers' reference PyTorch kernels run the linear attention on a CPU
(flash-linear-attention is a GPU package), so the hybrid's forwards are slower than they would be there.

    python scripts/hybrid_round_cost.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config
from transformers.models.qwen3_5 import Qwen3_5TextConfig

from hf_specgen.engine.cache import restore_states, set_cache_length, snapshot_states, static_cache
from hf_specgen.engine.session import DecodingSession
from hf_specgen.engine.support import cache_keyword, rollback_layer_indices
from hf_specgen.engine.taps import decoder_layers
from hf_specgen.reports import markdown_table

PROMPT = 128


def targets(hidden: int, layers: int) -> dict:
    common = dict(vocab_size=4096, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                  num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 256), head_dim=64,
                  max_position_embeddings=4096)
    hybrid = Qwen3_5TextConfig(**common, layer_types=(["linear_attention"] * 3 + ["full_attention"]) * (layers // 4),
                               linear_num_key_heads=hidden // 128, linear_num_value_heads=hidden // 64,
                               linear_key_head_dim=64, linear_value_head_dim=64)
    torch.manual_seed(0)
    return {"attention only (qwen3)": AutoModelForCausalLM.from_config(Qwen3Config(**common)).eval(),
            "hybrid (qwen3_5_text)": AutoModelForCausalLM.from_config(hybrid).eval()}


def median_seconds(run, repeats: int) -> float:
    run()  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


@torch.no_grad()
def measure(target, width: int, committed: int, repeats: int) -> dict[str, float]:
    prompt = torch.randint(3, 4000, (1, PROMPT))
    session = DecodingSession(prompt, None, PROMPT + 2 * width, width, torch.float32)
    cache = static_cache(session.capacity, len(decoder_layers(target)), 1, "cpu", rollback_layer_indices(target))
    key = cache_keyword(target)
    target(input_ids=prompt, position_ids=session.positions[:, :PROMPT], attention_mask=session.prefill_mask(),
           **{key: cache}, use_cache=True)
    saved = snapshot_states(cache)
    block = torch.randint(3, 4000, (1, width))

    def forward(rows: int):
        def run():
            set_cache_length(cache, PROMPT)
            restore_states(cache, saved)
            target(input_ids=block[:, :rows], position_ids=session.positions[:, PROMPT:PROMPT + rows],
                   attention_mask=session.causal_mask(PROMPT, rows), **{key: cache}, use_cache=True)
        return run

    result = {"plain step": median_seconds(forward(1), repeats), f"verify of {width}": median_seconds(forward(width),
                                                                                                     repeats)}
    if rollback_layer_indices(target):
        result["snapshot"] = median_seconds(lambda: snapshot_states(cache), repeats)
        result[f"roll back: restore + re-feed {committed}"] = median_seconds(forward(committed), repeats)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=8, help="verified rows per round")
    parser.add_argument("--committed", type=int, default=3, help="rows committed when a draft is rejected")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, target in targets(args.hidden, args.layers).items():
        params = sum(p.numel() for p in target.parameters()) / 1e6
        times = measure(target, args.width, args.committed, args.repeats)
        step = times["plain step"]
        for phase, seconds in times.items():
            rows.append([f"{name}, {params:.1f}M", phase, f"{seconds * 1e3:.2f}", f"{seconds / step:.2f}"])
    print(markdown_table(rows, ["target", "phase", "ms (median)", "plain steps"]))


if __name__ == "__main__":
    main()
