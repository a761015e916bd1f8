"""Every decoder-only causal LM type of the installed transformers, built small, run in every speculative mode.

``walk_architectures()`` builds each type of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` from its default config shrunk to
a few layers (random weights, fp32), skips what is not a decoder-only text LM (encoder-decoders, encoders with an LM
head, multimodal composites), and for each mode compares greedy speculative ``generate`` with stock greedy
``generate`` on two prompts. A type that windows its attention (sliding windows, chunks, GPT-Neo's local layers,
Doge's dynamic mask) is walked again with its windows shrunk to 8 tokens and calls run past them. Plain decoding
also takes a left-padded batch whose rows a CPU prefills one by one (``engine/prefill.py``; forced here, where a
tiny model's forwards would not pay for it), against stock batched ``generate``. Each (type, mode) ends in one of:

  exact     the same tokens as stock generate
  refused   a ValueError from hf_specgen before decoding, whose message names the type's reason
  stock     stock generate itself fails on the tiny model (not ours to judge)
  WRONG     different tokens: a silent error, which the test forbids
  CRASH     any other exception: an obscure error, which the test forbids

``tests/test_architectures.py`` runs it and checks the support table in docs/architectures.md is this walk's result;
``specgen architectures --write-docs`` regenerates that table.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, field

import torch

MODES = ("autoregressive", "dflash", "classic", "eagle3")
SIZE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_hidden_layers=2, vocab_size=320, max_position_embeddings=512,
            # mixtures of experts and latent attention: their defaults make even two layers large
            num_experts=4, num_local_experts=4, n_routed_experts=4, moe_num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32, n_shared_experts=1, n_group=1,
            topk_group=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, word_embed_proj_dim=64, rotary_dim=8, attention_hidden_size=64,
            d_inner=128)
# Hybrid types whose default layer pattern, cut to two layers, keeps no attention layer (stock generate then fails
# too), or whose Mamba sizes do not follow hidden_size: one layer of each kind, as their released checkpoints mix them
# (Jamba, Bamba-9B, Granite 4.0 H).
_MAMBA_SIZES = dict(mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16)
SMALL_LAYOUTS = {
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1),
    "bamba": dict(attn_layer_indices=[1], **_MAMBA_SIZES),
    "granitemoehybrid": dict(layer_types=["linear_attention", "full_attention"], **_MAMBA_SIZES),
}
PROMPTS = ((12, 0), (23, 1))  # (length, seed): two prompts per type and mode
NEW_TOKENS = 16
# Types that window their attention are walked a second time with every window shrunk to WINDOW tokens and prompts on
# both sides of it, run past it: a mode must then be exact or refused (doge and moshi decoded wrong tokens there).
WINDOW, WINDOW_PROMPTS, WINDOW_NEW_TOKENS = 8, ((5, 2), (14, 3)), 20
BATCH_LENGTHS = (7, 19, 3, 12)  # a left-padded batch of plain decoding, each row prefilled alone
WINDOW_SETTINGS = ("sliding_window", "attention_chunk_size", "keep_window_size", "window_size")
MAX_PARAMETERS = 10_000_000


@dataclass
class ArchitectureResult:
    model_type: str
    outcomes: dict[str, str] = field(default_factory=dict)  # mode -> exact / refused / stock / WRONG / CRASH
    notes: dict[str, str] = field(default_factory=dict)  # mode -> the refusal or error message

    @property
    def status(self) -> str:
        values = set(self.outcomes.values())
        if values == {"exact"}:
            return "exact in every mode"
        if values & {"WRONG", "CRASH"}:
            return "BROKEN"
        if values == {"stock"}:
            return "not buildable small"
        if "exact" in values:
            return "partly refused"
        return "refused"


def decoder_only_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def apply_small_sizes(config) -> None:
    """Set SIZE's dimensions on ``config`` (a model's config or one of its sub-configs), in place, where it has them."""
    for name, value in SIZE.items():
        if getattr(config, "qk_rope_head_dim", None) and name in ("head_dim", "num_key_value_heads"):
            # latent attention: RoPE runs over the qk_rope part of each head, and every head has its own K/V
            value = SIZE["qk_rope_head_dim"] if name == "head_dim" else SIZE["num_attention_heads"]
        try:
            declared = hasattr(config, name) or name in getattr(config, "attribute_map", {})
        except Exception:  # a per-layer attribute (Gemma 4) raises on its global name: set it where declared
            declared = name in vars(config) or hasattr(type(config), name)
        if declared:
            try:
                setattr(config, name, value)
            except (AttributeError, ValueError, TypeError):
                pass


def small_config(model_type: str):
    """The type's default config with small dimensions, or None when it is not a decoder-only text LM."""
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]()
    if getattr(config, "is_encoder_decoder", False):
        return None
    text = config.get_text_config(decoder=True)
    if text is not config:  # a composite (vision + text ...): its text model is walked under its own type
        return None
    apply_small_sizes(config)
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list) and len(layer_types) != SIZE["num_hidden_layers"]:
        # keep one layer of each kind the type has, in its order of appearance
        kinds = list(dict.fromkeys(layer_types))
        config.layer_types = (kinds * SIZE["num_hidden_layers"])[: max(len(kinds), SIZE["num_hidden_layers"])]
        config.num_hidden_layers = len(config.layer_types)
    for name, value in SMALL_LAYOUTS.get(model_type, {}).items():
        setattr(config, name, value)
    config.use_cache = True
    config.pad_token_id = None
    config.bos_token_id, config.eos_token_id = 1, None  # no stop token: every call runs NEW_TOKENS
    return config


