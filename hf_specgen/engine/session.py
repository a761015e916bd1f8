"""The committed sequence and everything derived from it that every round needs.

Slots index the sequence buffer (prompt + generated), and the same index addresses the target's and the
drafter's KV caches. Masks are built from slot numbers, so every step has a fixed shape: queries at slots
``start .. start+W-1`` against the whole pre-allocated cache, with unwritten or rolled-back slots hidden.
"""

from __future__ import annotations

import torch


class DecodingSession:
    """Token buffer, validity of each slot (prompt padding), RoPE positions, and mask builders.

    input_ids:      [1, P] prompt
    attention_mask: [1, P] 1 = real token, 0 = padding (stock generate's convention), or None
    capacity:       cache slots to allocate (>= P + max_new_tokens + W)
    width:          W, tokens per verify
    """

    def __init__(self, input_ids, attention_mask, capacity: int, width: int, mask_dtype: torch.dtype):
        device = input_ids.device
        prompt_len = input_ids.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        self.device = device
        self.prompt_len = prompt_len
        self.capacity = capacity
        self.width = width
        self.tokens = torch.zeros((1, capacity), dtype=torch.long, device=device)
        self.tokens[:, :prompt_len] = input_ids
        self.length = prompt_len  # committed tokens, prompt included
        # Padding slots are never attended to; generated slots always are.
        self.slot_ok = torch.ones((1, capacity), dtype=torch.bool, device=device)
        self.slot_ok[:, :prompt_len] = attention_mask.bool()
        # Positions as stock generate computes them: cumsum of the mask over the prompt, then +1 per new token.
        prompt_positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # [1, P]
        valid = int(attention_mask.sum())
        self.positions = torch.arange(capacity, device=device)[None] - prompt_len + valid  # [1, capacity]
        self.positions[:, :prompt_len] = prompt_positions
        self._columns = torch.arange(capacity, device=device)  # [K]
        self._blocked = torch.finfo(mask_dtype).min
        self.mask_dtype = mask_dtype

    # ---------------------------------------------------------------- tokens
    @property
    def last_slot(self) -> int:
        """Slot of the last committed token: the first row of the next verify."""
        return self.length - 1

    def committed(self) -> torch.Tensor:
        return self.tokens[:, : self.length]  # [1, L]

    def append(self, new_tokens: torch.Tensor) -> None:
        n = new_tokens.shape[-1]
        self.tokens[0, self.length : self.length + n] = new_tokens
        self.length += n

    # ---------------------------------------------------------------- masks (additive float, [1, 1, Q, K])
    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        zeros = torch.zeros((), dtype=self.mask_dtype, device=self.device)
        return torch.where(allowed, zeros, self._blocked)[None, None]

    def context_allowed(self, start: int) -> torch.Tensor:
        """[capacity] bool: the valid committed slots before ``start``."""
        return (self._columns < start) & self.slot_ok[0]

    def mask_from(self, allowed: torch.Tensor) -> torch.Tensor:
        """[Q, capacity] bool (True = may attend) -> [1, 1, Q, capacity] additive float mask."""
        return self._additive(allowed)

    def prefill_mask(self) -> torch.Tensor:
        """Causal mask for the prompt rows against the whole cache: [1, 1, P, capacity]."""
        rows = torch.arange(self.prompt_len, device=self.device)[:, None]
        return self._additive((self._columns[None] <= rows) & self.slot_ok)

    def causal_mask(self, first_slot: int, n_rows: int) -> torch.Tensor:
        """Row i (slot first_slot+i) sees every valid slot <= first_slot+i: [1, 1, n_rows, capacity]. A verify uses
        it with the block's rows; a draft step with its own."""
        rows = torch.arange(first_slot, first_slot + n_rows, device=self.device)[:, None]
        return self._additive((self._columns[None] <= rows) & self.slot_ok)

    def tree_mask(self, start: int, ancestors: torch.Tensor) -> torch.Tensor:
        """Tree verify, nodes at slots start..start+N-1: each sees the valid committed slots and its ancestors
        (ancestors [N, N] bool, self included): [1, 1, N, capacity]."""
        n = ancestors.shape[0]
        allowed = self.context_allowed(start).expand(n, -1).clone()  # [N, capacity]
        allowed[:, start: start + n] = ancestors
        return self._additive(allowed)

    def block_mask(self, start: int, width: int | None = None) -> torch.Tensor:
        """Drafter mask, keys = [cache ; block]: cached context slots < start, and the whole block
        (bidirectional): [1, 1, W, capacity + W] (W = ``width``, default the session's)."""
        width = width or self.width
        context_ok = self.context_allowed(start).expand(width, -1)  # [W, capacity]
        block_ok = torch.ones((width, width), dtype=torch.bool, device=self.device)
        return self._additive(torch.cat([context_ok, block_ok], dim=1))
