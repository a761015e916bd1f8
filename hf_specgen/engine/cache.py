"""KV caches for speculative decoding: allocated once per call, rolled back in O(1), one write position per row.

transformers' ``StaticLayer`` pre-allocates [B, heads, capacity, head_dim] and never reallocates, which is what
torch.compile and CUDA graphs need, but it writes every batch row at one shared position. In a speculative batch
each row accepts a different number of tokens per round, so ``RowStaticLayer`` keeps a [B] tensor of write
positions: row b's new K/V go to slots row_lengths[b] .. row_lengths[b]+T-1 (an indexed write of fixed shape). Rolling
back after a partly rejected verify is moving those positions back: the stale rows past them are hidden by our
masks and overwritten by the next write. Rows that would land past the end (the padding after a ragged catch-up,
``drafters/whiflash.py``, which no mask ever shows) are written into the last slot instead of failing.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, LinearAttentionLayer, StaticLayer


def write_slots(buffer: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor,
                batch_rows: torch.Tensor | None = None) -> None:
    """``buffer[b, :, slots[b, t]] = rows[b, :, t]`` in place. buffer [B, heads, S, head_dim]; slots [B, T];
    rows [B, heads, T, head_dim].

    An indexed put rather than ``scatter_``: on a CPU, torch's bf16 ``scatter_`` costs time in proportion to the
    whole buffer (about 1 ms per write into a 2048-slot cache, against 7 us for this put at any size), which made
    every bf16 step slower the longer its cache. ``batch_rows``: ``arange(B)[:, None]``, when the caller keeps one."""
    if batch_rows is None:
        batch_rows = torch.arange(buffer.shape[0], device=buffer.device)[:, None]  # [B, 1]
    buffer.transpose(1, 2).index_put_((batch_rows, slots), rows.transpose(1, 2))


class RowStaticLayer(StaticLayer):
    """A full-attention static layer whose batch rows each write at their own position (``row_lengths`` [B])."""

    def __init__(self, max_cache_len: int, batch_size: int = 1, device: torch.device | str = "cpu",
                 compileable: bool = True):
        super().__init__(max_cache_len=max_cache_len)
        self._compileable = compileable  # (is_compileable)
        self.row_lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._batch_rows = torch.arange(batch_size, device=device)[:, None]  # [B, 1], the rows of every write
        self._offsets = torch.arange(max_cache_len, device=device)  # a write of T rows goes to length + [0, T)
        torch._dynamo.mark_static_address(self._batch_rows)
        torch._dynamo.mark_static_address(self._offsets)
        torch._dynamo.mark_static_address(self.row_lengths)  # updated in place inside compiled steps
        self.visible = None  # eager steps: attend slots [0, visible) only (None: the whole cache)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # key_states / value_states: [B, heads, T, head_dim], written at each row's own slots
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        batch, heads, new, _ = key_states.shape
        if batch != self.row_lengths.shape[0]:
            raise RuntimeError(f"cache built for {self.row_lengths.shape[0]} rows got a batch of {batch}")
        # [B, T], clamped: see the module docstring. Every layer of every step runs this (about 48 us per layer
        # inside a tiny model's forward on a 2-core CPU, where transformers' DynamicCache appends in about 10 us),
        # so it makes no tensor it need not: the offsets are made once.
        offsets = self._offsets[:new] if new <= self.max_cache_len else torch.arange(new, device=key_states.device)
        slots = (self.row_lengths[:, None] + offsets).clamp_(max=self.max_cache_len - 1)
        if batch == 1:  # one row: a copy along the slot axis (one index tensor instead of the batched put's two)
            self.keys[0].index_copy_(1, slots[0], key_states[0])
            self.values[0].index_copy_(1, slots[0], value_states[0])
        else:
            write_slots(self.keys, slots, key_states, self._batch_rows)
            write_slots(self.values, slots, value_states, self._batch_rows)
        self.row_lengths.add_(new)
        if self.visible is not None:
            return self.keys[:, :, : self.visible], self.values[:, :, : self.visible]
        return self.keys, self.values

    @property
    def is_compileable(self) -> bool:
        """transformers materializes a mask for every one-token forward over a compileable cache (one graph shape);
        an eager target's cache is not, so a plain step that passes no mask of ours runs as stock generate's does
        (SpeculativeDecoder's exact single-row steps)."""
        return self._compileable

    def get_seq_length(self) -> int:
        return int(self.row_lengths.max()) if self.is_initialized else 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """The keys a forward attends where transformers builds the mask itself (a step that passes none): the slots
        ``update`` returns, [0, visible), as a DynamicCache holding exactly those keys reports them."""
        if self.visible is not None:
            return self.visible, 0
        return super().get_mask_sizes(query_length)


class RowStaticHybridLayer(LinearAttentionLayer, RowStaticLayer):
    """A layer that runs attention and a recurrent mixer side by side (Falcon-H1, Zaya; transformers' kind
    "hybrid"): K/V with per-row write positions, and conv / recurrent states that :func:`snapshot_states` and
    :func:`restore_states` roll back like a linear-attention layer's (transformers' static counterpart is
    ``LinearAttentionAndStaticFullAttentionLayer``, which writes every row at one position)."""

    def __init__(self, max_cache_len: int, batch_size: int = 1, device: torch.device | str = "cpu",
                 number_of_states: int = 1):
        RowStaticLayer.__init__(self, max_cache_len, batch_size, device)
        LinearAttentionLayer.__init__(self, number_of_states=number_of_states)

    def lazy_initialization(self, *args, **kwargs) -> None:
        if args:  # update(key_states, value_states): the attention half
            RowStaticLayer.lazy_initialization(self, *args)
        else:  # update_conv_state / update_recurrent_state: keyword states
            LinearAttentionLayer.lazy_initialization(self, **kwargs)


def static_cache(max_cache_len: int, num_layers: int, batch_size: int = 1, device: torch.device | str = "cpu",
                 recurrent_layers: list[int] | tuple[int, ...] = (), hybrid_layers: list[int] | tuple[int, ...] = (),
                 states_per_layer: int = 1, compileable: bool = True) -> Cache:
    """A cache of ``num_layers`` full-attention static layers with per-row write positions, except at
    ``recurrent_layers``: transformers' ``LinearAttentionLayer`` there (fixed-shape conv / recurrent states, written
    in place), which :func:`snapshot_states` and :func:`restore_states` roll back; or, at those of them also in
    ``hybrid_layers``, a :class:`RowStaticHybridLayer` (both). ``compileable=False``: an eager target's cache (see
    ``RowStaticLayer``). ``states_per_layer``: the conv / recurrent states
    each of those layers keeps (a config's ``number_of_conv_states``, as transformers' caches read it).

    Built from our own layers rather than ``StaticCache(config)``: a config with sliding-window layers would get
    ring buffers, which cannot be rolled back; here every layer keeps the whole sequence and the masks apply the
    windows (``DecodingSession.target_mask``).
    """
    def layer(i: int):
        if i in hybrid_layers:
            return RowStaticHybridLayer(max_cache_len, batch_size, device, states_per_layer)
        if i in recurrent_layers:
            return LinearAttentionLayer(number_of_states=states_per_layer)
        return RowStaticLayer(max_cache_len, batch_size, device, compileable)

    return Cache(layers=[layer(i) for i in range(num_layers)])


def _state_layers(cache: Cache) -> list[LinearAttentionLayer]:
    return [layer for layer in cache.layers if isinstance(layer, LinearAttentionLayer)]


def _live_states(layer: LinearAttentionLayer) -> list[torch.Tensor]:
    """The layer's conv and recurrent state tensors that exist (lazily created at its first forward)."""
    return [state for states in (layer.conv_states, layer.recurrent_states) for state in states.values()
            if state is not None]


def snapshot_states(cache: Cache) -> list[list[torch.Tensor]]:
    """Copies of every conv and recurrent state of the cache's linear-attention layers (empty without such layers).

    A recurrent state folds every token it has seen into one tensor, so a verify that is partly rejected cannot be
    undone by a length: the engine keeps this copy from before the verify, puts it back and re-feeds the tokens the
    round committed (``SpeculativeDecoder._roll_back_states``). A copy is small (a layer's state does not grow with
    the sequence) and taken once per round.
    """
    return [[state.clone() for state in _live_states(layer)] for layer in _state_layers(cache)]


def restore_states(cache: Cache, saved: list[list[torch.Tensor]]) -> None:
    """Put back, in place (the tensors keep their addresses), the states :func:`snapshot_states` copied."""
    for layer, copies in zip(_state_layers(cache), saved):
        for state, copy in zip(_live_states(layer), copies, strict=True):
            state.copy_(copy)


class CachePool:
    """The static cache of a decoder's last call, handed to its next call of the same shape.

    A compiled decoder lives across calls (kept on the target), and CUDA graphs record the addresses of the cache
    tensors they write: reusing the same tensors lets every later call of that batch size and capacity replay the
    recorded graphs instead of recording new ones. Stale contents need no clearing: each call writes from slot 0 and
    its masks hide every slot it has not written. A call of another shape replaces the kept cache (one at a time:
    caches are big). ``keep=False`` (eager decoders, built per call) allocates every time.
    """

    def __init__(self, keep: bool, compileable: bool = True):
        self.keep = keep
        self.compileable = compileable  # (static_cache)
        self._key, self._cache = None, None

    def get(self, capacity: int, num_layers: int, batch_size: int, device, recurrent_layers=(),
            hybrid_layers=(), states_per_layer: int = 1) -> Cache:
        key = (capacity, num_layers, batch_size, str(device), tuple(recurrent_layers), tuple(hybrid_layers),
               states_per_layer)
        if self.keep and key == self._key:
            set_cache_length(self._cache, 0)
            for layer in _state_layers(self._cache):
                layer.reset()  # the next forward is a prefill: states start from zero
            return self._cache
        cache = static_cache(capacity, num_layers, batch_size, device, recurrent_layers, hybrid_layers,
                             states_per_layer, self.compileable)
        if self.keep:
            self._key, self._cache = key, cache
        return cache


def set_cache_length(cache: Cache, length: int | torch.Tensor) -> None:
    """Move every layer's write position to ``length`` (an int for every row, or [B]) in place."""
    for layer in cache.layers:
        if not isinstance(layer, RowStaticLayer):
            continue  # linear-attention states have no length (see snapshot_states)
        if isinstance(length, torch.Tensor):
            layer.row_lengths.copy_(length)
        else:
            layer.row_lengths.fill_(length)


def cache_tensor_addresses(cache: Cache) -> list[int]:
    """data_ptr of every K and V buffer: used by tests to prove rollback never reallocates."""
    return [t.data_ptr() for layer in cache.layers if isinstance(layer, RowStaticLayer) and layer.is_initialized
            for t in (layer.keys, layer.values)]


def keep_cache_rows(cache: Cache, index: torch.Tensor) -> None:
    """Keep only the batch rows ``index`` ([n] row numbers, in their new order) of every layer, in place: the K/V
    buffers and write positions of the per-row static layers, the conv / recurrent states of the linear-attention
    ones. New tensors (eager decoding only: a compiled step's graphs hold the old addresses)."""
    for layer in cache.layers:
        if isinstance(layer, RowStaticLayer):
            if layer.is_initialized:
                layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
                layer.batch_size = len(index)
            layer.row_lengths = layer.row_lengths.index_select(0, index)
            layer._batch_rows = torch.arange(len(index), device=index.device)[:, None]
        if isinstance(layer, LinearAttentionLayer):
            for states in (layer.conv_states, layer.recurrent_states):
                for i, state in states.items():
                    if state is not None:
                        states[i] = state.index_select(0, index)
