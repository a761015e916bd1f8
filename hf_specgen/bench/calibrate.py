"""``specgen calibrate``: grid-search WhiFlash-Entropy's threshold per prompt category, maximizing decode speed.

For every category, every candidate threshold decodes the category's held-out prompts once (after one warm-up);
the threshold with the highest decode tokens/s wins and is written into the bundle's config
(``entropy_thresholds``), so ``bundle.set_category(name)`` picks it up after loading.
"""

from __future__ import annotations

from .harness import run_method


def best_threshold(throughput: dict[float, float]) -> float:
    """The threshold with the highest throughput (ties: the smaller threshold, i.e. more EAGLE-3 rounds)."""
    if not throughput:
        raise ValueError("no threshold was measured")
    return min(throughput, key=lambda t: (-throughput[t], t))


def calibrate_entropy(target, bundle, prompts_by_category: dict[str, list], thresholds: list[float],
                      max_new_tokens: int, progress=None) -> dict:
    """Returns {category: {"best": threshold, "tokens_per_second": {threshold: tok/s}}}."""
    results = {}
    saved_router, saved_threshold = bundle.router, bundle.entropy_threshold
    bundle.router = "entropy"
    try:
        for category, prompts in prompts_by_category.items():
            table = {}
            for threshold in thresholds:
                bundle.entropy_threshold = threshold
                kwargs = dict(assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=max_new_tokens,
                              do_sample=False)
                table[threshold] = run_method(target, prompts, kwargs, 1, f"{category} {threshold}", progress).tokens_per_second
            results[category] = {"best": best_threshold(table), "tokens_per_second": table}
    finally:
        bundle.router, bundle.entropy_threshold = saved_router, saved_threshold
    return results
