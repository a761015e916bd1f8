"""``generate(..., speculative_mode=...)`` on any causal LM.

``enable(model)`` swaps the instance's class for a subclass that also inherits ``SpecGenMixin`` (no weight
copy; ``isinstance`` and the class name are kept, so ``save_pretrained`` writes the same config). The
mixin's ``generate`` hands a speculative call to stock ``generate`` with a ``custom_generate`` callable, so
transformers still prepares inputs, the generation config, logits processors and stopping criteria; without
``speculative_mode`` the call goes to stock ``generate`` untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import torch
from transformers.generation.stopping_criteria import StopStringCriteria, StoppingCriteriaList

from .config import SPECULATIVE_MODES, SpeculativeConfig
from .drafters.autoregressive import NoDraftProposer
from .drafters.dflash import DFlashProposer, DFlashTreeProposer
from .drafters.draft_lm import DraftModelProposer
from .drafters.eagle3 import Eagle3ChainProposer, Eagle3TreeProposer
from .engine.graphs import should_compile
from .engine.fly import FlyVerifier, reference_window
from .engine.loop import SpeculativeDecoder
from .engine.width_policy import COPY_WIDTH
from .inputs import check_mask_shape, check_prompt
from .loading import as_dflash_drafter, is_dflash_drafter
from .dtypes import warn_if_bf16_is_emulated
from .drafters.whiflash import WhiFlashProposer
from .models.eagle3 import Eagle3DraftModel
from .models.whiflash import WhiFlash

# generate() keyword arguments that configure the speculative call (SpeculativeConfig fields). The same names are read
# from the generation_config, so settings saved with it (generation_config.speculative_mode = "fly", ...) apply.
_FLAT_KWARGS = {"speculative_mode": "mode", "block_size": "block_size", "num_draft_tokens": "num_draft_tokens",
                "draft_confidence_threshold": "draft_confidence_threshold",
                "speculative_compile": "compile", "max_cache_len": "max_cache_len", "adaptive_width": "adaptive_width",
                "prompt_lookup": "prompt_lookup",
                **{name: name for name in SpeculativeConfig.field_names()
                   if name.startswith(("fly_", "eagle_", "dflash_tree_"))}}
_STOCK_KWARGS = {"max_cache_len"}  # also a stock generate argument: left alone in a non-speculative call


def _speculative_config(kwargs: dict, generation_config) -> SpeculativeConfig | None:
    """Pop the speculative settings out of generate's kwargs; None means a stock call.

    Precedence: keyword arguments, then ``speculative_config=``, then attributes of the generation config.
    """
    given = kwargs.pop("speculative_config", None)
    if given is None and kwargs.get("speculative_mode") is None and getattr(generation_config, "speculative_mode",
                                                                             None) is None:
        # A stock call: kwargs stay for stock generate (max_cache_len is also a stock argument in recent releases).
        ours = sorted(name for name in _FLAT_KWARGS if name in kwargs and name not in _STOCK_KWARGS)
        if ours:
            raise ValueError(f"{ours} only apply to speculative decoding: also pass speculative_mode= one of "
                             f"{', '.join(map(repr, SPECULATIVE_MODES))}.")
        kwargs.pop("speculative_mode", None)
        return None
    flat = {field: kwargs.pop(name) for name, field in _FLAT_KWARGS.items() if name in kwargs}
    saved = {field: getattr(generation_config, name) for name, field in _FLAT_KWARGS.items()
             if getattr(generation_config, name, None) is not None}
    if isinstance(given, dict):
        given = SpeculativeConfig(**given)
    if given is not None and not isinstance(given, SpeculativeConfig):
        raise TypeError(f"speculative_config must be a SpeculativeConfig or a dict, got {type(given).__name__}.")
    base = {f: getattr(given, f) for f in SpeculativeConfig.field_names()} if given is not None else saved
    return SpeculativeConfig(**{**base, **{k: v for k, v in flat.items() if v is not None}})


def stops_when_unsure(target, spec: SpeculativeConfig) -> bool:
    """Whether a token-by-token drafter (an EAGLE-3 chain, a draft LM) stops drafting when unsure: in the default call
    on a CPU (a host read per draft, which costs nothing there), not under FLy, whose verifier keeps drafts exact
    verification would refuse (see the width policy's UNSURE_STOP)."""
    return spec.adapts_width and spec.mode != "fly" and target.device.type == "cpu"


def _eagle3_proposer(drafter, target, spec: SpeculativeConfig, compile_steps: bool | str):
    """A dynamic tree (eagle_top_k > 1, not under FLy, whose rule is written for chains) or a chain."""
    top_k = spec.eagle_shape(target.device.type)
    if spec.mode != "fly" and top_k > 1:
        if spec.num_draft_tokens is not None:
            raise ValueError("num_draft_tokens sets an EAGLE-3 chain (eagle_top_k=1); a tree is sized by eagle_depth "
                             "and eagle_total_tokens.")
        return Eagle3TreeProposer(drafter, target, top_k, spec.eagle_depth, spec.tree_budget(top_k),
                                  compile_steps)
    return Eagle3ChainProposer(drafter, target, spec.draft_tokens(), compile_steps,
                               stops_when_unsure=stops_when_unsure(target, spec))


def _build_proposer(target, assistant_model, spec: SpeculativeConfig, compile_steps: bool | str):
    """The drafter side of the round, chosen by the mode and by what ``assistant_model`` is."""
    if spec.mode == "autoregressive":
        return NoDraftProposer()
    if spec.mode == "whiflash":  # assistant_model is a WhiFlash bundle (checked by _build_decoder)
        if not isinstance(assistant_model.ar, Eagle3DraftModel) or not is_dflash_drafter(assistant_model.parallel):
            raise ValueError("WhiFlash(ar=..., parallel=...) takes an EAGLE-3 drafter as ar and a DFlash drafter as "
                             "parallel.")
        ar = _eagle3_proposer(assistant_model.ar, target, spec, compile_steps)
        parallel = DFlashProposer(as_dflash_drafter(assistant_model.parallel), target, spec.block_size, compile_steps)
        return WhiFlashProposer(ar, parallel, target, assistant_model)
    if spec.mode == "dflash" or (spec.mode == "fly" and is_dflash_drafter(assistant_model)):
        if spec.num_draft_tokens is not None or spec.fly_ngram:
            raise ValueError("With a DFlash drafter the block is drafted in one forward: set block_size, not "
                             "num_draft_tokens / fly_ngram (those apply to a draft LM).")
        if spec.dflash_tree_nodes:
            return DFlashTreeProposer(as_dflash_drafter(assistant_model), target, spec.block_size, compile_steps,
                                      spec.dflash_tree_nodes, spec.dflash_tree_top_k)
        return DFlashProposer(as_dflash_drafter(assistant_model), target, spec.block_size, compile_steps)
    if spec.block_size is not None:
        raise ValueError("block_size applies to DFlash drafters; with a draft LM or EAGLE-3 set num_draft_tokens "
                         "(tokens drafted per round).")
    if spec.mode == "eagle3" or (spec.mode == "fly" and isinstance(assistant_model, Eagle3DraftModel)):
        if not isinstance(assistant_model, Eagle3DraftModel):
            raise ValueError(f"speculative_mode='eagle3' needs an EAGLE-3 drafter as assistant_model, got "
                             f"{type(assistant_model).__name__}: load one with hf_specgen.load_drafter(path).")
        if spec.fly_ngram:
            raise ValueError("fly_ngram applies to a draft LM, not to an EAGLE-3 drafter.")
        return _eagle3_proposer(assistant_model, target, spec, compile_steps)
    use_ngram = spec.mode == "fly" and spec.fly_ngram is not False
    return DraftModelProposer(assistant_model, target, spec.draft_tokens(), compile_steps, ngram=use_ngram,
                              confidence_threshold=spec.draft_confidence_threshold,
                              stops_when_unsure=stops_when_unsure(target, spec))


def _check_drafter(target, assistant_model, spec: SpeculativeConfig) -> None:
    """Errors that name the fix when ``assistant_model`` cannot serve ``spec.mode`` next to ``target``."""
    if spec.mode == "autoregressive":
        if assistant_model is not None:
            raise ValueError("speculative_mode='autoregressive' uses no drafter: drop assistant_model, or pick a "
                             "speculative mode for it ('dflash', 'classic', 'eagle3', 'whiflash', 'fly').")
        return
    if assistant_model is None:
        raise ValueError(
            f"speculative_mode={spec.mode!r} needs a drafter: pass assistant_model=... "
            "(a DFlash drafter, e.g. hf_specgen.load_drafter('z-lab/Qwen3-8B-DFlash-b16'), or for 'classic' / 'fly' "
            "a small causal LM with the target's tokenizer)."
        )
    drafter = as_dflash_drafter(assistant_model) if spec.mode == "dflash" else assistant_model
    if spec.mode == "whiflash" and not isinstance(assistant_model, WhiFlash):
        raise ValueError(f"speculative_mode='whiflash' needs a hf_specgen.WhiFlash(ar=eagle3_drafter, "
                         f"parallel=dflash_drafter, router=...) as assistant_model, got {type(assistant_model).__name__}.")
    device = drafter.device if isinstance(drafter, WhiFlash) else next(drafter.parameters()).device
    if device != target.device:
        raise ValueError(f"The drafter is on {device} and the target on {target.device}: move the drafter with .to({str(target.device)!r}).")
    target_dtype = target.get_input_embeddings().weight.dtype
    if drafter.dtype != target_dtype:
        raise ValueError(f"The drafter is {drafter.dtype} and the target {target_dtype}: load both in one dtype (drafter.to({target_dtype})).")


def _build_decoder(target, assistant_model, spec: SpeculativeConfig) -> SpeculativeDecoder:
    _check_drafter(target, assistant_model, spec)
    if spec.mode != "autoregressive":
        warn_if_bf16_is_emulated(target)
    # Compiled decoders are kept on the target so later calls reuse their graphs.
    compile_steps = should_compile(spec.compile, target.device)
    key = (id(assistant_model), dataclasses.astuple(spec), compile_steps)
    cached = getattr(target, "_hf_specgen_decoders", {})
    if key in cached:
        return cached[key]
    proposer = _build_proposer(target, assistant_model, spec, compile_steps)
    verifier = None
    if spec.mode == "fly":
        window = reference_window(spec.fly_window, spec.fly_window_convention)
        verifier = FlyVerifier(window, spec.fly_entropy_threshold, spec.fly_sampling_rule)
    if spec.prompt_lookup and getattr(proposer, "drafts_trees", False):
        raise ValueError("prompt_lookup puts copied tokens into a drafted block or chain, and this call drafts EAGLE-3 "
                         "trees: pass eagle_top_k=1 (a chain), or drop prompt_lookup.")
    decoder = SpeculativeDecoder(target, proposer, spec.mode, compile_steps, verifier=verifier,
                                 adaptive=spec.adapts_width, drafter=assistant_model,
                                 prompt_lookup=spec.looks_up(getattr(proposer, "drafts_trees", False)),
                                 lookup_in_batches=spec.prompt_lookup is True,
                                 copy_width=1 if spec.sets_width else COPY_WIDTH)
    if compile_steps:
        target._hf_specgen_decoders = {key: decoder}  # one at a time: caches are big
    return decoder


# Names of the inputs multimodal models take besides text (pixel_values, image_grid_thw, input_features, ...)
MEDIA_INPUTS = ("pixel_values", "image", "video", "audio", "input_features")


def check_media_inputs(kwargs: dict) -> None:
    """Refuse image / video / audio inputs before transformers processes them: the engine feeds token ids only."""
    media = sorted(name for name, value in kwargs.items() if value is not None and not (isinstance(value, dict)
                   and not value) and (name == "mm_encoder_outputs" or any(kind in name for kind in MEDIA_INPUTS)))
    if media:
        raise ValueError(f"Speculative modes decode text prompts only; this call also passes {', '.join(media)}. "
                         "Use stock generate() (no speculative_mode) for image, video or audio inputs.")


def _speculative_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                          *, decoder: SpeculativeDecoder, spec: SpeculativeConfig, streamer=None, **model_kwargs):
    """custom_generate callable: transformers has prepared everything, the engine decodes."""
    if generation_config.num_beams > 1:
        raise ValueError("Speculative modes do not support beam search: use num_beams=1.")
    if generation_config.num_return_sequences > 1:
        raise ValueError("Speculative modes return one sequence per prompt: use num_return_sequences=1.")
    if input_ids.shape[0] > 1:
        if generation_config.return_dict_in_generate and (generation_config.output_scores
                                                          or generation_config.output_logits):
            raise ValueError("output_scores / output_logits with speculative modes return one prompt's scores: call "
                             "generate once per prompt to get them, or drop them for the batch.")
    if generation_config.return_dict_in_generate and (generation_config.output_hidden_states
                                                      or generation_config.output_attentions):
        # A verify computes a round's tokens in one forward over a static cache; stock's per-token tuples (every
        # layer, the whole cache each step) would cost that forward's speed, so they are refused, not left empty.
        raise ValueError("Speculative modes do not return the per-token hidden_states or attentions of stock "
                         "generate: drop output_hidden_states / output_attentions, or call generate() without "
                         "speculative_mode for them.")
    if model_kwargs.get("past_key_values") is not None and model_kwargs["past_key_values"].get_seq_length() > 0:
        raise ValueError("Speculative modes allocate their own KV caches: do not pass a filled past_key_values.")
    if model_kwargs.get("inputs_embeds") is not None:
        raise ValueError("Speculative modes need input_ids (the drafter embeds tokens): pass input_ids, not inputs_embeds.")
    check_media_inputs(model_kwargs)  # what transformers derived from them (mm_encoder_outputs)
    check_prompt(model, input_ids)
    return decoder.generate(
        input_ids, model_kwargs.get("attention_mask"), generation_config, logits_processor, stopping_criteria,
        streamer=streamer, max_cache_len=spec.max_cache_len,
    )


