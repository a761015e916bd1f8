"""The shipped drafter folders carry what vLLM's and SGLang's drafter loaders read (docs/serving.md).

Every expectation below was read from the engines' own source and is cited next to its assertion:

  vLLM 0.33.0    the PyPI wheel `vllm==0.33.0` (built from commit 4ba787ec9), paths under vllm/
  SGLang 0.5.23  the PyPI wheel `sglang==0.5.23`, paths under sglang/srt/
  z-lab          github.com/z-lab/dflash @ 44947fbf71114e241c96de194f4b382b5dd330d0, dflash/model.py

Nothing here runs either engine (they need a GPU and were not installed): the tests read config.json and the
safetensors header (names, shapes, dtypes) of each folder, so they take well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from hf_specgen.loading import _is_eagle3_config
from hf_specgen.models.eagle3 import default_eagle3_layer_ids

ROOT = Path(__file__).resolve().parents[1]
HUB = ROOT / "hub_models"
VLLM_VERSION, SGLANG_VERSION, ZLAB_COMMIT = "0.33.0", "0.5.23", "44947fbf71114e241c96de194f4b382b5dd330d0"

# The targets the drafters were trained for. SmolLM2-135M-Instruct's config.json (HuggingFaceTB/SmolLM2-135M-Instruct,
# and the `specgen prepare` copy of it): 30 layers, width 576, 49152 tokens. The tiny target ships in hub_models/.
SMOLLM2 = {"num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}
TINY = json.loads((HUB / "specgen-tiny" / "config.json").read_text())
DFLASH = {"smollm2-135m-instruct-dflash-b16": SMOLLM2, "specgen-tiny-dflash-b16": TINY}
EAGLE3 = {"smollm2-135m-instruct-eagle3": SMOLLM2, "specgen-tiny-eagle3": TINY}

# Architecture names each engine resolves to the drafter class we target.
# vLLM: vllm/model_executor/models/registry.py, _SPECULATIVE_DECODING_MODELS; EAGLEConfig
# (vllm/transformers_utils/configs/eagle.py) keeps a name that starts with "DFlash" (method "dflash") or starts or ends
# with "Eagle3" (method "eagle3"); any other name gets that prefix before the registry lookup.
VLLM_DFLASH_ARCHS = {"DFlashDraftModel"}  # -> qwen3_dflash.DFlashQwen3ForCausalLM
VLLM_EAGLE3_LLAMA_ARCHS = {"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"}  # -> llama_eagle3.Eagle3LlamaForCausalLM
# SGLang: sglang/srt/models/registry.py maps each EntryClass by class name, with no rewrite of a draft's name for
# EAGLE3/DFLASH (configs/model_config.py); an unknown name only gets its generic Transformers backend.
SGLANG_DFLASH_ARCHS = {"DFlashDraftModel"}  # models/dflash.py EntryClass
SGLANG_EAGLE3_LLAMA_ARCHS = {"LlamaForCausalLMEagle3"}  # models/llama_eagle3.py EntryClass
# The one name in both sets: what a servable copy of our EAGLE-3 folders must say (docs/serving.md).
SERVABLE_EAGLE3_ARCH = "LlamaForCausalLMEagle3"


def _config(name: str) -> dict:
    return json.loads((HUB / name / "config.json").read_text())


def _header(name: str) -> dict[str, tuple[list[int], str]]:
    """{tensor name: (shape, dtype)} from the safetensors header; no tensor is read."""
    with safe_open(HUB / name / "model.safetensors", framework="pt") as f:
        return {key: (list(f.get_slice(key).get_shape()), f.get_slice(key).get_dtype()) for key in f.keys()}


def _head_dims(config: dict) -> tuple[int, int, int]:
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return head_dim, config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim


# ---------------------------------------------------------------------------------------------------------------
# DFlash
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_architecture_is_the_one_every_loader_dispatches_on(name):
    config = _config(name)
    # vLLM: registry "DFlashDraftModel" -> DFlashQwen3ForCausalLM; SGLang: EntryClass DFlashDraftModel;
    # z-lab: dflash/model.py class DFlashDraftModel (what auto_map names for transformers).
    assert config["architectures"] == ["DFlashDraftModel"]
    assert set(config["architectures"]) <= VLLM_DFLASH_ARCHS & SGLANG_DFLASH_ARCHS
    assert config["model_type"] == "qwen3"  # the config class z-lab's DFlashDraftModel declares (Qwen3Config)
    assert config["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}


@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_settings_sit_where_the_loaders_read_them(name):
    config, target = _config(name), DFLASH[name]
    nested = config["dflash_config"]
    layers = target["num_hidden_layers"]
    # Mask token: vLLM v1/spec_decode/llm_base_proposer.py reads dflash_config["mask_token_id"] first (then the top
    # level); SGLang speculative/dflash_utils.py parse_dflash_draft_config the same, and dflash_worker_v2.py
    # _resolve_mask_token_id refuses an id >= the target's vocab_size; z-lab reads dflash_config["mask_token_id"].
    mask = nested["mask_token_id"]
    assert isinstance(mask, int) and 0 <= mask < target["vocab_size"]
    # Taps: all three read dflash_config["target_layer_ids"]. They must be explicit: without them SGLang
    # (build_target_layer_ids) and z-lab fall back to one tap per drafter layer, not the taps fc was trained on.
    taps = nested["target_layer_ids"]
    assert isinstance(taps, list) and taps and all(isinstance(i, int) for i in taps)
    # SGLang DFlashDraftConfig.resolve_target_layer_ids: every id in [0, target layers).
    assert all(0 <= i < layers for i in taps) and taps == sorted(set(taps))
    # Block size: SGLang reads dflash_config["block_size"], else the top level (default 16); z-lab config.block_size.
    assert config["block_size"] == nested.get("block_size", config["block_size"]) == int(name.rsplit("-b", 1)[1])
    # SGLang warns when num_target_layers differs from the runtime target; z-lab uses it when the taps are absent.
    assert config["num_target_layers"] == layers
    # The top-level copies (transformers' own DFlash path reads those) agree with the nested values the engines read.
    assert config["mask_token_id"] == mask and config["target_layer_ids"] == taps
    # vLLM v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config reads a top-level
    # eagle_aux_hidden_state_layer_ids BEFORE dflash_config; qwen3_dflash.py merges eagle_config into the DFlash
    # settings. Neither may be present, or they would override the taps above.
    assert "eagle_aux_hidden_state_layer_ids" not in config and "eagle_config" not in config
    # vLLM DFlashQwen3Model: use_aux_hidden_state (dflash_config, then top level) defaults True; False drops fc.
    assert nested.get("use_aux_hidden_state", config.get("use_aux_hidden_state", True)) is True


@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_taps_are_layer_outputs_every_engine_can_capture(name):
    """Ours, z-lab's, vLLM's and SGLang's DFlash ids all name the OUTPUT of 0-based decoder layer i.

    Ours: hf_specgen/models/dflash.py reads hidden_states[i + 1]; z-lab extract_context_feature uses offset 1.
    vLLM: "Add 1 to convert DFlash's aux layer id semantics" (eagle3_utils.py, gpu_model_runner.py), and the target
    records aux id k after running layer k-1 (model_executor/models/interfaces.py, _maybe_add_hidden_state(idx + 1)),
    so id k = hidden_states[k]. SGLang set_dflash_layers_to_capture (models/llama.py, qwen3.py) captures "before
    layer i + 1", i.e. the output of layer i. Same layers everywhere, no conversion needed.
    """
    taps, layers = _config(name)["dflash_config"]["target_layer_ids"], DFLASH[name]["num_hidden_layers"]
    # SGLang's capture points are decoder-layer indices (it captures before layer i + 1 inside its layer loop), so the
    # output of the last layer has no capture point: every tap must be at most L - 2.
    assert all(0 <= i <= layers - 2 for i in taps)
    # vLLM's capture ids i + 1 lie in 1..L (id 0 would be the embedding output).
    assert all(1 <= i + 1 <= layers for i in taps)


@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_attention_and_rope_are_what_the_engines_build(name):
    config, target = _config(name), DFLASH[name]
    nested = config["dflash_config"]
    # Non-causal full attention in every layer (our drafter's block attention): vLLM qwen3_dflash.py
    # _dflash_layer_causal / _resolve_layer_attention and SGLang models/dflash.py _get_dflash_layer_attention_params
    # make "full_attention" layers non-causal unless is_causal / dflash_config.causal says otherwise; SGLang wants
    # one layer_types entry per drafter layer.
    assert config["layer_types"] == ["full_attention"] * config["num_hidden_layers"]
    assert config.get("is_causal") is None and nested.get("causal") is None
    assert not nested.get("use_swa", False) and not config.get("use_sliding_window", False)
    # RoPE: vLLM fills a missing rope_theta with 1e6 (set_default_rope_theta in DFlashQwen3DecoderLayer), so the
    # trained base must be written; both engines default to NeoX-style rotation (rotate_half, ours) when unset.
    assert config["rope_parameters"]["rope_type"] == "default" and config["rope_parameters"]["rope_theta"] > 0
    assert config.get("is_neox_style", True) is True and config.get("rope_is_neox_style", True) is True
    # Width: vLLM sizes fc as target_hidden_size (else hidden_size) times the tap count; SGLang hidden_size times it.
    assert config["hidden_size"] == target["hidden_size"]
    assert config.get("target_hidden_size") in (None, target["hidden_size"])
    assert config["attention_bias"] is False  # no bias tensors are shipped (qkv_proj bias follows attention_bias)


def _dflash_tensor_names(n_layers: int) -> set[str]:
    per_layer = [f"self_attn.{p}_proj.weight" for p in "qkvo"] + ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    per_layer += [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
    per_layer += ["input_layernorm.weight", "post_attention_layernorm.weight"]
    return {f"layers.{i}.{p}" for i in range(n_layers) for p in per_layer} | {"fc.weight", "hidden_norm.weight",
                                                                              "norm.weight"}


@pytest.mark.parametrize("name", sorted(DFLASH))
def test_dflash_tensor_names_and_shapes(name):
    config, target, header = _config(name), DFLASH[name], _header(name)
    # vLLM DFlashQwen3ForCausalLM.load_weights prefixes "model." and loads into layers.{i}.* (q/k/v -> qkv_proj,
    # gate/up -> gate_up_proj), fc, hidden_norm, norm; any other name makes AutoWeightsLoader raise. SGLang
    # DFlashDraftModel.load_weights loads the same names and silently skips the rest (so a missing one would stay
    # uninitialised). No embed_tokens / lm_head: vLLM then shares the target's (has_own_embed_tokens/has_own_lm_head
    # False), SGLang's DFlash drafter has neither; no d2t: vLLM expects one only when draft_vocab_size differs from the
    # target's vocabulary (it defaults to vocab_size); vLLM asserts no "mask_hidden" tensor.
    assert set(header) == _dflash_tensor_names(config["num_hidden_layers"])
    hidden, taps = config["hidden_size"], len(config["dflash_config"]["target_layer_ids"])
    head_dim, q_width, kv_width = _head_dims(config)
    assert header["fc.weight"][0] == [hidden, taps * hidden]  # vLLM combine_hidden_states checks this input width
    assert header["layers.0.self_attn.q_proj.weight"][0] == [q_width, hidden]
    assert header["layers.0.self_attn.k_proj.weight"][0] == [kv_width, hidden]
    assert header["layers.0.self_attn.q_norm.weight"][0] == [head_dim]
    assert config.get("draft_vocab_size", config["vocab_size"]) == config["vocab_size"] == target["vocab_size"]


# ---------------------------------------------------------------------------------------------------------------
# EAGLE-3
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_folders_are_served_from_a_copy_under_the_engines_class_name(name):
    """A known mismatch, documented in docs/serving.md with the copy that fixes it: save_pretrained writes our class
    name Eagle3DraftModel (tests/test_real_target.py needs architectures[0] to be the class AutoModel builds), which
    neither engine registers. If the exporters start writing an engine's name, this fails: update docs/serving.md."""
    # vLLM: Eagle3DraftModel is not in the registry, and EAGLEConfig keeps it unchanged (it starts with "Eagle3");
    # SGLang has no EntryClass of that name. Both then try only their generic Transformers backend
    # (vLLM registry.py _try_resolve_transformers, SGLang model_loader/utils.py resolve_transformers_arch).
    architecture = _config(name)["architectures"][0]
    assert architecture == "Eagle3DraftModel"
    assert architecture not in VLLM_EAGLE3_LLAMA_ARCHS | SGLANG_EAGLE3_LLAMA_ARCHS


