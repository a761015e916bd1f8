"""``specgen bench --batch-sizes 1 2 4 8 16``: throughput against batch size, same prompts at every size.

The first max(batch sizes) prompts are decoded at every batch size: at size b they are cut into consecutive groups
of b, each group left-padded into one ``generate`` call. Throughput = tokens generated (each row up to and
including its stop token, padding not counted) / wall time of all the calls, prefill included: what a server or an
evaluation run gets. One warm-up call per method and batch size (allocations, compiled graphs), then the median of
``--repeats`` timed passes. Stock ``generate`` runs the same batches as the baseline, in the same process.
"""

from __future__ import annotations

import statistics
import time

import torch

def batching_methods(methods: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The methods of ``build_methods`` that decode a batch: all of ours (transformers' own assisted, prompt-lookup
    and DFlash paths, named "hf ...", take one prompt at a time)."""
    return [(name, kwargs) for name, kwargs in methods if not name.startswith("hf ")]


def left_padded(prompts: list[torch.Tensor], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[1, P_i] prompts -> input_ids [B, max P], attention_mask [B, max P], padded on the left."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long, device=prompts[0].device)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - prompt.shape[1]:] = prompt[0]
        mask[row, width - prompt.shape[1]:] = 1
    return ids, mask


def generated_tokens(sequences: torch.Tensor, prompt_width: int, stop_ids: set[int]) -> tuple[int, list[int]]:
    """Tokens each row generated, through its first stop token (what follows is padding): (total, per row)."""
    counts = []
    for row in sequences[:, prompt_width:].tolist():
        stop = next((i for i, token in enumerate(row) if token in stop_ids), None)
        counts.append(len(row) if stop is None else stop + 1)
    return sum(counts), counts


def _stop_ids(target) -> set[int]:
    eos = target.generation_config.eos_token_id
    return set(eos if isinstance(eos, (list, tuple)) else [eos]) if eos is not None else set()


def run_batch_curve(target, tokenizer, prompts: list[torch.Tensor], methods: list[tuple[str, dict]],
                    batch_sizes: list[int], repeats: int, progress=None) -> dict:
    """{method: {batch size: {"tokens_per_second", "tokens", "seconds", "tau"}}} over the same prompts.

    At each batch size the methods take turns within every repeat: each batch is decoded by every method back to
    back, in an order that turns by one each repeat, so a change of load on a shared machine reaches them all alike
    and each ratio to stock is measured side by side.
    """
    largest = max(batch_sizes)
    if len(prompts) < largest:
        raise SystemExit(f"--batch-sizes up to {largest} needs {largest} prompts, got {len(prompts)}: raise "
                         "--num-prompts (it counts per category) or drop the largest batch size.")
    prompts = prompts[:largest]
    pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
    stop_ids = _stop_ids(target)

    def decode(ids, mask, kwargs) -> tuple[float, int, int, int]:
        """(seconds, generated tokens, rounds, tokens committed by rounds) of one batch."""
        start = time.perf_counter()
        out = target.generate(ids, attention_mask=mask, pad_token_id=pad, return_dict_in_generate=True, **kwargs)
        seconds = time.perf_counter() - start
        stats = getattr(out, "speculative_stats", None)
        rows = stats.row_acceptance_lengths if stats is not None else []  # tau pooled over every row's rounds
        return (seconds, generated_tokens(out.sequences, ids.shape[1], stop_ids)[0], sum(map(len, rows)),
                sum(map(sum, rows)))

    curve: dict[str, dict[int, dict]] = {name: {} for name, _ in methods}
    for size in batch_sizes:
        batches = [left_padded(prompts[i: i + size], pad) for i in range(0, largest, size)]
        for _, kwargs in methods:  # warm-up (the width policy measures its costs in its first call)
            target.generate(batches[0][0], attention_mask=batches[0][1], pad_token_id=pad, **kwargs)
        passes = {name: [] for name, _ in methods}  # per repeat: (seconds, tokens, rounds, committed) summed
        for repeat in range(repeats):
            turn = methods[repeat % len(methods):] + methods[:repeat % len(methods)]
            totals = {name: (0.0, 0, 0, 0) for name, _ in methods}
            for ids, mask in batches:
                for name, kwargs in turn:
                    totals[name] = tuple(a + b for a, b in zip(totals[name], decode(ids, mask, kwargs)))
            for name, total in totals.items():
                passes[name].append(total)
        for name, _ in methods:
            seconds = statistics.median(p[0] for p in passes[name])
            _, tokens, rounds, committed = passes[name][-1]
            curve[name][size] = {"tokens_per_second": tokens / seconds, "tokens": tokens, "seconds": seconds,
                                 "tau": committed / rounds if rounds else None}
            if progress is not None:
                progress.update(1)
    return curve


def curve_table(curve: dict, batch_sizes: list[int]) -> str:
    """Markdown: tok/s per method and batch size, with the ratio to the method's batch 1 and to stock generate."""
    from ..reports import markdown_table

    baseline = curve.get("autoregressive", {})
    rows = []
    for name, points in curve.items():
        for size in batch_sizes:
            point = points[size]
            versus_one = point["tokens_per_second"] / points[batch_sizes[0]]["tokens_per_second"]
            versus_stock = point["tokens_per_second"] / baseline[size]["tokens_per_second"] if baseline else None
            rows.append([name, str(size), f"{point['tokens_per_second']:.1f}", f"{versus_one:.2f}x",
                         f"{versus_stock:.2f}x" if versus_stock else "-",
                         f"{point['tau']:.2f}" if point["tau"] else "-"])
    return markdown_table(rows, ["method", "batch", "tok/s (prefill included)", f"vs batch {batch_sizes[0]}",
                                 "vs stock generate", "tau"])


def plot_curve(curve: dict, batch_sizes: list[int], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in curve.items():
        ax.plot(batch_sizes, [points[s]["tokens_per_second"] for s in batch_sizes], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes, [str(s) for s in batch_sizes])
    ax.set_xlabel("batch size (prompts per generate call)")
    ax.set_ylabel("generated tokens / s (prefill included)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

