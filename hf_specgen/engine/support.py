"""What the engine needs from a target, found through the model's own structure, and what it refuses up front.

Speculative decoding rolls a rejected draft back by moving each row's cache length: exact only when ALL of the
model's state about the sequence is per-token K/V in that cache, and attention follows the masks we pass. So:

  * decoder layers: the ``nn.ModuleList`` of the decoder whose length is the config's layer count, wherever the
    architecture keeps it (``model.layers``, ``transformer.h``, ``transformer.blocks``, ``gpt_neox.layers``,
    ``model.decoder.layers``, ...): hidden-state taps hook it and the static cache has one layer per entry;
  * refused before the first forward, with the model type and the reason:
      - recurrent or state-space layers (Mamba, RWKV, xLSTM, hybrids) whose state is carried outside a per-token K/V
        cache and cannot be rolled back by a length. Linear-attention and short-convolution layers that keep their
        state in transformers' ``LinearAttentionLayer`` (Qwen3.5, Qwen3-Next, LFM2, ...) are the exception: the engine
        snapshots those states before a verify and re-feeds the committed tokens (``engine/cache.py``), in chain
        modes and eager steps (trees need a state per branch, CUDA graphs a fixed re-feed);
      - ALiBi (BLOOM, MPT, ALiBi Falcon): the model derives its position biases from a 2D padding mask, not from the
        4D per-slot masks the engine passes;
      - layers whose hidden states are not one [B, T, H] tensor (Gemma 3n's AltUp streams), or input embeddings of
        another width than the hidden states (OPT-350m's projections), in the modes whose drafters read both;
      - and, whatever the architecture, a model that does not follow the engine's way of calling it: before its
        first speculative call each model is probed once (``engine_probe_reason``): six tokens run as one plain
        forward and as the engine runs them (a static cache larger than needed, three rows, then three more with 4D
        masks) must give the same logits. Models with an internal causal mask built from the key length (GPT-1),
        or a position bias of their own (CPM-Ant), fail it and are refused instead of decoding wrong tokens;
  * windowed attention: sliding windows (Mistral, Gemma 2/3, gpt-oss, ...) and attention chunks (Llama 4) are built
    into the masks the engine passes, per layer type, over a full-length cache (rolling back stays a length move,
    at any length); GPT-Neo's local layers window inside the model, so they run while the call fits the window.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import weakref

import torch
from torch import nn

# Layer kinds the engine's cache and masks reproduce; transformers names them in ``config.layer_types``.
ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention", "chunked_attention"}
RECURRENT_LAYER_TYPES = {"linear_attention", "conv", "hybrid", "hybrid_sliding", "mamba", "mamba2", "recurrent", "ssm"}
# Kinds without any cache (transformers maps these legacy names to its DummyLayer): nothing to roll back.
STATELESS_LAYER_TYPES = {"mlp", "moe", "dummy"}
# Recurrent kinds whose whole state is a fixed-shape conv / recurrent state in transformers' LinearAttentionLayer
# (``STATIC_LAYER_TYPE_MAPPING``): snapshots of those tensors roll them back exactly. Hybrid kinds (Falcon-H1, Zaya:
# attention and a Mamba mixer side by side in one layer) keep such a state beside their K/V (transformers'
# LinearAttentionAnd...AttentionLayer; ours: cache.RowStaticHybridLayer).
HYBRID_LAYER_TYPES = {"hybrid", "hybrid_sliding"}
ROLLBACK_LAYER_TYPES = {"linear_attention", "conv"} | HYBRID_LAYER_TYPES
# Module class names of layers that carry a recurrent state (checked for types whose config has no layer_types).
RECURRENT_MODULE_MARKERS = ("Mamba", "Rwkv", "RWKV", "xLSTM", "Xlstm", "Recurrent", "RgLru", "RGLRU",
                            "GatedDeltaNet", "LinearAttention", "ShortConv", "Ssm", "SSM")


def cache_keyword(model) -> str:
    """The keyword a model's forward takes its KV cache under: ``cache`` in the transformers releases that renamed it
    (there ``past_key_values`` still works but warns that it is deprecated), ``past_key_values`` before them (5.17)."""
    forward = getattr(model, "forward", model)
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def last_logits_only(model) -> dict:
    """The keyword arguments that make a model's forward compute the logits of its last row only
    (``logits_to_keep=1``, as stock generate asks of models that take it), or none where its forward does not."""
    forward = getattr(model, "forward", model)
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(forward).parameters else {}


def text_config(model):
    return model.config.get_text_config(decoder=True)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's layer list: the shallowest ``nn.ModuleList`` under the model whose length is the config's
    ``num_hidden_layers`` (found by walking the modules breadth-first, so expert lists deeper inside never win)."""
    count = getattr(text_config(model), "num_hidden_layers", None)
    frontier = [model]
    while frontier:
        for module in frontier:
            if isinstance(module, nn.ModuleList) and len(module) == count and count:
                return module
        frontier = [child for module in frontier for child in module.children()]
    raise ValueError(
        f"Could not find the decoder layers of {type(model).__name__} (model type "
        f"{getattr(model.config, 'model_type', '?')!r}): speculative modes need a decoder-only model whose decoder "
        f"keeps its {count} layers in an nn.ModuleList."
    )


