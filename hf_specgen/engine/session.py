"""The committed sequences of a batch and everything derived from them that every round needs.

Each batch row b has its own sequence in a [B, capacity] token buffer: the (left-padded) prompt at slots 0..P-1,
then its generated tokens. Slot s of row b addresses the same row of the target's and the drafters' KV caches
(``cache.RowStaticLayer``: each row writes at its own slots). Rows advance by different amounts each round, so
every per-round quantity is a [B] tensor on the device (``lengths``, ``last_slots``) and the fixed-shape steps
gather positions and build masks from it: queries at slots start_b .. start_b+W-1 of row b against the whole
pre-allocated cache (eager steps: its used prefix, see ``show``), with unwritten, rolled-back and padding slots
hidden.

The host keeps a mirror of the lengths (``host_lengths``), refreshed from the one small transfer the loop makes per
round; the batch-1 helpers (``last_slot``, ``committed``) read it, so they cost no device round trip.
"""

from __future__ import annotations

import torch

from .cache import keep_cache_rows
from .graphs import VISIBLE_BUCKET


class DecodingSession:
    """Token buffer, validity of each slot (prompt padding), RoPE positions, and mask builders.

    input_ids:      [B, P] prompts, left-padded
    attention_mask: [B, P] 1 = real token, 0 = padding (stock generate's convention), or None
    capacity:       cache slots to allocate (>= P + max_new_tokens + W)
    width:          W, tokens per verify
    target_layout:  the target's windowed attention (``support.attention_layout``): {layer type: (kind, size)} and
                    whether it takes one mask per layer type; None when every layer attends the whole sequence
    """

    def __init__(self, input_ids, attention_mask, capacity: int, width: int, mask_dtype: torch.dtype,
                 target_layout: dict | None = None):
        device = input_ids.device
        batch, prompt_len = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        self.device = device
        self.batch_size = batch
        self.prompt_len = prompt_len
        self.capacity = capacity
        self.width = width
        self.tokens = torch.zeros((batch, capacity), dtype=torch.long, device=device)
        self.tokens[:, :prompt_len] = input_ids
        self.lengths = torch.full((batch,), prompt_len, dtype=torch.long, device=device)  # committed, prompt included
        self.host_lengths = [prompt_len] * batch
        # Padding slots are never attended to; generated slots always are.
        self.slot_ok = torch.ones((batch, capacity), dtype=torch.bool, device=device)
        self.slot_ok[:, :prompt_len] = attention_mask.bool()
        # Positions as stock generate computes them: cumsum of the mask over the prompt, then +1 per new token.
        prompt_positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P]
        valid = attention_mask.long().sum(-1, keepdim=True)  # [B, 1]
        self.positions = torch.arange(capacity, device=device)[None] - prompt_len + valid  # [B, capacity]
        self.positions[:, :prompt_len] = prompt_positions
        self._columns = torch.arange(capacity, device=device)  # [capacity]
        self._blocked = torch.finfo(mask_dtype).min
        self.mask_dtype = mask_dtype
        self.visible = capacity  # K: cache slots a step attends (masks have K columns)
        self._caches = []  # caches whose reads follow ``visible`` (see show)
        self.target_layout = target_layout
        self.left_padding = prompt_len - valid[:, 0]  # [B] (chunked attention counts chunks from the first token)
        self.row_ids = list(range(batch))  # each row's index in the caller's batch (``keep_rows`` drops rows)

    def keep_rows(self, kept: list[int]) -> None:
        """Keep only rows ``kept`` (current row numbers, in their new order) of the session and of every attached
        cache: an eager call drops the rows that are done, so later rounds compute only the unfinished ones (the loop
        keeps the finished rows' tokens). ``row_ids`` maps each row kept to its place in the caller's batch."""
        index = torch.tensor(kept, dtype=torch.long, device=self.device)
        for name in ("tokens", "lengths", "slot_ok", "positions", "left_padding"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        self.host_lengths = [self.host_lengths[b] for b in kept]
        self.row_ids = [self.row_ids[b] for b in kept]
        self.batch_size = len(kept)
        for cache in self._caches:
            keep_cache_rows(cache, index)

    # ---------------------------------------------------------------- the attended prefix (eager steps)
    def attach(self, cache) -> None:
        """Have ``cache``'s reads follow ``show``: a target's or drafter's cache indexed by this session's slots."""
        self._caches.append(cache)
        self._apply_visible(cache)

    def show(self, needed_slots: int) -> None:
        """Eager steps attend slots [0, K) only, K = ``needed_slots`` rounded up to VISIBLE_BUCKET (at most the
        capacity): masks get K columns and attached caches return their first K slots. Compiled steps never call
        this (their shapes stay fixed at the capacity). Callers pass every slot the round may write."""
        self.visible = min(self.capacity, -(-needed_slots // VISIBLE_BUCKET) * VISIBLE_BUCKET)
        for cache in self._caches:
            self._apply_visible(cache)

    def show_exactly(self, slots: int) -> None:
        """Eager steps attend exactly slots [0, ``slots``): the keys a step that passes no mask of ours attends
        (SpeculativeDecoder's exact single-row steps: ``slots`` is every key the step's forward will have written)."""
        self.visible = min(self.capacity, slots)
        for cache in self._caches:
            self._apply_visible(cache)

    def _apply_visible(self, cache) -> None:
        visible = None if self.visible == self.capacity else self.visible
        for layer in cache.layers:
            layer.visible = visible

    # ---------------------------------------------------------------- tokens
    @property
    def last_slots(self) -> torch.Tensor:
        """[B] slot of each row's last committed token: the first row of its next verify."""
        return self.lengths - 1

    @property
    def last_slot(self) -> int:
        """Batch 1: the slot of the last committed token, from the host mirror (no device round trip)."""
        self._single_row("last_slot")
        return self.host_lengths[0] - 1

    def committed(self) -> torch.Tensor:
        """Batch 1: [1, L] tokens committed so far."""
        self._single_row("committed()")
        return self.tokens[:, : self.host_lengths[0]]

    def row(self, b: int) -> torch.Tensor:
        """[1, L_b] tokens committed in row b (its left padding included, as stock generate's input_ids have it)."""
        return self.tokens[b: b + 1, : self.host_lengths[b]]

    def _single_row(self, what: str) -> None:
        if self.batch_size != 1:
            raise RuntimeError(f"DecodingSession.{what} is defined for batch 1 only; use the [B] tensors "
                               "(last_slots, lengths) for batches")

    def gather(self, table: torch.Tensor, first_slots: torch.Tensor, n: int) -> torch.Tensor:
        """[B, capacity] table -> [B, n]: row b's entries at slots first_slots[b] .. first_slots[b]+n-1 (slots past the
        end read the last one: padding rows of a ragged block, never attended)."""
        slots = first_slots[:, None] + torch.arange(n, device=self.device)
        return table.gather(1, slots.clamp(max=self.capacity - 1))

    def token_block(self, first_slots: torch.Tensor, n: int) -> torch.Tensor:
        return self.gather(self.tokens, first_slots, n)  # [B, n]

    def position_block(self, first_slots: torch.Tensor, n: int) -> torch.Tensor:
        return self.gather(self.positions, first_slots, n)  # [B, n]

    def append_on_device(self, new_tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Row b appends new_tokens[b, :counts[b]]. new_tokens [B, n]; counts [B] on the device. The host mirror of
        the lengths follows with ``advance_host_lengths`` once the caller has read the counts, so it can compute on
        the new tokens (the next round's lookup) before its one host read."""
        n = new_tokens.shape[1]
        offsets = torch.arange(n, device=self.device)
        slots = (self.lengths[:, None] + offsets).clamp(max=self.capacity - 1)  # [B, n]
        old = self.tokens.gather(1, slots)
        self.tokens.scatter_(1, slots, torch.where(offsets < counts[:, None], new_tokens, old))
        self.lengths += counts

    def advance_host_lengths(self, host_counts: list[int]) -> None:
        """The host mirror of ``append_on_device``'s lengths: ``host_counts`` are its counts, read on the host."""
        self.host_lengths = [length + c for length, c in zip(self.host_lengths, host_counts)]

    # ---------------------------------------------------------------- masks (additive float, [B, 1, Q, K])
    def mask_from(self, allowed: torch.Tensor) -> torch.Tensor:
        """[B, Q, K] bool (True = may attend) -> [B, 1, Q, K] additive float mask."""
        zeros = torch.zeros((), dtype=self.mask_dtype, device=self.device)
        return torch.where(allowed, zeros, self._blocked)[:, None]

    def _as_slots(self, first_slots) -> torch.Tensor:
        if isinstance(first_slots, int):  # batch-1 callers pass a host int
            return torch.full((self.batch_size,), first_slots, dtype=torch.long, device=self.device)
        return first_slots

    def context_allowed(self, start) -> torch.Tensor:
        """[B, K] bool: the valid committed slots before ``start`` (an int, or [B] per row)."""
        columns = self._columns[: self.visible]
        return (columns[None] < self._as_slots(start)[:, None]) & self.slot_ok[:, : self.visible]

    def prefill_mask(self):
        """The target's mask for the prompt rows: causal, and windowed as the target's layers are."""
        return self.verify_mask(0, self.prompt_len)

    def _causal_allowed(self, first_slot, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """([B, n, K] bool, query slots [B, n]): query i of row b, at slot first_slot[b]+i, may see every valid slot up
        to its own."""
        query_slots = self._as_slots(first_slot)[:, None] + torch.arange(n_rows, device=self.device)  # [B, n]
        columns, slot_ok = self._columns[: self.visible], self.slot_ok[:, : self.visible]
        return (columns[None, None] <= query_slots[:, :, None]) & slot_ok[:, None], query_slots

    def causal_mask(self, first_slot, n_rows: int) -> torch.Tensor:
        """A drafter's causal mask: query i of row b (at slot first_slot[b]+i) sees every valid slot <=
        first_slot[b]+i: [B, 1, n, K]. ``first_slot``: an int (every row) or [B]."""
        return self.mask_from(self._causal_allowed(first_slot, n_rows)[0])

    def verify_mask(self, first_slot, n_rows: int):
        """The target's mask for a block of rows from ``first_slot``: causal, and windowed as its layers are."""
        return self.target_mask(*self._causal_allowed(first_slot, n_rows))

    def tree_mask(self, starts: torch.Tensor, ancestors: torch.Tensor, depths: torch.Tensor):
        """Tree verify, row b's nodes at slots starts[b]..starts[b]+N-1: each node sees the valid committed slots and
        its ancestors (ancestors [B, N, N] bool, self included); windows count from the node's place in the
        sequence, starts[b] + depth."""
        return self.target_mask(self.context_and_region(starts, ancestors), starts[:, None] + depths)

    def target_mask(self, allowed: torch.Tensor, query_index: torch.Tensor):
        """[B, Q, K] allowed slots -> the target's attention_mask: one [B, 1, Q, K] tensor, or, for a target whose
        layers differ (full / sliding / chunked), a dict of one per layer type, which transformers' models take in
        place of building their own. Windows follow transformers' masks: a sliding window of w keeps the keys with
        query - key < w; a chunk of c keeps the keys in the query's chunk, counted from each row's first token.
        query_index: [B, Q] each query's slot in the sequence."""
        if self.target_layout is None:
            return self.mask_from(allowed)
        columns = self._columns[: self.visible][None, None]  # [1, 1, K]
        query = query_index[:, :, None]  # [B, Q, 1]
        masks = {}
        for layer_type, (kind, size) in self.target_layout["windows"].items():
            if kind == "recurrent":  # recurrent layers take no mask once no new token is padding (support.layer_masks)
                masks[layer_type] = None
                continue
            if kind == "sliding":
                ok = allowed & (query - columns < size)
            elif kind == "chunked":
                pad = self.left_padding[:, None, None]
                ok = allowed & ((columns - pad).div(size, rounding_mode="floor") == (query - pad) // size)
            else:
                ok = allowed
            masks[layer_type] = self.mask_from(ok)
        return masks if self.target_layout["per_layer_type"] else next(m for m in masks.values() if m is not None)

    def context_and_region(self, starts: torch.Tensor, region_allowed: torch.Tensor,
                           region_starts: torch.Tensor | None = None) -> torch.Tensor:
        """[B, Q, K] bool: every query sees the valid committed slots < starts[b], and, among the R slots of its
        region (from region_starts[b], default starts[b]: a tree's rows, a DFlash block), those ``region_allowed``
        [B, Q, R] grants it. Fixed shapes: the region is placed per row by a gather, not by slicing at a host
        offset."""
        batch, queries, region = region_allowed.shape
        region_starts = starts if region_starts is None else region_starts
        offset = self._columns[: self.visible][None] - region_starts[:, None]  # [B, K] slot - region start
        inside = (offset >= 0) & (offset < region)
        padded = torch.cat([region_allowed, region_allowed.new_zeros((batch, queries, 1))], dim=2)  # [B, Q, R+1]
        index = torch.where(inside, offset, region)[:, None].expand(-1, queries, -1)  # outside -> the False column
        return self.context_allowed(starts)[:, None] | padded.gather(2, index)

    def block_mask(self, starts: torch.Tensor, block_slots: torch.Tensor, width: int) -> torch.Tensor:
        """DFlash drafting with the block written into the drafter's cache at slots block_slots[b].. (W rows):
        every block query sees the valid committed slots < starts[b] and the whole block (bidirectional):
        [B, 1, W, K]."""
        whole_block = torch.ones((self.batch_size, width, width), dtype=torch.bool, device=self.device)
        return self.mask_from(self.context_and_region(starts, whole_block, block_slots))