def windowed_config(model_type: str):
    """``small_config`` with every attention window it sets shrunk to WINDOW tokens; None when it sets none."""
    config = small_config(model_type)
    if config is None:
        return None
    names = [name for name in WINDOW_SETTINGS if getattr(config, name, None)]
    if "window_size" in names and "local" not in (getattr(config, "attention_layers", None) or []):
        names.remove("window_size")  # only GPT-Neo's local layers call their window window_size
    if not names:
        return None
    for name in names:
        setattr(config, name, WINDOW)
    return config


def _build(model_type: str, config=None, seed: int = 0):
    """The type's small fp32 model (``config``: one built from ``small_config`` and adjusted), seeded, with peaked
    output logits; None when it is not a causal decoder."""
    from transformers import AutoModelForCausalLM

    config = config if config is not None else small_config(model_type)
    if config is None:
        return None
    with torch.device("meta"):  # count first: a type whose size keys are not the usual names stays large
        parameters = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    if parameters > MAX_PARAMETERS:
        raise RuntimeError(f"its default config shrinks only to {parameters / 1e6:.0f}M parameters")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    if getattr(model.config, "is_decoder", True) is False and hasattr(model.config, "is_decoder"):
        return None  # an encoder with an LM head (BERT-style): not a causal decoder
    output = model.get_output_embeddings()
    if output is not None and hasattr(output, "weight"):
        with torch.no_grad():  # peaked distributions, as real models have (random ones are near uniform)
            output.weight.mul_(8.0)
    return model


def _assistant(mode: str, target):
    """A random drafter for ``target`` (a random drafter is rarely accepted: exactness is what is tested)."""
    from transformers import LlamaConfig, Qwen3Config, Qwen3ForCausalLM

    from .models.dflash import DFlashDraftModel
    from .models.eagle3 import Eagle3DraftModel

    cfg = target.config.get_text_config(decoder=True)
    vocab = target.get_input_embeddings().num_embeddings
    hidden = cfg.hidden_size  # drafters read the target's hidden states
    layers = cfg.num_hidden_layers
    torch.manual_seed(1)
    if mode == "classic":  # a draft LM predicts over the target's output vocabulary
        vocab = getattr(target.get_output_embeddings(), "out_features", vocab)
        return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1, head_dim=16)).eval()
    if mode == "dflash":
        return DFlashDraftModel(Qwen3Config(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, head_dim=hidden // 4, num_target_layers=layers, block_size=4,
            dflash_config={"mask_token_id": vocab - 1, "target_layer_ids": sorted({0, layers - 1})})).eval()
    if mode == "eagle3":
        return Eagle3DraftModel(LlamaConfig(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, head_dim=hidden // 4, draft_vocab_size=vocab, rope_theta=10000.0,
            target_layer_ids=[0, layers - 1])).eval()
    return None