def model_type(model) -> str:
    return getattr(text_config(model), "model_type", None) or getattr(model.config, "model_type", "?")


def rollback_layer_indices(model) -> list[int]:
    """Indices of the decoder layers whose state the engine snapshots and re-feeds (kinds in ROLLBACK_LAYER_TYPES)."""
    kinds = getattr(text_config(model), "layer_types", None) or []
    return [i for i, kind in enumerate(kinds) if kind in ROLLBACK_LAYER_TYPES]


def states_per_recurrent_layer(model) -> int:
    """Conv / recurrent states each recurrent layer keeps (transformers' caches read ``number_of_conv_states``)."""
    return int(getattr(text_config(model), "number_of_conv_states", None) or 1)


def hybrid_layer_indices(model) -> list[int]:
    """Indices of the decoder layers that keep K/V and a recurrent state both (kinds in HYBRID_LAYER_TYPES)."""
    kinds = getattr(text_config(model), "layer_types", None) or []
    return [i for i, kind in enumerate(kinds) if kind in HYBRID_LAYER_TYPES]


# Keys under which transformers' models read a recurrent layer's (2D padding) mask in their per-kind mask mapping.
RECURRENT_MASK_NAMES = {"linear_attention", "conv"}


def mask_names(layer_type: str) -> tuple[str, ...]:
    """The keys of transformers' per-kind mask mapping that a layer of ``layer_type`` may read: its own kind, or for
    a hybrid layer (attention and a recurrent mixer side by side) also the names models give its two halves (Falcon-H1
    reads "full_attention" and "linear_attention", Zaya its kind and "conv", Inkling "sliding_attention")."""
    if layer_type in HYBRID_LAYER_TYPES:
        attention = "sliding_attention" if layer_type == "hybrid_sliding" else "full_attention"
        return (layer_type, attention, *sorted(RECURRENT_MASK_NAMES))
    return (layer_type,)


def layer_masks(model, mask, padding: torch.Tensor | None = None):
    """The ``attention_mask`` of a target forward: the engine's mask (4D, or a dict of them by layer kind), or, when
    some new tokens of a model with recurrent layers are padding (a left-padded prefill), transformers' per-kind
    mapping (its hybrid models take a dict of masks by layer kind): the 4D mask for attention layers and the 2D
    padding mask ``padding`` [B, T] for recurrent ones, which zero the padded rows' inputs as stock generate has them
    do. Without padding the 4D mask alone gives recurrent layers no mask, as transformers'
    ``create_recurrent_attention_mask`` does then."""
    if padding is None or not rollback_layer_indices(model):
        return mask
    kinds = {name for kind in getattr(text_config(model), "layer_types", None) or [] for name in mask_names(kind)}
    return {kind: padding if kind in RECURRENT_MASK_NAMES else (mask[kind] if isinstance(mask, dict) else mask)
            for kind in kinds}


