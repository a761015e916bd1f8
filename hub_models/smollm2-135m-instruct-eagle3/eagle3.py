"""EAGLE-3 drafter: one decoder layer fed with the target's low/mid/high hidden states and its own token embeddings.

This file goes to the Hub next to the weights (``save_pretrained`` copies it), so it imports only torch and
transformers. Tensor names follow the EAGLE / SpecForge layout (``fc``, ``midlayer.*``, ``norm``, ``lm_head``, ``d2t``,
``t2d``); :func:`hf_specgen.load_drafter` also reads vLLM's renamed layout (``layers.0.*``, ``draft_id_to_target_id``).

One drafter step (shapes for T rows):
    features  [B, T, 3H] target taps (first step) or [B, T, H] the drafter's own previous output (deeper steps)
    hidden  = fc(features) if 3H wide else features                          [B, T, H]
    x       = concat(input_layernorm(embed(token)), hidden_norm(hidden))      [B, T, 2H]  (embedding first)
    hidden  = hidden + attention(x)         q/k/v read 2H, o_proj writes H; RoPE at the rows' positions
    hidden  = hidden + mlp(post_attention_layernorm(hidden))
    returns hidden (pre-norm: what deeper steps feed back); logits = lm_head(norm(hidden)) over the draft vocab,
    draft id i is target id i + d2t[i].
Alignment: the row that pairs the target feature of position t with the token at t+1 predicts the token at t+2.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half


def default_eagle3_layer_ids(num_target_layers: int) -> list[int]:
    """Decoder-layer outputs EAGLE-3 reads: hidden_states indices [2, L//2, L-3], i.e. layers [1, L//2-1, L-4]."""
    return [1, num_target_layers // 2 - 1, num_target_layers - 4]


def _plain_rope(config: LlamaConfig) -> LlamaConfig:
    # EAGLE-3 drafters use plain RoPE at the config's base (no llama3 scaling), 10000 when the config has none.
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rope_theta", None)) or 10000.0
    config.rope_parameters = {"rope_type": "default", "rope_theta": float(theta)}
    return config


class Eagle3Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        bias = getattr(config, "attention_bias", False)
        width = 2 * config.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)

    def queries(self, x, cos, sin):
        """Queries of rows x [B, T, 2H]: [B, heads, T, hd], RoPE applied."""
        batch, rows, _ = x.shape
        q = self.q_proj(x).view(batch, rows, self.num_heads, self.head_dim).transpose(1, 2)
        return q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1)

    def key_values(self, x, cos, sin):
        """K/V of rows x [B, T, 2H] (what a cache stores): [B, kvh, T, hd] each."""
        batch, rows, _ = x.shape
        k = self.k_proj(x).view(batch, rows, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, rows, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return k * cos.unsqueeze(1) + rotate_half(k) * sin.unsqueeze(1), v

    def forward(self, x, cos, sin, past_key_values=None, attention_mask=None):
        batch, rows, _ = x.shape
        q = self.queries(x, cos, sin)
        k, v = self.key_values(x, cos, sin)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, 0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, scale=self.head_dim**-0.5,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(batch, rows, self.num_heads * self.head_dim))


class Eagle3DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.self_attn = Eagle3Attention(config)
        self.mlp = LlamaMLP(config)
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def attention_input(self, embeds, hidden):
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # [B, T, 2H]

    def forward(self, embeds, hidden, cos, sin, past_key_values=None, attention_mask=None):
        x = self.attention_input(embeds, hidden)
        hidden = hidden + self.self_attn(x, cos, sin, past_key_values, attention_mask)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Eagle3DraftModel(PreTrainedModel):
    """EAGLE-3 drafter (Llama-style config, one layer). ``forward`` returns the pre-norm hidden state."""

    config_class = LlamaConfig
    base_model_prefix = "eagle3"
    _no_split_modules = ["Eagle3DecoderLayer"]

    def __init__(self, config: LlamaConfig):
        config = _plain_rope(config)
        super().__init__(config)
        hidden = config.hidden_size
        self.vocab_size = config.vocab_size
        self.draft_vocab_size = getattr(config, "draft_vocab_size", None) or config.vocab_size
        self.target_layer_ids = list(getattr(config, "target_layer_ids", None) or [])  # [] = the default for the target
        n_taps = len(self.target_layer_ids) or 3
        self.fc = nn.Linear(n_taps * hidden, hidden, bias=False)
        self.midlayer = Eagle3DecoderLayer(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, self.draft_vocab_size, bias=False)
        # Draft vocabulary -> target vocabulary: target id = draft id + d2t[draft id]; t2d marks target ids present.
        self.register_buffer("d2t", torch.zeros(self.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(self.vocab_size, dtype=torch.bool)
                             if self.draft_vocab_size == self.vocab_size else torch.zeros(self.vocab_size, dtype=torch.bool))
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.post_init()

    def forward(self, input_embeds: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                past_key_values=None, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """input_embeds [B, T, H] (target embeddings of the tokens); features [B, T, n*H] taps or [B, T, H] own
        outputs; position_ids [B, T]; attention_mask additive float [B, 1, T, K] or None; returns [B, T, H]."""
        hidden = self.fc(features) if features.shape[-1] != self.config.hidden_size else features
        cos, sin = self.rotary_emb(input_embeds, position_ids)
        return self.midlayer(input_embeds, hidden, cos, sin, past_key_values, attention_mask)

    def prefill_kv(self, input_embeds: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                   past_key_values) -> None:
        """KV-only prefill: append the midlayer K/V of these rows to the cache, skipping queries, attention and MLP
        (one layer, so a row's K/V never depend on other rows: equal to what a full forward stores)."""
        hidden = self.fc(features) if features.shape[-1] != self.config.hidden_size else features
        cos, sin = self.rotary_emb(input_embeds, position_ids)
        x = self.midlayer.attention_input(input_embeds, hidden)
        k, v = self.midlayer.self_attn.key_values(x, cos, sin)
        past_key_values.update(k, v, 0)

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., draft_vocab] logits."""
        return self.lm_head(self.norm(hidden))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]


Eagle3DraftModel.register_for_auto_class("AutoModel")
