"""A padded batch's prefill without its padding: rows of like length prefilled together (CPUs).

Stock ``generate`` prefills a batch as one forward over B x P tokens, P the longest prompt: every shorter row's left
padding is computed and thrown away. On a CPU a forward's time grows with its tokens, so a batch of chat prompts of
mixed lengths spends much of its prefill on padding; the prefill is half a batch-8 call of 48 new tokens on the real
target (bench prompts of 39-245 tokens: 53% of the padded batch is padding at batch 8, 57% at 16). Here the rows are
sorted by length and cut into groups, each prefilled as one forward padded to its own longest row, in a transformers
``DynamicCache`` (the model builds its causal, padding and window masks itself, as stock's prefill does); each group's
K/V then go to its rows' slots of the engine's static cache, where a padded prefill would have written them.

Where to cut: a forward costs about ``overhead + tokens`` in units of one token's share (a CPU's time is linear in the
tokens of a prompt-sized forward, plus a fixed cost of the Python and the kernels of every layer). The overhead is
measured once per (device, dtype) on the target (two batch-1 forwards of 4 and 68 tokens, the fastest of two each,
``measure_verify_costs``) and
kept in its cost model, which ``save_costs`` / ``load_costs`` carry. The grouping that costs least under that model
comes from a dynamic program over the sorted lengths. Attention grows faster than linearly with a row's length, so the
model understates what splitting saves. GPUs keep the padded forward: until a GPU is compute-bound its forward's time
grows little with the tokens, so more forwards would cost more than the padding (not measured here).
"""

from __future__ import annotations

import math
import weakref

import torch
from transformers import DynamicCache

from .width_policy import costs_of, measure_verify_costs

PROBE_TOKENS = (4, 68)  # the two batch-1 forwards whose times give a forward's fixed cost in tokens
MIN_SAVING = 0.9  # prefill in groups only where the model says it costs at most this share of the padded forward
# targets a group's cache did not hold whole (layers that share another's K/V): their batches prefill padded
_PADDED_ONLY: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def prefills_in_groups(target) -> bool:
    """False once a grouped prefill of ``target`` found a layer without K/V of its own."""
    return target not in _PADDED_ONLY


def overhead_key(device: torch.device, dtype: torch.dtype) -> str:
    """The cost model's key for the prefill probe: ``verify`` holds {tokens: seconds} of batch-1 forwards."""
    return f"{device.type}|{str(dtype).removeprefix('torch.')}|prefill"


def forward_overhead_tokens(target, device: torch.device, dtype: torch.dtype, cache_key: str,
                            logits_kwargs: dict) -> float:
    """A forward's fixed cost in tokens of its variable one: measured on first use, then kept with the target's
    costs."""
    table = costs_of(target).table(overhead_key(device, dtype))
    short, long = PROBE_TOKENS
    if not all(n in table.verify for n in PROBE_TOKENS):
        def forward(n: int) -> None:
            ids = torch.zeros((1, n), dtype=torch.long, device=device)  # (what the tokens are costs nothing)
            target(input_ids=ids, position_ids=torch.arange(n, device=device)[None],
                   **{cache_key: DynamicCache()}, use_cache=True, **logits_kwargs)

        # one untimed forward of each (allocations), then the fastest of two timed ones
        table.verify.update(measure_verify_costs(forward, PROBE_TOKENS, device, budget=0.0, min_passes=2))
    per_token = (table.verify[long] - table.verify[short]) / (long - short)
    if per_token <= 0:  # too fast to tell apart (a tiny model): one forward for the batch
        return float("inf")
    return max(0.0, table.verify[short] - short * per_token) / per_token


def set_forward_overhead(target, tokens: float, device=None, dtype=None) -> None:
    """Record for ``target`` (its own device and dtype unless given) a forward's fixed cost of ``tokens`` tokens, in
    place of a measurement: 0 prefills every row of like length alone, ``inf`` keeps the padded forward (the
    architecture walk and the tests choose either way)."""
    device = device if device is not None else target.device
    dtype = dtype if dtype is not None else target.get_input_embeddings().weight.dtype  # (the engine's key)
    costs_of(target).table(overhead_key(device, dtype)).verify.update(
        {n: 1e-3 if math.isinf(tokens) else (n + tokens) * 1e-4 for n in PROBE_TOKENS})  # (inf: no cost per token)