def padded_prefill_reason(model) -> str | None:
    """Why a left-padded batch cannot be decoded on this model with recurrent layers (None when it can): its forward
    must take the per-kind mask mapping of :func:`layer_masks`. Tried once per model, on three tokens."""
    if not rollback_layer_indices(model):
        return None

    def attempt():
        tokens = _probe_tokens(model)[None, :3]
        causal = torch.ones(1, 1, 3, 3, dtype=torch.bool, device=model.device).tril()
        try:
            with torch.no_grad(), _evaluating(model):
                model(input_ids=tokens, attention_mask=layer_masks(model, causal, torch.ones_like(tokens)))
        except (TypeError, ValueError, RuntimeError, AttributeError) as error:
            return (f"its forward does not take transformers' mask mapping by layer kind ({type(error).__name__}), "
                    "which the engine needs to keep padding out of its recurrent states; decode the rows one at a "
                    "time or pad them to one length")
        return None

    return _remembered(_MASK_MAPPING, model, attempt)


def recurrent_state_reason(model) -> str | None:
    """Why the model keeps state that a cache length cannot roll back, or None."""
    cfg = text_config(model)
    kinds = [kind for kind in (getattr(cfg, "layer_types", None) or []) if kind not in ATTENTION_LAYER_TYPES]
    recurrent_kinds = sorted({k for k in kinds if k in RECURRENT_LAYER_TYPES})
    unsupported = [k for k in recurrent_kinds if k not in ROLLBACK_LAYER_TYPES]
    if unsupported:
        return (f"its layers of kind {', '.join(unsupported)} carry a recurrent state outside transformers' "
                "linear-attention cache layers, which rolling the KV cache back after a rejected draft cannot undo")
    if recurrent_kinds:
        return None  # snapshotted and re-fed (engine/cache.py); the probe checks that the snapshot is the whole state
    names = _remembered(_RECURRENT_MODULES, model, lambda: sorted(
        {type(m).__name__ for m in model.modules() if any(marker in type(m).__name__
                                                          for marker in RECURRENT_MODULE_MARKERS)}))
    if names:
        return (f"its {', '.join(names[:3])} modules carry a recurrent state, which rolling the KV cache back after "
                "a rejected draft cannot undo")
    return None


def layer_state_reason(model) -> str | None:
    """Attention layers that keep per-layer state beyond K/V (sparse-attention indexers, compressed caches)."""
    kinds = sorted({kind for kind in (getattr(text_config(model), "layer_types", None) or [])
                    if kind not in ATTENTION_LAYER_TYPES} - RECURRENT_LAYER_TYPES - STATELESS_LAYER_TYPES)
    if kinds:
        return (f"its {', '.join(kinds)} layers keep a cache of their own (indexer keys, compressed blocks), which "
                "the engine's static caches do not hold")
    return None


def cache_position_reason(model) -> str | None:
    """Attention that takes its positions from the cache's length (``cache.get_query_offset``: Inkling's relative
    position biases) instead of the position ids: the engine's cache has one length per batch row, and a verify's
    rows sit past the visible slots, so such positions would be wrong. Read from the layers' source, once."""
    def reads_cache_positions() -> list[str]:
        try:
            layers = decoder_layers(model)
        except ValueError:
            return []  # (refused later, by check_target, with the reason)
        names = set()
        for cls in {type(module) for module in layers.modules()}:
            try:
                source = inspect.getsource(cls.forward)
            except (OSError, TypeError):
                continue
            if "get_query_offset(" in source:
                names.add(cls.__name__)
        return sorted(names)

    names = _remembered(_CACHE_POSITIONS, model, reads_cache_positions)
    if names:
        return (f"its {', '.join(names)} modules take positions from the cache's length (get_query_offset) rather "
                "than the position ids each batch row is given")
    return None


def alibi_reason(model) -> str | None:
    cfg = text_config(model)
    attn_config = getattr(cfg, "attn_config", None)
    uses_alibi = (getattr(cfg, "alibi", False) is True or model_type(model) == "bloom"
                  or getattr(attn_config, "alibi", False) is True)
    return ("it adds ALiBi position biases derived from a 2D padding mask, which the engine's per-slot 4D masks "
            "do not carry") if uses_alibi else None


def attention_layout(model) -> dict | None:
    """How the target's layers window their attention, for ``DecodingSession.target_mask``: {"windows": {layer type:
    (kind, size)}, "per_layer_type": bool}, kind "full" / "sliding" / "chunked" / "recurrent" (keyed by the names
    of ``mask_names``: a hybrid layer's attention and recurrent halves apart); None when every layer attends the
    whole sequence. A target whose layers differ takes one mask per layer type (transformers' models index their
    ``attention_mask`` dict by ``config.layer_types``); one whose layers all slide takes one mask."""
    return declared_attention_layout(text_config(model))