@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_servable_copy_keeps_our_loaders(name):
    """The documented fix, architectures = ["LlamaForCausalLMEagle3"]: both engines load it, and we still read it."""
    config = _config(name)
    assert SERVABLE_EAGLE3_ARCH in VLLM_EAGLE3_LLAMA_ARCHS & SGLANG_EAGLE3_LLAMA_ARCHS
    servable = {**config, "architectures": [SERVABLE_EAGLE3_ARCH]}
    assert _is_eagle3_config(servable)  # hf_specgen.load_drafter recognises an EAGLE-3 config by "Eagle3" in the name
    assert servable["auto_map"] == {"AutoModel": "eagle3.Eagle3DraftModel"}  # AutoModel goes through auto_map
    assert servable["model_type"] == "llama"  # both engines' heads are Llama decoder layers built from a LlamaConfig


@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_config_keys_select_the_plain_eagle3_head(name):
    config, target = _config(name), EAGLE3[name]
    assert config["num_hidden_layers"] == 1  # our format; vLLM/SGLang give layer 0 the 2H-wide q/k/v input
    assert config["hidden_size"] == target["hidden_size"] and config["vocab_size"] == target["vocab_size"]
    # Own lm_head over draft_vocab_size: SGLang LlamaForCausalLMEagle3 ties lm_head to its embedding when
    # tie_word_embeddings is true and borrows the target's lm_head when draft_vocab_size is None; vLLM
    # Eagle3LlamaForCausalLM builds ParallelLMHead(draft_vocab_size) (vocab_size when absent).
    assert config["tie_word_embeddings"] is False
    assert isinstance(config["draft_vocab_size"], int) and 0 < config["draft_vocab_size"] <= target["vocab_size"]
    # SGLang builds q/k/v without bias; vLLM follows attention_bias; LlamaMLP follows mlp_bias.
    assert config["attention_bias"] is False and config.get("mlp_bias", False) is False and not config.get("bias")
    # Variant switches both engines read (vLLM llama_eagle3.py, SGLang llama_eagle3.py); absent/false is the plain
    # EAGLE-3 head we train: fc straight on the concatenated taps, hidden_norm after the residual is taken, the
    # pre-norm hidden state fed back to deeper steps.
    eagle_config = config.get("eagle_config") or {}
    for switch in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"):
        assert not config.get(switch) and not eagle_config.get(switch), switch
    assert eagle_config.get("use_aux_hidden_state", True) is True
    assert config.get("num_aux_hidden_states", 3) == 3
    assert config.get("target_hidden_size") in (None, target["hidden_size"])
    # Plain RoPE at the written base (the Llama attention of both engines reads rope_parameters).
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": config["rope_parameters"]["rope_theta"]}