def walk_one(model_type: str, modes=MODES) -> ArchitectureResult | None:
    """Run ``modes`` on the type; None when it is not a decoder-only text LM."""
    result = ArchitectureResult(model_type)
    try:
        target = _build(model_type)
    except Exception as error:  # noqa: BLE001 (a type transformers cannot build small is reported, not ours)
        result.outcomes = {mode: "stock" for mode in modes}
        result.notes = {mode: f"build: {type(error).__name__}: {error}"[:300] for mode in modes}
        return result
    if target is None:
        return None
    _run_modes(result, target, modes, PROMPTS, NEW_TOKENS, window_pass=False)
    if "autoregressive" in modes and result.outcomes.get("autoregressive") == "exact":
        _grouped_prefill_pass(result, target)
    window_config = windowed_config(model_type)
    if window_config is not None and "WRONG" not in result.outcomes.values():
        try:
            windowed = _build(model_type, window_config)
        except Exception:  # noqa: BLE001 (a window this small may not build: the main pass stands)
            windowed = None
        if windowed is not None:
            _run_modes(result, windowed, modes, WINDOW_PROMPTS, WINDOW_NEW_TOKENS, window_pass=True)
    return result


def _run_modes(result: ArchitectureResult, target, modes, prompts, new_tokens: int, window_pass: bool) -> None:
    """Each mode on each prompt against stock greedy ``generate``. The main pass sets every mode's outcome (the
    first prompt that is not exact decides it); the window pass only turns a mode WRONG or CRASH (a refusal past a
    window of WINDOW tokens says nothing about the type's usual windows)."""
    from .mixin import enable

    enable(target)
    vocab = target.get_input_embeddings().num_embeddings
    settings = dict(max_new_tokens=new_tokens, do_sample=False)
    for length, seed in prompts:
        rng = random.Random(seed)
        prompt = torch.tensor([[rng.randrange(3, vocab - 2) for _ in range(length)]])
        try:
            expected: list | Exception = target.generate(prompt, **settings).tolist()
        except Exception as error:  # noqa: BLE001 (stock generate itself fails on this tiny model: not ours to judge,
            expected = error  # unless hf_specgen refuses the type anyway)
        for mode in modes:
            if result.outcomes.get(mode, "exact") != "exact" and not window_pass:
                continue  # an earlier prompt decided this mode
            outcome, note = _one_call(target, mode, prompt, settings, expected)
            if window_pass:
                if outcome in ("WRONG", "CRASH"):
                    result.outcomes[mode] = outcome
                    result.notes[mode] = f"past a window of {WINDOW} tokens: {note or 'different tokens'}"[:400]
                continue
            result.outcomes[mode] = outcome
            if note:
                result.notes[mode] = note