def prompt_window_reason(model, prompt_len: int) -> str | None:
    """Why a prompt this long cannot be decoded exactly by a model whose masks ignore its config's window while its
    cache keeps only that window (Moshi: its prompt is attended whole, each later token sees the last N): the
    engine's windowed masks agree with that only while the prompt fits the window."""
    layout = attention_layout(model)
    if layout is None or _remembered(_WINDOWS_FOLLOWED, model, lambda: _follows_config_window(model)):
        return None
    window = min(size for _, size in layout["windows"].values() if size)
    if prompt_len <= window:
        return None
    return (f"its masks attend a prompt whole while its cache keeps only the last {window} tokens (its config's "
            f"window); this prompt has {prompt_len} tokens. Shorten the prompt to at most {window} tokens")


def _probe_tokens(model) -> torch.Tensor:
    """[6] the fixed token ids every one-time probe runs (inside any vocabulary)."""
    return (torch.arange(6, device=model.device) * 7 + 3) % model.get_input_embeddings().num_embeddings


@contextlib.contextmanager
def _evaluating(model):
    """Eval mode for a probe (dropout would make two runs differ for no fault of the model's), restored after."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


@torch.no_grad()
def _follows_config_window(model) -> bool:
    """Whether the model's own masks narrow when its config's windows do: six tokens in a plain forward, with the
    config's windows and with windows of 2 tokens (transformers builds its masks from the config at each call)."""
    cfg = text_config(model)
    names = [name for name in ("sliding_window", "attention_chunk_size") if getattr(cfg, name, None)]
    tokens = _probe_tokens(model)[None]
    saved = {name: getattr(cfg, name) for name in names}
    try:
        with _evaluating(model):
            as_configured = model(input_ids=tokens).logits.float()
            for name in names:
                setattr(cfg, name, 2)
            narrowed = model(input_ids=tokens).logits.float()
    except Exception:  # noqa: BLE001 (one that cannot run this keeps its declared windows; the engine probe judges it)
        return True
    finally:
        for name, value in saved.items():
            setattr(cfg, name, value)
    return not torch.allclose(as_configured, narrowed, rtol=1e-4, atol=1e-5)


def declared_attention_layout(cfg) -> dict | None:
    """``attention_layout`` as the config declares it."""
    layer_types = getattr(cfg, "layer_types", None)
    sliding, chunk = getattr(cfg, "sliding_window", None), getattr(cfg, "attention_chunk_size", None)
    if not layer_types:
        if sliding and getattr(cfg, "use_sliding_window", True) is not False:
            return {"windows": {"sliding_attention": ("sliding", int(sliding))}, "per_layer_type": False}
        return None
    windows = {}
    for name in dict.fromkeys(name for layer_type in layer_types for name in mask_names(layer_type)):
        if name in ("sliding_attention", "hybrid_sliding") and sliding:
            windows[name] = ("sliding", int(sliding))
        elif name == "chunked_attention" and chunk:
            windows[name] = ("chunked", int(chunk))
        elif name in RECURRENT_MASK_NAMES:  # a recurrent layer's mask: None without padding (see layer_masks)
            windows[name] = ("recurrent", None)
        else:
            windows[name] = ("full", None)
    if all(kind in ("full", "recurrent") for kind, _ in windows.values()):
        return None
    return {"windows": windows, "per_layer_type": len(windows) > 1}


def local_attention_window(model) -> int | None:
    """A window the model applies itself, over the keys it is given: GPT-Neo style local layers (``attention_layers``
    with "local"), and Doge's dynamic mask, which keeps the ``keep_window_size`` strongest keys once there are more
    (with a static cache, more slots than the sequence has tokens: measured wrong past that size, exact within it)."""
    cfg = text_config(model)
    if "local" in (getattr(cfg, "attention_layers", None) or []) and getattr(cfg, "window_size", None):
        return int(cfg.window_size)
    if getattr(cfg, "keep_window_size", None):
        return int(cfg.keep_window_size)
    return None