def prefill_groups(lengths: list[int], overhead_tokens: float) -> list[list[int]]:
    """The batch rows (indices into ``lengths``, each row's real tokens) cut into groups that cost least as
    ``sum(overhead + rows * longest row)``; one group, the whole batch, where that is within MIN_SAVING of the
    padded forward. Longest rows first."""
    batch = len(lengths)
    order = sorted(range(batch), key=lambda b: -lengths[b])
    longest_first = [lengths[b] for b in order]
    padded = overhead_tokens + batch * longest_first[0]
    # best[i]: the least cost of the i longest rows; a group of sorted rows j..i-1 is padded to row j's length
    best, cut = [0.0] + [float("inf")] * batch, [0] * (batch + 1)
    for i in range(1, batch + 1):
        for j in range(i):
            cost = best[j] + overhead_tokens + (i - j) * longest_first[j]
            if cost < best[i]:
                best[i], cut[i] = cost, j
    if not math.isfinite(overhead_tokens) or best[batch] > MIN_SAVING * padded:
        return [list(range(batch))]
    groups, i = [], batch
    while i > 0:
        groups.append(order[cut[i]:i])
        i = cut[i]
    return groups[::-1]


def prefill_in_groups(target, groups: list[list[int]], lengths: list[int], input_ids: torch.Tensor,
                      attention_mask: torch.Tensor, positions: torch.Tensor, cache, tap, cache_key: str,
                      logits_kwargs: dict):
    """Prefill each group of rows as one forward padded to its longest row and write its K/V to those rows' slots
    of ``cache`` (the engine's per-row static cache, whose every row then holds P slots).

    lengths: each row's real tokens; input_ids / attention_mask [B, P] (left padding); positions [B, P] (the
    session's RoPE positions)
    returns the last prompt token's logits [B, 1, V] and the taps' features [B, P, F] (zeros at the slots of a
    group's padding: no mask lets anything attend them) or None without taps; None where a layer's K/V did not come
    back whole (the caller prefills the padded batch instead, as it will for this target from now on)."""
    batch, prompt_len = input_ids.shape
    last_logits, features = None, None
    for rows in groups:
        longest = max(lengths[b] for b in rows)
        first_slot = prompt_len - longest  # the group's forward covers slots first_slot .. P-1 of its rows
        index = torch.tensor(rows, dtype=torch.long, device=input_ids.device)
        own = DynamicCache()
        out = target(input_ids=input_ids[index, first_slot:], attention_mask=attention_mask[index, first_slot:],
                     position_ids=positions[index, first_slot:prompt_len], **{cache_key: own}, use_cache=True,
                     **logits_kwargs)
        if len(own.layers) != len(cache.layers):
            _PADDED_ONLY.add(target)
            return None
        for mine, layer in zip(own.layers, cache.layers):
            keys, values = getattr(mine, "keys", None), getattr(mine, "values", None)
            if keys is None or keys.dim() != 4 or keys.shape[2] != longest:
                _PADDED_ONLY.add(target)
                return None  # a layer that shares another's K/V, or keeps a window: not a plain full-attention layer
            if not layer.is_initialized:  # the static buffers take the whole batch's shape
                layer.lazy_initialization(keys[:1].expand(batch, *keys.shape[1:]),
                                          values[:1].expand(batch, *values.shape[1:]))
            layer.keys[index, :, first_slot:prompt_len] = keys
            layer.values[index, :, first_slot:prompt_len] = values
        logits = out.logits[:, -1:]  # [g, 1, V]
        if last_logits is None:
            last_logits = logits.new_empty((batch, 1, logits.shape[-1]))
        last_logits[index] = logits
        if tap is not None:
            tapped_rows = tap.features()  # [g, longest, F]
            if features is None:
                features = tapped_rows.new_zeros((batch, prompt_len, tapped_rows.shape[-1]))
            features[index, first_slot:] = tapped_rows
    return last_logits, features