def _passed_config(args, kwargs: dict):
    """The ``generation_config`` a ``generate`` call passed (keyword or second positional argument), or None."""
    return kwargs.get("generation_config", args[1] if len(args) > 1 else None)


def _generation_setting(model, name: str, args: tuple, kwargs: dict):
    """What stock ``generate`` would use for the generation-config field ``name``: the keyword argument, else the
    ``generation_config`` passed (a field it leaves unset takes the model's), else the model's."""
    if name in kwargs:
        return kwargs[name]
    value = getattr(_passed_config(args, kwargs), name, None)
    return value if value is not None else getattr(model.generation_config, name, None)


def _unset_generation_setting(model, name: str, args: list, kwargs: dict) -> None:
    """Take the field ``name`` out of the call wherever ``_generation_setting`` may have found it: a copy of a passed
    generation config without it, and ``name=None`` where the keyword or the model's own config carries it."""
    passed = _passed_config(args, kwargs)
    if getattr(passed, name, None) is not None:
        passed = copy.deepcopy(passed)
        setattr(passed, name, None)
        if "generation_config" in kwargs:
            kwargs["generation_config"] = passed
        else:
            args[1] = passed
    if name in kwargs or getattr(model.generation_config, name, None) is not None:
        kwargs[name] = None


def _apply_tokenizer_settings(model, args: tuple, kwargs: dict) -> tuple:
    """Carry out here what stock ``generate`` needs the caller's ``tokenizer`` for. transformers (5.24; not checked on older releases) takes
    ``tokenizer`` out of the call and hands a ``custom_generate`` callable only the callable's own extra parameters,
    so with ``stop_strings`` or ``token_healing`` it stops with "could not locate a tokenizer" or "you must pass the
    model's tokenizer", though the caller passed one. Stop strings become a ``StopStringCriteria`` made here from
    that tokenizer, among the caller's stopping criteria (the engine judges those after every token, as stock does);
    token healing heals the prompt here, with the model's own ``heal_tokens``, as stock does before decoding.
    Without a tokenizer the settings stay, and stock's error asks for one. Returns the positional arguments."""
    tokenizer = kwargs.get("tokenizer")
    if tokenizer is None:
        return args
    args = list(args)
    stop_strings = _generation_setting(model, "stop_strings", args, kwargs)
    if stop_strings:
        criterion = StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings)
        if len(args) > 3:
            args[3] = StoppingCriteriaList([*(args[3] or []), criterion])
        else:
            kwargs["stopping_criteria"] = StoppingCriteriaList([*(kwargs.get("stopping_criteria") or []), criterion])
        _unset_generation_setting(model, "stop_strings", args, kwargs)
    if _generation_setting(model, "token_healing", args, kwargs):
        name = "input_ids" if "input_ids" in kwargs else "inputs" if "inputs" in kwargs else None
        prompt = kwargs[name] if name else args[0] if args else None
        if not isinstance(prompt, torch.Tensor):
            return tuple(args)  # no prompt ids to heal: stock generate says what is missing
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and not bool(mask.all()):
            raise ValueError("token_healing re-tokenizes each prompt, so this padded batch's attention_mask would no "
                             "longer fit it: heal the prompts first (model.heal_tokens(input_ids, tokenizer)) and pad "
                             "them again, or drop token_healing.")
        healed = model.heal_tokens(prompt, tokenizer)
        if name:
            kwargs[name] = healed
        else:
            args[0] = healed
        if mask is not None:
            kwargs["attention_mask"] = torch.ones_like(healed)
        _unset_generation_setting(model, "token_healing", args, kwargs)
    return tuple(args)