def hidden_state_layout_reason(model) -> str | None:
    """Why the decoder layers' outputs are not one [B, T, H] tensor per layer (what hidden-state taps read)."""
    if getattr(text_config(model), "altup_num_inputs", None):
        return "its decoder layers carry several AltUp streams ([n, B, T, H]) instead of one hidden state"
    return None


def embedding_width_reason(model) -> str | None:
    width = model.get_input_embeddings().embedding_dim
    hidden = getattr(text_config(model), "hidden_size", width)
    if width != hidden:
        return f"its input embeddings are {width}-wide and its hidden states {hidden}-wide"
    return None


# What is found once per model and asked again on every call: kept beside the model (weakly), not on it.
_PROBED: "weakref.WeakKeyDictionary[nn.Module, str | None]" = weakref.WeakKeyDictionary()
_WINDOWS_FOLLOWED: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()
_RECURRENT_MODULES: "weakref.WeakKeyDictionary[nn.Module, list[str]]" = weakref.WeakKeyDictionary()
_MASK_MAPPING: "weakref.WeakKeyDictionary[nn.Module, str | None]" = weakref.WeakKeyDictionary()
_CACHE_POSITIONS: "weakref.WeakKeyDictionary[nn.Module, list[str]]" = weakref.WeakKeyDictionary()
_REMEMBERED_LOCK = threading.RLock()  # a probe may ask for another remembered fact


def _remembered(store, model, compute):
    """``store[model]``, computed by ``compute()`` the first time (a walk over every module, a probe forward)."""
    with _REMEMBERED_LOCK:
        if model in store:
            return store[model]
    value = compute()
    with _REMEMBERED_LOCK:
        store[model] = value
    return value


def engine_probe_reason(model) -> str | None:
    """Why the model does not compute, under the engine's calling convention, what it computes in a plain forward
    (None when it does). Run once per model; see the module docstring."""
    return _remembered(_PROBED, model, lambda: _probe(model))


@torch.no_grad()
def _probe(model) -> str | None:
    try:
        with _evaluating(model):
            return _probe_reason(model)
    except Exception as error:  # noqa: BLE001 (any failure here is the reason to refuse)
        if rollback_layer_indices(model):  # layers typed linear_attention / conv whose state is not in that cache
            return (f"its recurrent layers do not run on the linear-attention cache layers the engine gives them "
                    f"({type(error).__name__}: {str(error)[:120].rstrip('.')})")
        return (f"run with a static cache and 4D attention masks it raises {type(error).__name__} "
                f"({str(error)[:160].rstrip('.')})")


def _probe_reason(model) -> str | None:
    """Six tokens as one plain forward, and as the engine runs them (three, then three more over a static cache
    with 4D masks; for recurrent layers a rejected verify rolled back in between): None when the logits agree."""
    from .cache import restore_states, set_cache_length, snapshot_states, static_cache
    from .session import DecodingSession

    device, dtype = model.device, model.get_input_embeddings().weight.dtype
    tokens = _probe_tokens(model)
    recurrent_layers = rollback_layer_indices(model)

    reference = model(input_ids=tokens[None]).logits[0, 3:].float()  # [3, V]
    session = DecodingSession(tokens[None], None, 16, 3, dtype, attention_layout(model))
    cache = static_cache(16, len(decoder_layers(model)), 1, device, recurrent_layers, hybrid_layer_indices(model),
                         states_per_recurrent_layer(model))
    key = cache_keyword(model)

    def run(ids, start):  # ids [1, 3] at positions start..start+2 over the cache
        return model(input_ids=ids, position_ids=session.positions[:, start:start + 3],
                     attention_mask=session.verify_mask(start, 3), **{key: cache},
                     use_cache=True).logits[0].float()

    run(tokens[None, :3], 0)
    if recurrent_layers:
        # a rejected verify, rolled back: the snapshot must be all the state the model keeps about the sequence
        saved = snapshot_states(cache)
        run(tokens.flip(0)[None, :3], 3)
        restore_states(cache, saved)
        set_cache_length(cache, 3)
        reason = _ignored_state_reason(cache, saved, lambda: run(tokens[None, 3:], 3))
        if reason:
            return reason
    ours = run(tokens[None, 3:], 3)
    tolerance = 1e-3 if dtype == torch.float32 else 5e-2
    relative_error = float((ours - reference).abs().max() / reference.abs().max().clamp(min=1e-6))
    return None if relative_error <= tolerance else (
        f"its logits under a static cache and 4D attention masks differ from a plain forward's (relative error "
        f"{relative_error:.2g}): its attention does not follow the masks and cache positions it is given"
        + (", or its recurrent layers keep state outside their cache layers" if recurrent_layers else ""))


