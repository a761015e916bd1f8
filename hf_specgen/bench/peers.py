"""What users would run instead of hf_specgen, set up for a fair side-by-side with the same models.

* transformers' assisted generation: ``generate(assistant_model=draft_lm)`` (its own dynamic-K heuristic);
* transformers' prompt lookup: ``generate(prompt_lookup_num_tokens=N)``;
* transformers' generic DFlash path: ``generate(assistant_model=..., speculation_type="dflash")``. That path calls
  its drafter with another forward signature, so :class:`NativeDFlashAdapter` presents our drafter (same weights,
  no copy) the way it expects.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from ..models.dflash import DFlashDraftModel


class NativeDFlashAdapter(nn.Module):
    """A z-lab-format :class:`DFlashDraftModel` with the call signature of transformers' ``speculation_type="dflash"``.

    That path keeps the drafter's K/V in a ``DFlashCache`` and, each round, crops ``block_size`` rows off it,
    assuming the block's K/V were appended after the context's. Our drafter appends only context K/V (block K/V are
    never reused), so the adapter appends ``block_size`` placeholder rows per layer for the crop to remove.
    """

    def __init__(self, drafter: DFlashDraftModel):
        super().__init__()
        self.drafter = drafter
        config = copy.deepcopy(drafter.config)
        # transformers reads these three at the top level of the config.
        config.target_layer_ids = list(drafter.target_layer_ids)
        config.block_size = drafter.block_size
        config.mask_token_id = drafter.mask_token_id
        self.config = config
        self.generation_config = None

    @property
    def device(self) -> torch.device:
        return self.drafter.device

    @property
    def dtype(self) -> torch.dtype:
        return self.drafter.dtype

    def forward(self, noise_embeds, context_hidden_states, position_ids, attention_mask=None, past_key_values=None,
                **kwargs):
        # noise_embeds [1, B, H]; context_hidden_states [1, C, n_taps*H]; position_ids [1, C+B]
        hidden = self.drafter(noise_embeds, context_hidden_states, position_ids, past_key_values)  # [1, B, H]
        if past_key_values is not None:
            attn = self.drafter.layers[0].self_attn
            placeholder = hidden.new_zeros(1, attn.num_kv_heads, noise_embeds.shape[1], attn.head_dim)
            for layer_idx in range(len(self.drafter.layers)):
                past_key_values.update(placeholder, placeholder, layer_idx)
        return BaseModelOutput(last_hidden_state=hidden)
