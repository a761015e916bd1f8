"""Random-weight stand-ins for benchmarks and tests: a target, a DFlash drafter and a draft LM built from configs."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, Qwen3Config, Qwen3ForCausalLM

from ..mixin import enable
from ..models.dflash import DFlashDraftModel
from ..models.eagle3 import Eagle3DraftModel

# Random-weight stand-ins, used until trained models ship in hub_models/. They show the mechanics and the
# engine's costs; a random drafter accepts almost nothing, so they say nothing about achievable speedups.
SYNTHETIC_SIZES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=256),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64, vocab_size=8192),
}


def synthetic_pair(size: str = "small", block_size: int = 16, dtype=torch.bfloat16, seed: int = 0):
    geometry = SYNTHETIC_SIZES[size]
    torch.manual_seed(seed)
    target = Qwen3ForCausalLM(Qwen3Config(**geometry, max_position_embeddings=4096, eos_token_id=None)).to(dtype).eval()
    layers = geometry["num_hidden_layers"]
    drafter_config = Qwen3Config(
        **{**geometry, "num_hidden_layers": 2}, max_position_embeddings=4096, block_size=block_size,
        num_target_layers=layers,
        dflash_config={"mask_token_id": geometry["vocab_size"] - 1, "target_layer_ids": [1, layers - 3]},
    )
    drafter = DFlashDraftModel(drafter_config).to(dtype).eval()
    draft_lm = Qwen3ForCausalLM(Qwen3Config(**{**geometry, "num_hidden_layers": 1}, max_position_embeddings=4096,
                                            eos_token_id=None)).to(dtype).eval()
    eagle = Eagle3DraftModel(LlamaConfig(**{**geometry, "num_hidden_layers": 1}, rope_theta=10000.0,
                                         max_position_embeddings=4096)).to(dtype).eval()
    return enable(target), drafter, draft_lm, eagle
