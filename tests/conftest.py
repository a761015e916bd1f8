"""Tiny random models built from configs: no downloads, seconds to build."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    DynamicCache, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
    Qwen3Config, Qwen3ForCausalLM,
)

import hf_specgen

# Under pytest-xdist (the README's `-n auto`) each worker is one process per core: one torch thread each, so the
# workers do not fight over the cores (two threads per worker on a 2-core machine made every step wait).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


def load_repo_module(relative_path: str, name: str):
    """A file of the repository that is no package module (a script, the Space's app.py), imported as ``name`` (kept
    in sys.modules, so that what it defines can be found by name)."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


VOCAB = 256
MASK_TOKEN = VOCAB - 1  # reserved: never in test prompts
GEOMETRY = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=16)),
    "llama": (LlamaConfig, LlamaForCausalLM, dict(head_dim=16)),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict()),
    "mistral": (MistralConfig, MistralForCausalLM, dict(head_dim=16, sliding_window=None)),
}


def make_target(family: str = "qwen3", seed: int = 0, dtype=torch.float32, **overrides):
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(seed)
    config = config_cls(**{**GEOMETRY, **extra, **overrides})
    model = model_cls(config).to(dtype).eval()
    # Random init gives near-uniform logits; a wider lm_head makes distributions peaked like real models.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return hf_specgen.enable(model)


def make_gemma3n():
    """A small Gemma 3n (built from its own config class: its defaults do not shrink generically): its last 2 of 4
    layers read K/V that earlier layers wrote, it carries AltUp streams, and it windows its attention to 8 tokens."""
    from transformers import AutoModelForCausalLM, Gemma3nTextConfig

    config = Gemma3nTextConfig(
        vocab_size=320, vocab_size_per_layer_input=320, hidden_size=64, hidden_size_per_layer_input=16,
        intermediate_size=[128] * 4, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2, laurel_rank=8,
        activation_sparsity_pattern=[0.0] * 4, sliding_window=8, max_position_embeddings=512)
    torch.manual_seed(0)
    return hf_specgen.enable(AutoModelForCausalLM.from_config(config).eval())


def make_dflash(target, block_size: int = 8, num_layers: int = 2, layer_ids=None, seed: int = 1, **overrides):
    t = target.config
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads, head_dim=t.hidden_size // t.num_attention_heads,
        max_position_embeddings=t.max_position_embeddings, block_size=block_size,
        num_target_layers=t.num_hidden_layers,
        dflash_config={"mask_token_id": MASK_TOKEN, "target_layer_ids": layer_ids or [0, t.num_hidden_layers - 2]},
        **overrides,
    )
    dtype = target.get_input_embeddings().weight.dtype
    return hf_specgen.DFlashDraftModel(config).to(dtype).eval()


def random_prompt(rng: random.Random, length: int) -> torch.Tensor:
    return torch.tensor([[rng.randrange(3, MASK_TOKEN) for _ in range(length)]])


def assert_draft_cache_holds_the_committed_tokens(proposer, slots: int) -> None:
    """A draft LM proposer's cache at batch row 0: layer 0's keys at slots 0 .. ``slots`` - 1 are those of the
    committed tokens there (they depend on the token and position alone), as a fresh forward over them gives."""
    scratch = DynamicCache()
    with torch.no_grad():
        proposer.draft_model(proposer.session.tokens[:1, :slots], past_key_values=scratch, use_cache=True)
    torch.testing.assert_close(proposer.cache.layers[0].keys[:1, :, :slots], scratch.layers[0].keys,
                               rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="session")
def qwen3_pair():
    target = make_target("qwen3")
    return target, make_dflash(target)
