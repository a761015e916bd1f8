"""Capture the target's hidden states at chosen decoder layers during a normal forward.

Forward hooks on the decoder layers keep exactly the tapped outputs (not all layers, unlike
``output_hidden_states=True``) and work the same across transformers releases. Index convention: layer
``i`` means the OUTPUT of decoder layer i (0-based), i.e. ``hidden_states[i + 1]`` in transformers' tuple.
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch import nn

from .support import decoder_layers  # noqa: F401 (the taps' layer lookup; imported from here by callers)


class HiddenStateTap:
    """Records the outputs of ``layer_ids`` on every forward; ``features()`` concatenates them in list order.

    Hooks live on the shared model, so a call running in another thread fires them too: each tap keeps only the
    forwards of the thread that opened it, and concurrent calls on one model each see their own hidden states."""

    def __init__(self, model: nn.Module, layer_ids: list[int]):
        self.layer_ids = list(layer_ids)
        self._layers = decoder_layers(model)
        self._outputs: dict[int, torch.Tensor] = {}
        self._handles = []
        self._thread = threading.get_ident()

    def _hook(self, layer_id: int):
        def record(module, args, output):
            # Compiled steps trace this hook into their graph (no thread check possible there); a compiled decoder
            # serves one call at a time.
            if not torch.compiler.is_compiling() and threading.get_ident() != self._thread:
                return  # another call's forward on the same model
            self._outputs[layer_id] = output[0] if isinstance(output, tuple) else output

        return record

    def __enter__(self) -> "HiddenStateTap":
        self._handles = [self._layers[i].register_forward_hook(self._hook(i)) for i in self.layer_ids]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._outputs = {}

    def features(self) -> torch.Tensor:
        """[B, T, n_taps * H] for the last forward."""
        return torch.cat([self._outputs[i] for i in self.layer_ids], dim=-1)


@contextlib.contextmanager
def tapped(model: nn.Module, layer_ids: list[int] | None):
    """``with tapped(target, ids) as tap``; yields None when no layer is tapped."""
    if not layer_ids:
        yield None
        return
    with HiddenStateTap(model, layer_ids) as tap:
        yield tap