@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_taps_are_both_engines_default(name):
    """No tap key is written, so both engines capture their default layers: these must be the ones we trained on.

    vLLM and SGLang read the same key, eagle_aux_hidden_state_layer_ids, in conventions one apart (below), so one
    value cannot serve both; with the key absent both fall back to capture points [2, L//2, L-3], the outputs of
    decoder layers [1, L//2-1, L-4] = our default_eagle3_layer_ids.
    """
    config, layers = _config(name), EAGLE3[name]["num_hidden_layers"]
    assert "eagle_aux_hidden_state_layer_ids" not in config
    assert "eagle_aux_hidden_state_layer_ids" not in (config.get("eagle_config") or {})
    ours = config["target_layer_ids"]  # hf_specgen: 0-based decoder-layer outputs (hidden_states[i + 1])
    assert ours == default_eagle3_layer_ids(layers)
    # vLLM: with no ids, SupportsEagle3.get_eagle3_default_aux_hidden_state_layers = (2, L//2, L-3)
    # (model_executor/models/interfaces.py), and aux id k is recorded after layer k-1
    # (_maybe_add_hidden_state(idx + 1)), i.e. hidden_states[k]. Its V2 runner (eagle3_utils.py) also reads a
    # top-level target_layer_ids, as ids + 1: the same layers again.
    vllm_default = [2, layers // 2, layers - 3]
    assert [i + 1 for i in ours] == vllm_default
    # SGLang set_eagle3_layers_to_capture (models/llama.py, qwen3.py): no ids -> layers_to_capture [2, L//2, L-3],
    # captured before layer k, i.e. the output of layer k-1; given ids it adds 1 ("for the ith layer, it takes the
    # output of the (i-1)th layer"), so SGLang's eagle_config ids would be ours as written.
    sglang_default_before = [2, layers // 2, layers - 3]
    assert [k - 1 for k in sglang_default_before] == ours


EAGLE3_LAYER = ["hidden_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight"]
EAGLE3_LAYER += [f"self_attn.{p}_proj.weight" for p in "qkvo"]
EAGLE3_LAYER += [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
EAGLE3_TENSORS = {f"midlayer.{p}" for p in EAGLE3_LAYER} | {"fc.weight", "norm.weight", "lm_head.weight"}


@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_tensor_names_and_shapes(name):
    config, header = _config(name), _header(name)
    # vLLM Eagle3LlamaForCausalLM.load_weights: midlayer. -> layers.0., "model." prefixed to all but lm_head, d2t ->
    # draft_id_to_target_id, t2d skipped, unknown names raise. SGLang LlamaForCausalLMEagle3.load_weights: midlayer ->
    # layers.0, d2t -> hot_token_id (d2t + arange), t2d skipped. No embed_tokens: vLLM then shares the target's
    # (has_own_embed_tokens False), SGLang's EAGLE3 worker calls set_embed with the target's.
    assert set(header) - {"d2t", "t2d"} == EAGLE3_TENSORS
    hidden, draft_vocab = config["hidden_size"], config["draft_vocab_size"]
    head_dim, q_width, kv_width = _head_dims(config)
    assert header["fc.weight"][0] == [hidden, 3 * hidden]  # num_aux_hidden_states defaults to 3 in both
    assert header["midlayer.self_attn.q_proj.weight"][0] == [q_width, 2 * hidden]  # [embedding ; hidden] input
    assert header["midlayer.self_attn.k_proj.weight"][0] == [kv_width, 2 * hidden]
    assert header["midlayer.self_attn.o_proj.weight"][0] == [hidden, q_width]
    assert header["lm_head.weight"][0] == [draft_vocab, hidden]


@pytest.mark.parametrize("name", sorted(EAGLE3))
def test_eagle3_d2t_is_what_each_vocabulary_needs(name):
    config, target, header = _config(name), EAGLE3[name], _header(name)
    # Both engines map draft id i to target id i + d2t[i] (vLLM compute_logits, SGLang hot_token_id); without d2t
    # vLLM keeps its zero-initialised map and SGLang no map at all, and draft ids would be read as target ids.
    assert header["d2t"] == ([config["draft_vocab_size"]], "I64")  # vLLM's draft_id_to_target_id is torch.long
    if config["draft_vocab_size"] == target["vocab_size"]:
        # A known mismatch for a full-vocabulary drafter (the tiny world's): vLLM 0.33.0 Eagle3LlamaForCausalLM sets
        # draft_id_to_target_id = None when draft_vocab_size equals the target's vocabulary, and a shipped d2t then
        # reaches AutoWeightsLoader as no parameter, which raises. Our remote-code class needs the buffer (a missing
        # one is left uninitialised by from_pretrained), so the folder keeps it; docs/serving.md says to serve a copy
        # without d2t/t2d.
        assert "full vocabulary" in (ROOT / "docs" / "serving.md").read_text()


# ---------------------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------------------

def test_serving_page_cites_the_sources_these_tests_read():
    page = (ROOT / "docs" / "serving.md").read_text()
    for fact in (f"vllm=={VLLM_VERSION}", f"sglang=={SGLANG_VERSION}", ZLAB_COMMIT, SERVABLE_EAGLE3_ARCH,
                 "--speculative-algorithm EAGLE3", "--speculative-algorithm DFLASH", '"method": "eagle3"',
                 '"method": "dflash"', *DFLASH, *EAGLE3):
        assert fact in page, fact