def _grouped_prefill_pass(result: ArchitectureResult, target) -> None:
    """Plain decoding of a left-padded batch of BATCH_LENGTHS prompts, each row prefilled alone (a forward's fixed
    cost set to nothing in the target's cost model): WRONG or CRASH where stock batched ``generate`` differs; a
    refusal of batches leaves the outcome of one prompt standing."""
    from .bench.batch_curve import left_padded
    from .engine.prefill import set_forward_overhead

    set_forward_overhead(target, 0.0)
    vocab = target.get_input_embeddings().num_embeddings
    rng = random.Random(7)
    prompts, attention_mask = left_padded(
        [torch.tensor([[rng.randrange(3, vocab - 2) for _ in range(n)]]) for n in BATCH_LENGTHS], 0)
    settings = dict(attention_mask=attention_mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    try:
        expected = target.generate(prompts, **settings).tolist()
    except Exception:  # noqa: BLE001 (stock generate cannot batch this tiny model: nothing to compare)
        return
    outcome, note = _one_call(target, "autoregressive", prompts, settings, expected)
    if outcome in ("WRONG", "CRASH"):
        result.outcomes["autoregressive"] = outcome
        result.notes["autoregressive"] = f"a padded batch prefilled row by row: {note or 'different tokens'}"[:400]


def _one_call(target, mode: str, prompt, settings: dict, expected) -> tuple[str, str | None]:
    """(outcome, note) of one speculative call against stock's ``expected`` tokens (or its exception)."""
    try:
        assistant = _assistant(mode, target)
        extra = {"eagle_top_k": 3, "eagle_depth": 3, "eagle_total_tokens": 8} if mode == "eagle3" else {}
        got = target.generate(prompt, assistant_model=assistant, speculative_mode=mode, **settings, **extra).tolist()
    except ValueError as error:  # refused when hf_specgen raised it (its messages name the fix)
        ours = any("/hf_specgen/" in frame.filename for frame in traceback.extract_tb(error.__traceback__)[-1:])
        # A refusal for failing the engine probe says nothing when stock generate fails as well.
        if ours and not (isinstance(expected, Exception) and "static cache and 4D" in str(error)):
            return "refused", str(error)[:400]
        got = error
    except Exception as error:  # noqa: BLE001 (judged below against stock generate)
        got = error
    if isinstance(expected, Exception):
        return "stock", f"stock generate: {type(expected).__name__}: {expected}"[:300]
    if isinstance(got, Exception):
        return "CRASH", f"{type(got).__name__}: {got}"[:400]
    return ("exact", None) if got == expected else ("WRONG", None)


def walk_architectures(types: list[str] | None = None, progress=None) -> list[ArchitectureResult]:
    results = []
    for model_type in types or decoder_only_types():
        result = walk_one(model_type)
        if result is not None:
            results.append(result)
        if progress is not None:
            progress(model_type)
    return results


README_START, README_END = "<!-- architectures:start -->", "<!-- architectures:end -->"


def _short_reason(message: str) -> str:
    """The part of a refusal that says why (the text between 'exactly: ' / the type and ', which')."""
    reason = message.split("exactly: ", 1)[-1].split(", which", 1)[0].split(". Use stock", 1)[0]
    return reason.split(": ", 1)[-1] if reason == message else reason


def support_table(results: list[ArchitectureResult], transformers_version: str, every_type: bool = True) -> str:
    """Markdown for docs/architectures.md: the types exact in every mode, then each other type with what it does per
    mode.
    ``every_type`` False: the walk covered only some types (``specgen architectures --types``)."""
    exact = [r.model_type for r in results if r.status == "exact in every mode"]
    walked = "every decoder-only causal LM type" if every_type else "the chosen decoder-only causal LM types"
    lines = [f"Walked by `tests/test_architectures.py` over {walked} of transformers "
             f"{transformers_version} ({len(results)} types, small random configs, fp32 greedy, prompts of "
             f"{' and '.join(str(n) for n, _ in PROMPTS)} tokens, {NEW_TOKENS} new tokens, modes {', '.join(MODES)}; "
             f"types that window their attention also past a window shrunk to {WINDOW} tokens, where a mode must be "
             f"exact or refused; autoregressive also on a left-padded batch of "
             f"{len(BATCH_LENGTHS)} prompts prefilled row by row; regenerate with `specgen architectures --write-docs`).",
             "",
             f"**Exact in every mode ({len(exact)}):** " + ", ".join(f"`{t}`" for t in exact) + ".", "",
             "| model type | " + " | ".join(MODES) + " | why |", "|---|" + "---|" * len(MODES) + "---|"]
    for result in results:
        if result.status == "exact in every mode":
            continue
        cells = [{"exact": "exact", "refused": "refused", "stock": "-", "WRONG": "**WRONG**",
                  "CRASH": "**error**"}[result.outcomes[mode]] for mode in MODES]
        reasons = list(dict.fromkeys(_short_reason(result.notes[m]) for m in MODES if m in result.notes))
        why = "; ".join(reasons) if result.status != "not buildable small" else \
            "stock generate cannot build or run it small here"
        lines.append(f"| `{result.model_type}` | " + " | ".join(cells) + f" | {why.replace('|', '/')} |")
    return "\n".join(lines)


def replace_readme_block(readme: str, table: str) -> str:
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    return readme[:start] + "\n" + table + "\n" + readme[end:]


def readme_block(readme: str) -> str:
    return readme[readme.index(README_START) + len(README_START): readme.index(README_END)].strip("\n")
