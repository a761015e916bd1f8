"""KV caches for speculative decoding: allocated once per call, rolled back in O(1).

transformers' ``StaticLayer`` writes new K/V at ``cumulative_length`` and never reallocates, which is what
torch.compile and CUDA graphs need. Rolling back after a partly rejected verify is just moving that length
back: the stale rows past it are hidden by our masks and overwritten by the next write. The length's
attribute name is internal to transformers, so it is touched only here (and tested for 5.17 and later).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer


def static_cache(max_cache_len: int, num_layers: int) -> Cache:
    """A cache of ``num_layers`` full-attention static layers.

    Built from plain ``StaticLayer``s rather than ``StaticCache(config)``: a config with sliding-window
    layers would get ring buffers, which cannot be rolled back; callers check the window is long enough.
    """
    return Cache(layers=[StaticLayer(max_cache_len=max_cache_len) for _ in range(num_layers)])


def _length_tensors(cache: Cache) -> list[torch.Tensor]:
    lengths = []
    for layer in cache.layers:
        length = getattr(layer, "cumulative_length", None)
        if not isinstance(length, torch.Tensor):
            raise RuntimeError(
                "hf_specgen could not find the static cache length (`StaticLayer.cumulative_length`) in this "
                "transformers release; install a supported version: pip install 'transformers>=5.17,<6'."
            )
        lengths.append(length)
    return lengths


def set_cache_length(cache: Cache, length: int | torch.Tensor) -> None:
    """Move every layer's write position to ``length`` in place (tensor addresses unchanged)."""
    for layer_length in _length_tensors(cache):
        if isinstance(length, torch.Tensor):
            layer_length.copy_(length)
        else:
            layer_length.fill_(length)


def cache_tensor_addresses(cache: Cache) -> list[int]:
    """data_ptr of every K and V buffer: used by tests to prove rollback never reallocates."""
    return [t.data_ptr() for layer in cache.layers if layer.is_initialized for t in (layer.keys, layer.values)]