def _ignored_state_reason(cache, saved, verify) -> str | None:
    """Why a multi-token forward over ``cache`` (``verify``: three tokens after the three cached ones) cannot be a
    verify: its logits stay the same when the recurrent states it is given are zeroed, so it starts from a zero state
    whatever the cache holds (transformers' reference Mamba scan in Jamba, Mamba, Falcon-Mamba), and only single-token
    steps would be exact. None when the states matter (or the layers keep only conv states). Leaves the cache as
    ``saved``, at length 3."""
    from .cache import _state_layers, restore_states, set_cache_length

    recurrent = [state for layer in _state_layers(cache) for state in layer.recurrent_states.values()
                 if state is not None]
    if not recurrent or not any(bool(state.any()) for state in recurrent):
        return None
    with_states = verify()
    restore_states(cache, saved)
    set_cache_length(cache, 3)
    for state in recurrent:
        state.zero_()
    without_states = verify()
    restore_states(cache, saved)
    set_cache_length(cache, 3)
    if torch.equal(with_states, without_states):
        return ("its recurrent layers run a forward of several tokens from a zero state, ignoring the state their "
                "cache holds, so a verify of several drafts cannot be exact")
    return None


def rollback_mode_reason(model, drafts_trees: bool) -> str | None:
    """Why this call cannot roll back the target's recurrent layers exactly (None when it can, or none has them).
    Compiled steps can: the verify is a graph, and the re-feed of the committed rows (its width changes every round)
    runs eagerly over the same static cache tensors."""
    if not rollback_layer_indices(model):
        return None
    if drafts_trees:
        return ("its linear-attention / convolution layers would need one state per tree branch; use a chain (DFlash "
                "without dflash_tree_nodes, EAGLE-3 with eagle_top_k=1, classic, or WhiFlash with eagle_top_k=1)")
    return None


def check_target(model, capacity: int, reads_hidden_states: bool, prompt_len: int = 0) -> None:
    """Refuse, before any forward, a target the engine cannot decode exactly; see the module docstring."""
    kind = model_type(model)
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{kind!r} is an encoder-decoder model: speculative modes support decoder-only targets "
                         "(AutoModelForCausalLM).")
    for reason in (recurrent_state_reason(model), layer_state_reason(model), alibi_reason(model),
                   cache_position_reason(model)):
        if reason:
            raise ValueError(
                f"Speculative modes cannot decode model type {kind!r} exactly: {reason}. Use stock generate() for "
                "this model (no speculative_mode); attention-only decoder models (Llama, Qwen, Mistral, Gemma, ...) "
                "are supported.")
    if reads_hidden_states:
        reason = hidden_state_layout_reason(model) or embedding_width_reason(model)
        if reason:
            raise ValueError(f"Model type {kind!r}: {reason}, which DFlash / EAGLE-3 drafters cannot read. Use "
                             "speculative_mode='classic' with a small draft model, or 'autoregressive'.")
    window = local_attention_window(model)
    if window is not None and window < capacity:
        raise ValueError(
            f"Model type {kind!r} limits attention to {window} tokens inside the model, and this call "
            f"needs {capacity} cache slots: speculative modes need every token of the call inside that window. Lower "
            f"max_new_tokens / the prompt length so prompt + max_new_tokens + the draft block fit in {window}.")
    decoder_layers(model)  # raises a clear error when the decoder keeps no layer list
    reason = engine_probe_reason(model)
    if reason:
        raise ValueError(
            f"Speculative modes cannot decode model type {kind!r} exactly: {reason}. Use stock generate() for this "
            "model (no speculative_mode); attention-only decoder models (Llama, Qwen, Mistral, Gemma, ...) are "
            "supported.")
    reason = prompt_window_reason(model, prompt_len)
    if reason:
        raise ValueError(f"Speculative modes cannot decode this call of model type {kind!r} exactly: {reason}, or "
                         "use stock generate() for it.")
