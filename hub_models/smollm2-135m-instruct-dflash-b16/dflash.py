"""DFlash block-diffusion drafter (z-lab checkpoint format).

This file goes to the Hub verbatim (``save_pretrained`` copies it next to the weights), so it imports only
torch and transformers: a user can load a drafter with
``AutoModel.from_pretrained(repo, trust_remote_code=True)`` without installing hf_specgen.

Architecture (DFlash paper; checkpoint names as published by z-lab):
  * N Qwen3-style decoder layers with the target's geometry, a final ``norm``; no embedding, no lm_head
    (the drafter borrows the target's, frozen).
  * Context ("KV injection"): the target's hidden states at ``target_layer_ids`` are concatenated along
    features, projected by ``fc`` (n_taps*H -> H) and normed by ``hidden_norm``. Each layer turns these
    context rows into extra keys/values with its own ``k_proj``/``v_proj``; context rows are never queries.
  * A block ``[last committed token, mask, ..., mask]`` is denoised in ONE forward: block queries see every
    context key and every key of their own block (no causal mask inside the block). Slot k predicts the
    token at block position k (no shift).
  * Optional (hf_specgen's addition; other readers ignore the key, the weights file is unchanged):
    ``dflash_config.draft_vocab``, the sorted token ids the drafter proposes. Its logits are then the lm_head's
    rows for those N ids: an [N, H] product per drafted slot instead of [V, H], which on a small target is most of
    a drafting forward. Proposals only: the target still verifies every token.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from transformers import DynamicCache, PreTrainedModel, Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half


def default_target_layer_ids(num_target_layers: int, num_taps: int) -> list[int]:
    """Tapped target layers used when a checkpoint names none (the reference convention).

    One tap -> the middle layer; otherwise ``num_taps`` ids spread evenly over [1, L-3], rounded with
    Python's round(). 36 layers, 5 taps -> [1, 9, 17, 25, 33].
    """
    if num_taps == 1:
        return [num_target_layers // 2]
    first, last = 1, num_target_layers - 3
    span = last - first
    return [int(round(first + i * span / (num_taps - 1))) for i in range(num_taps)]


def dflash_config_for_target(target_config, num_layers: int, block_size: int, mask_token_id: int,
                             target_layer_ids: list[int] | None = None, num_taps: int | None = None) -> Qwen3Config:
    """A drafter config with the target's geometry, in z-lab's layout (``dflash_config`` nested, block size on top)."""
    layers = target_config.num_hidden_layers
    if target_layer_ids is None:
        target_layer_ids = default_target_layer_ids(layers, num_taps or num_layers)
    head_dim = getattr(target_config, "head_dim", None) or target_config.hidden_size // target_config.num_attention_heads
    rope = getattr(target_config, "rope_parameters", None) or {"rope_type": "default",
                                                               "rope_theta": getattr(target_config, "rope_theta", 1e6)}
    return Qwen3Config(
        vocab_size=target_config.vocab_size, hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size, num_hidden_layers=num_layers,
        num_attention_heads=target_config.num_attention_heads, num_key_value_heads=target_config.num_key_value_heads,
        head_dim=head_dim, max_position_embeddings=target_config.max_position_embeddings,
        rms_norm_eps=target_config.rms_norm_eps, rope_parameters=dict(rope), attention_bias=False,
        tie_word_embeddings=False, block_size=block_size, num_target_layers=layers,
        dflash_config={"mask_token_id": int(mask_token_id), "target_layer_ids": [int(i) for i in target_layer_ids]},
        architectures=["DFlashDraftModel"],
    )


def read_dflash_settings(config) -> dict:
    """Block size, mask token and tapped layers from a DFlash config.

    Newer checkpoints keep ``block_size`` inside ``dflash_config``; older ones at the top level: read the
    nested dict first. Missing ``target_layer_ids`` default to one tap per drafter layer spread over the
    target (needs ``num_target_layers``).
    """
    nested = dict(getattr(config, "dflash_config", None) or {})
    block_size = nested.get("block_size", getattr(config, "block_size", None))
    mask_token_id = nested.get("mask_token_id", getattr(config, "mask_token_id", None))
    layer_ids = nested.get("target_layer_ids", getattr(config, "target_layer_ids", None))
    num_target_layers = getattr(config, "num_target_layers", None)
    if layer_ids is None:
        if num_target_layers is None:
            raise ValueError(
                "This DFlash config has neither `dflash_config.target_layer_ids` nor `num_target_layers`: "
                "add one of them to config.json so the drafter knows which target layers feed it."
            )
        layer_ids = default_target_layer_ids(num_target_layers, config.num_hidden_layers)
    return {
        "block_size": int(block_size) if block_size is not None else 16,
        "mask_token_id": mask_token_id,
        "target_layer_ids": [int(i) for i in layer_ids],
        "num_target_layers": num_target_layers,
        "draft_vocab": [int(i) for i in nested["draft_vocab"]] if nested.get("draft_vocab") else None,
    }


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, heads, T, hd]; cos/sin: [B, T, hd]
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


_COMPILED_FLEX = []


def _flex_attention(on_gpu: bool):
    # Uncompiled flex attention materializes the full score matrix; the fused kernel needs torch.compile (GPU only:
    # on CPU it has no backward, and inference never uses a BlockMask).
    if not on_gpu:
        return flex_attention
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(flex_attention, dynamic=True))
    return _COMPILED_FLEX[0]


@dataclass
class AnchoredBlocks:
    """Training visibility for A blocks of B rows per sequence, kept as anchors instead of a dense mask.

    Keys are [context S ; blocks A*B]. A row of the block anchored at a sees context keys before min(a, length) and
    every key of its own block: the dense mask would be [M, A*B, S + A*B] with all but S + B keys of a row masked, so
    most of its scores (and of their memory) would be computed only to be dropped. Flex attention skips them on a GPU,
    but has no backward on a CPU; :func:`anchored_block_attention` computes exactly the visible scores there.
    """
    anchors: torch.Tensor  # [M, A] position of each block's first row (the last committed token)
    lengths: torch.Tensor  # [M] real length of each (right-padded) sequence
    block_size: int


def anchored_block_attention(q, k, v, blocks: AnchoredBlocks, scale: float) -> torch.Tensor:
    """Attention of block rows over [context ; own block] keys; equal to SDPA with the dense mask of ``blocks``.

    q: [M, heads, A*B, hd]; k, v: [M, kv_heads, S + A*B, hd] -> [M, heads, A*B, hd]
    """
    m, heads, rows, head_dim = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads  # query head h reads kv head h // groups, as SDPA's enable_gqa does
    n_blocks, block = blocks.anchors.shape[1], blocks.block_size
    ctx_len = k.shape[2] - rows
    q = q.reshape(m, kv_heads, groups * rows, head_dim)
    ctx_scores = (q @ k[:, :, :ctx_len].transpose(-1, -2)).float() * scale  # [M, kvh, g*A*B, S]
    ctx_scores = ctx_scores.view(m, kv_heads, groups, n_blocks, block, ctx_len)
    sees = torch.arange(ctx_len, device=q.device) < torch.minimum(blocks.anchors, blocks.lengths[:, None])[..., None]
    ctx_scores = ctx_scores.masked_fill(~sees[:, None, None, :, None, :], float("-inf"))  # [M, A, S] -> rows
    q_blocks = q.view(m, kv_heads, groups, n_blocks, block, head_dim)
    k_blocks = k[:, :, ctx_len:].reshape(m, kv_heads, 1, n_blocks, block, head_dim)
    v_blocks = v[:, :, ctx_len:].reshape(m, kv_heads, 1, n_blocks, block, head_dim)
    own_scores = (q_blocks @ k_blocks.transpose(-1, -2)).float() * scale  # [M, kvh, g, A, B, B]
    # one softmax over the S + B visible keys of each row (every row sees its own block, so none is empty)
    probs = torch.softmax(torch.cat([ctx_scores, own_scores], dim=-1), dim=-1).to(v.dtype)
    ctx_probs, own_probs = probs.split([ctx_len, block], dim=-1)
    out = ctx_probs.reshape(m, kv_heads, groups * rows, ctx_len) @ v[:, :, :ctx_len]  # [M, kvh, g*A*B, hd]
    out = out.view(m, kv_heads, groups, n_blocks, block, head_dim) + own_probs @ v_blocks
    return out.reshape(m, heads, rows, head_dim)


class DFlashAttention(nn.Module):
    """Attention whose queries come from the block only and whose keys/values are [context ; block]."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        bias = getattr(config, "attention_bias", False)
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def context_key_values(self, context, cos, sin):
        """K/V of context rows only ([B, C, H] -> [B, kvh, C, hd] each), as ``forward`` computes them."""
        batch, ctx_len, _ = context.shape
        k = self.k_norm(self.k_proj(context).view(batch, ctx_len, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(context).view(batch, ctx_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return _apply_rope(k, cos, sin), v

    def forward(self, block, context, cos, sin, past_key_values=None, attention_mask=None, cache_block=False):
        batch, q_len, _ = block.shape
        ctx_len = context.shape[1]
        q = self.q_norm(self.q_proj(block).view(batch, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        kv_in = torch.cat([context, block], dim=1)  # [B, C+Q, H]
        k = self.k_norm(self.k_proj(kv_in).view(batch, ctx_len + q_len, self.num_kv_heads, self.head_dim))
        k = k.transpose(1, 2)  # [B, kvh, C+Q, hd]
        v = self.v_proj(kv_in).view(batch, ctx_len + q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = _apply_rope(q, cos[:, ctx_len:], sin[:, ctx_len:])  # block rows sit at the block positions
        k = _apply_rope(k, cos, sin)
        if past_key_values is not None and cache_block:
            # A static cache: context and block K/V are written in place in one update and attention reads the
            # buffer (no concatenation); the caller's mask places the block, and later rounds overwrite its rows.
            k, v = past_key_values.update(k, v, self.layer_idx)  # [B, kvh, K, hd]
        elif past_key_values is not None:
            # Only context rows enter the cache; block K/V are recomputed every round and never kept.
            k_ctx, v_ctx = past_key_values.update(k[:, :, :ctx_len], v[:, :, :ctx_len], self.layer_idx)
            k = torch.cat([k_ctx, k[:, :, ctx_len:]], dim=2)  # [B, kvh, cached + Q, hd]
            v = torch.cat([v_ctx, v[:, :, ctx_len:]], dim=2)
        if isinstance(attention_mask, AnchoredBlocks):  # training on a CPU: see AnchoredBlocks
            out = anchored_block_attention(q, k, v, attention_mask, self.head_dim**-0.5)
        elif isinstance(attention_mask, BlockMask):
            # Training: thousands of block rows per sequence, each seeing a context prefix and its own block only; a
            # block-sparse mask skips the rest (flex attention; compiled on GPU, where it also has a backward).
            out = _flex_attention(q.is_cuda)(q, k, v, block_mask=attention_mask, scale=self.head_dim**-0.5,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attention_mask, scale=self.head_dim**-0.5,
                enable_gqa=self.num_heads != self.num_kv_heads,
            )  # [B, heads, Q, hd]
        return self.o_proj(out.transpose(1, 2).reshape(batch, q_len, self.num_heads * self.head_dim))


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden, context, cos, sin, past_key_values=None, attention_mask=None, cache_block=False):
        # Context rows skip input_layernorm and the MLP: they only lend keys/values.
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), context, cos, sin, past_key_values,
                                         attention_mask, cache_block)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DFlashDraftModel(PreTrainedModel):
    """DFlash drafter. ``forward`` returns final-normed hidden states; logits = target.lm_head(hidden)."""

    config_class = Qwen3Config
    base_model_prefix = "dflash"
    _no_split_modules = ["DFlashDecoderLayer"]
    supports_gradient_checkpointing = False

    def __init__(self, config: Qwen3Config):
        super().__init__(config)
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise ValueError(
                "This DFlash checkpoint marks some layers `sliding_attention`; this drafter class supports "
                "full-attention layers only. Use a checkpoint whose `layer_types` are all `full_attention`."
            )
        settings = read_dflash_settings(config)
        self.block_size = settings["block_size"]
        self.mask_token_id = settings["mask_token_id"]
        self.target_layer_ids = settings["target_layer_ids"]
        # transformers' own DFlash path (generate(..., speculation_type="dflash")) reads these three at the top level
        # of the config; z-lab's readers (vLLM, SGLang, hf_specgen) read `dflash_config` first, so both agree.
        config.block_size, config.mask_token_id = self.block_size, self.mask_token_id
        config.target_layer_ids = list(self.target_layer_ids)
        hidden = config.hidden_size
        self.layers = nn.ModuleList([DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.fc = nn.Linear(len(self.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config=config)
        self.post_init()

    @property
    def draft_vocab(self) -> torch.Tensor | None:
        """[N] sorted token ids the drafter proposes (its config's ``dflash_config.draft_vocab``), None: every token."""
        ids = read_dflash_settings(self.config)["draft_vocab"]
        return torch.tensor(ids, dtype=torch.long) if ids else None

    def set_draft_vocab(self, token_ids) -> None:
        """Restrict the drafter's proposals to ``token_ids`` (distinct ids of the target's vocabulary, e.g. the most
        frequent tokens of its answers), or lift the restriction with None. Kept in the config, saved with it."""
        nested = {k: v for k, v in dict(self.config.dflash_config or {}).items() if k != "draft_vocab"}
        if token_ids is not None:
            ids = torch.as_tensor(token_ids, dtype=torch.long).flatten().sort().values
            vocab = self.config.vocab_size
            if ids.numel() == 0 or int(ids[0]) < 0 or int(ids[-1]) >= vocab or bool((ids[1:] == ids[:-1]).any()):
                raise ValueError(f"a draft vocabulary takes distinct token ids in [0, {vocab}) (the target's "
                                 f"vocabulary); got {ids.numel()} ids from {int(ids[0]) if ids.numel() else None} to "
                                 f"{int(ids[-1]) if ids.numel() else None}")
            nested["draft_vocab"] = ids.tolist()
        self.config.dflash_config = nested

    def __getattr__(self, name: str):
        if name == "generation_config":  # transformers' plain assisted generation asks for it
            raise AttributeError(
                "DFlashDraftModel is a DFlash drafter, not a causal LM that transformers' assisted generation can "
                "run: pass speculation_type=\"dflash\" to generate() (transformers' own DFlash path), or "
                "speculative_mode=\"dflash\" on a model enabled with hf_specgen")
        return super().__getattr__(name)

    def forward(
        self,
        noise_embedding: torch.Tensor | None = None,
        target_hidden: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values=None,
        attention_mask: torch.Tensor | None = None,
        cache_block: bool = False,
        **kwargs,
    ):
        """Denoise one block per row.

        noise_embedding: [B, Q, H]  target embeddings of [last token, mask, ...]
        target_hidden:   [B, C, n_taps*H]  tapped target states of the C context rows not yet cached
        position_ids:    [B, C+Q]  absolute positions: context rows first, then block rows
        past_key_values: a transformers Cache holding earlier context K/V (appended to in place), or None
        attention_mask:  [B, 1, Q, K] bool or additive float over keys [cache ; context? ; block], or a flex
                         attention BlockMask over the same keys, or AnchoredBlocks (training); None = see all
        cache_block:     write the block's K/V into the cache too, right after the context rows, and attend the
                         cache buffer as returned by its update (a static cache: no per-layer concatenation); the
                         mask is then over that buffer's slots, and rolling the cache back drops the block rows
        returns:         [B, Q, H]

        Called by transformers' ``speculation_type="dflash"`` path instead (keywords ``noise_embeds`` and
        ``context_hidden_states``), it returns a ``BaseModelOutput``: see :meth:`_forward_for_transformers`.
        """
        if noise_embedding is None and "noise_embeds" in kwargs:
            return self._forward_for_transformers(kwargs["noise_embeds"], kwargs["context_hidden_states"],
                                                  position_ids, past_key_values, attention_mask)
        context = self.hidden_norm(self.fc(target_hidden))  # [B, C, H]
        cos, sin = self.rotary_emb(noise_embedding, position_ids)  # [B, C+Q, hd]
        hidden = noise_embedding
        for layer in self.layers:
            hidden = layer(hidden, context, cos, sin, past_key_values, attention_mask, cache_block)
        return self.norm(hidden)

    def _forward_for_transformers(self, noise_embeds, context_hidden_states, position_ids, past_key_values,
                                  attention_mask):
        """transformers' DFlash candidate generator (batch 1, a ``DFlashCache``).

        That generator crops ``block_size`` rows off the drafter cache before each round, expecting the block's K/V
        to have been appended after the context's. This drafter keeps only context K/V (block K/V are recomputed
        every round), so it appends ``block_size`` zero rows per layer for the crop to remove.
        """
        from transformers.modeling_outputs import BaseModelOutput

        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("transformers' DFlash path passed a padded attention mask; DFlash drafting there "
                             "supports unpadded batch-1 prompts only (hf_specgen's speculative_mode=\"dflash\" "
                             "handles padding)")
        hidden = self.forward(noise_embeds, context_hidden_states, position_ids, past_key_values)  # [1, B, H]
        if past_key_values is not None:
            attn = self.layers[0].self_attn
            placeholder = hidden.new_zeros(hidden.shape[0], attn.num_kv_heads, noise_embeds.shape[1], attn.head_dim)
            for layer in self.layers:
                past_key_values.update(placeholder, placeholder, layer.self_attn.layer_idx)
        return BaseModelOutput(last_hidden_state=hidden)

    def prefill_context(self, target_hidden: torch.Tensor, position_ids: torch.Tensor, past_key_values) -> None:
        """Append context rows to the cache without drafting a block (context rows only lend K/V).

        target_hidden [B, C, n_taps*H]; position_ids [B, C]; past_key_values: the drafter's cache (appended to).
        """
        context = self.hidden_norm(self.fc(target_hidden))  # [B, C, H]
        cos, sin = self.rotary_emb(context, position_ids)
        for layer in self.layers:
            k, v = layer.self_attn.context_key_values(context, cos, sin)
            past_key_values.update(k, v, layer.self_attn.layer_idx)

    # ------------------------------------------------------------------------------------------------
    # z-lab compatible entry point: a plain, readable reference loop (dynamic cache, batch 1). hf_specgen's
    # engine (``generate(..., speculative_mode="dflash")``) is the fast path; this one needs nothing but
    # transformers and is kept for users of the z-lab repos.
    # ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def spec_generate(
        self,
        input_ids: torch.LongTensor,
        target,
        max_new_tokens: int = 2048,
        stop_token_ids: list[int] | None = None,
        temperature: float = 0.0,
        **kwargs,
    ) -> torch.LongTensor:
        """Speculative decoding with this drafter; returns [1, prompt + new] token ids."""
        if input_ids.shape[0] != 1:
            raise ValueError("spec_generate supports batch size 1; call it once per prompt.")
        stop_token_ids = set(stop_token_ids or [])
        block = self.block_size
        embed = target.get_input_embeddings()
        device = input_ids.device
        taps = [i + 1 for i in self.target_layer_ids]  # hidden_states[0] is the embedding output

        def pick(logits):  # [T, V] -> [T]
            if temperature and temperature > 0:
                return torch.multinomial(torch.softmax(logits.float() / temperature, dim=-1), 1).squeeze(-1)
            return logits.argmax(dim=-1)

        # The cache keyword: "cache" where transformers renamed it ("past_key_values" then warns), else the old name.
        cache_key = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
        out = target(input_ids, use_cache=True, output_hidden_states=True)
        target_cache = out["cache"] if "cache" in out else out.past_key_values
        context = torch.cat([out.hidden_states[i] for i in taps], dim=-1)  # [1, P, n_taps*H]
        tokens = input_ids[0].tolist() + [int(pick(out.logits[0, -1:])[0])]
        prompt_len = input_ids.shape[1]
        draft_cache = DynamicCache(config=self.config)
        mask_ids = torch.full((1, block - 1), self.mask_token_id, dtype=torch.long, device=device)
        while len(tokens) - prompt_len < max_new_tokens and tokens[-1] not in stop_token_ids:
            start = len(tokens) - 1  # position of the last committed token, first row of the block
            block_ids = torch.cat([torch.tensor([[tokens[-1]]], device=device), mask_ids], dim=1)  # [1, B]
            positions = torch.arange(start - context.shape[1], start + block, device=device)[None]
            hidden = self(embed(block_ids), context, positions, draft_cache)
            draft = target.lm_head(hidden[:, 1:]).argmax(-1)  # [1, B-1]
            verify_ids = torch.cat([block_ids[:, :1], draft], dim=1)
            out = target(
                verify_ids, position_ids=positions[:, -block:], **{cache_key: target_cache},
                use_cache=True, output_hidden_states=True,
            )
            posterior = pick(out.logits[0])  # [B]
            accepted = int((draft[0] == posterior[:-1]).long().cumprod(0).sum())
            new = draft[0, :accepted].tolist() + [int(posterior[accepted])]
            target_cache.crop(-(block - accepted - 1))
            context = torch.cat([out.hidden_states[i][:, : accepted + 1] for i in taps], dim=-1)
            for tok in new:
                tokens.append(tok)
                if tok in stop_token_ids or len(tokens) - prompt_len >= max_new_tokens:
                    break
        return torch.tensor([tokens], dtype=torch.long, device=device)


DFlashDraftModel.register_for_auto_class("AutoModel")