def speculative_generate(model, stock_generate, *args, **kwargs):
    """``generate`` with ``speculative_mode=`` for ``model``: without it, exactly ``stock_generate(*args, **kwargs)``
    (transformers' own generate, bound to the model); with it, transformers prepares the call and our engine decodes.
    Shared by :class:`SpecGenMixin` and the Hub ``custom_generate`` repo (a stock model, never enabled)."""
    spec = _speculative_config(kwargs, _passed_config(args, kwargs) or model.generation_config)
    if spec is None:
        return stock_generate(*args, **kwargs)
    if kwargs.get("custom_generate") is not None:
        raise ValueError("speculative_mode and custom_generate cannot be combined: pass one of them.")
    check_mask_shape(kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None)), kwargs.get("attention_mask"))
    check_media_inputs(kwargs)
    args = _apply_tokenizer_settings(model, args, kwargs)
    assistant_model = kwargs.pop("assistant_model", None)
    streamer = kwargs.pop("streamer", None)
    decoder = _build_decoder(model, assistant_model, spec)
    decode = functools.partial(_speculative_generate, decoder=decoder, spec=spec, streamer=streamer)
    return stock_generate(*args, custom_generate=decode, **kwargs)


def release_compiled(model) -> None:
    """Free what compiled speculative calls keep on ``model`` for the next call: the decoder with its step graphs'
    static caches (one set, for the last call's batch size and cache size). The next compiled call builds them again;
    ``torch._dynamo.reset()`` also drops the compiled code itself."""
    model.__dict__.pop("_hf_specgen_decoders", None)


class SpecGenMixin:
    """Adds ``speculative_mode=`` to ``generate``. Put it first in the bases: ``class M(SpecGenMixin, Qwen3ForCausalLM)``."""

    def generate(self, *args, **kwargs):
        return speculative_generate(self, super().generate, *args, **kwargs)


_ENABLED_CLASSES: dict[type, type] = {}


def enable(model):
    """Give ``model`` (any *ForCausalLM instance) ``generate(..., speculative_mode=...)``, in place; returns it."""
    if isinstance(model, SpecGenMixin):
        return model
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "generate"):
        raise TypeError(f"hf_specgen.enable expects a transformers model with generate(), got {type(model).__name__}.")
    cls = type(model)
    if cls not in _ENABLED_CLASSES:
        # Same name and module as the original, so save_pretrained keeps `architectures` unchanged.
        _ENABLED_CLASSES[cls] = type(cls.__name__, (SpecGenMixin, cls), {"__module__": cls.__module__, "__doc__": cls.__doc__})
    model.__class__ = _ENABLED_CLASSES[cls]
    return model
