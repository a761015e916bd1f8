"""Hybrid targets (issue 28): linear-attention / convolution layers whose state the engine snapshots before a verify
and re-feeds after it. Exact in every chain mode, in batches, or refused before decoding with the reason."""

from __future__ import annotations

import random

import pytest
import torch

import hf_specgen
from hf_specgen.architectures import _assistant, _build, small_config
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

from hf_specgen.engine.loop import SpeculativeDecoder
from test_engine import ScriptedProposer

HYBRID_TYPES = ["qwen3_5_text", "qwen3_next", "lfm2"]
# Mamba-style mixers: Mamba-2 layers beside attention layers (Granite 4.0 H), and a recurrent mixer side by side with
# attention inside one layer (kind "hybrid")
SSM_TYPES = ["granitemoehybrid", "zaya"]  # (Falcon-H1, the same kind as Zaya, in the architecture walk: 17 s here)
# LFM2's default config has attention layers only: give it its short-convolution layers
LAYERS = {"lfm2": ["conv", "full_attention", "conv"]}


def hybrid_target(model_type: str, seed: int = 0):
    config = small_config(model_type)
    if model_type in LAYERS:
        config.layer_types = LAYERS[model_type]
        config.num_hidden_layers = len(config.layer_types)
    return hf_specgen.enable(_build(model_type, config, seed))  # peaked logits: no fp32 near-ties


def prompt_of(rng: random.Random, length: int, vocab: int) -> torch.Tensor:
    return torch.tensor([[rng.randrange(3, vocab - 2) for _ in range(length)]])


@pytest.mark.parametrize("model_type", HYBRID_TYPES + SSM_TYPES)
def test_partly_accepted_drafts_roll_the_recurrent_states_back(model_type):
    """A drafter that knows the target's continuation, corrupted at random: every acceptance length occurs, and the
    tokens and the logits of every new position are stock greedy's, so each round's states were put back and re-fed
    exactly (the logits also catch a wrong state that happens not to change the argmax)."""
    target = hybrid_target(model_type)
    vocab = target.get_input_embeddings().num_embeddings
    rng = random.Random(1)
    lengths = set()
    for case, corrupt in enumerate((0.15, 0.4)):
        prompt = prompt_of(rng, rng.randint(3, 30), vocab)
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None, output_logits=True,
                              return_dict_in_generate=True)
        decoder = SpeculativeDecoder(target, ScriptedProposer(ref.sequences, 6, corrupt, seed=case), "test", False)
        config = GenerationConfig(max_length=prompt.shape[1] + 40, do_sample=False, eos_token_id=None,
                                  return_dict_in_generate=True, output_logits=True)
        out = decoder.generate(prompt, None, config, LogitsProcessorList(), StoppingCriteriaList())
        assert out.sequences.tolist() == ref.sequences.tolist(), (model_type, corrupt)
        torch.testing.assert_close(torch.cat(out.logits), torch.cat(ref.logits), atol=2e-4, rtol=1e-4)
        lengths |= set(out.speculative_stats.acceptance_lengths)
    assert len(lengths) > 3, lengths


CHAIN_CALLS = {  # mode -> extra generate() arguments
    "autoregressive": {},
    "dflash": {},  # the default call: the width policy mixes plain steps and drafts of several widths
    "dflash-b4": {"block_size": 4},
    "eagle3": {"eagle_top_k": 1},
    "classic": {},
    "whiflash": {"eagle_top_k": 1},
}


def assistant_for(call: str, target):
    mode = call.split("-")[0]
    if mode == "whiflash":
        return hf_specgen.WhiFlash(ar=_assistant("eagle3", target), parallel=_assistant("dflash", target),
                                   router="entropy")
    return _assistant(mode, target)


@pytest.mark.parametrize("model_type", HYBRID_TYPES + ["zaya"])
def test_every_chain_mode_gives_stock_tokens_alone_and_in_padded_batches(model_type):
    target = hybrid_target(model_type, seed=2)
    vocab = target.get_input_embeddings().num_embeddings
    rng = random.Random(7)
    prompts = [prompt_of(rng, length, vocab) for length in (4, 13)]
    width = max(p.shape[1] for p in prompts)
    batch = torch.cat([torch.nn.functional.pad(p, (width - p.shape[1], 0), value=0) for p in prompts])
    mask = torch.cat([torch.nn.functional.pad(torch.ones_like(p), (width - p.shape[1], 0)) for p in prompts])
    for call, extra in CHAIN_CALLS.items():
        assistant = assistant_for(call, target)
        mode = call.split("-")[0]
        for prompt in prompts:
            expected = target.generate(prompt, max_new_tokens=20, do_sample=False)
            got = target.generate(prompt, assistant_model=assistant, speculative_mode=mode, max_new_tokens=20,
                                  do_sample=False, **extra)
            assert got.tolist() == expected.tolist(), (model_type, call, prompt.shape[1])
        expected = target.generate(batch, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)
        got = target.generate(batch, attention_mask=mask, assistant_model=assistant, speculative_mode=mode,
                              max_new_tokens=16, do_sample=False, pad_token_id=0, **extra)
        assert got.tolist() == expected.tolist(), (model_type, call, "batch")


def test_fly_on_a_hybrid_target_judges_with_the_logits_of_a_clean_forward():
    """FLy (lossy) keeps some mismatched drafts, so its tokens are not stock's; what must still hold is that every
    committed position was judged on the target's true logits after that output's own prefix (one clean forward
    over the output), which a verify over wrongly rolled-back states would not give."""
    target = hybrid_target("qwen3_5_text", seed=3)
    vocab = target.get_input_embeddings().num_embeddings
    rng = random.Random(3)
    kept_mismatches = 0
    for _ in range(3):
        prompt = prompt_of(rng, rng.randint(4, 20), vocab)
        out = target.generate(prompt, assistant_model=_assistant("dflash", target), speculative_mode="fly",
                              max_new_tokens=24, do_sample=False, return_dict_in_generate=True, output_logits=True,
                              fly_window=0, block_size=4)
        with torch.no_grad():
            clean = target(out.sequences).logits[0, prompt.shape[1] - 1: -1]  # [new, V]
        torch.testing.assert_close(torch.cat(out.logits), clean, atol=2e-4, rtol=1e-4)
        kept_mismatches += int((clean.argmax(-1) != out.sequences[0, prompt.shape[1]:]).sum())
    assert kept_mismatches > 0  # FLy did keep mismatched drafts: its rollback path was exercised


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "lfm2", "zaya"])
def test_compiled_chain_steps_roll_the_recurrent_states_back(model_type, monkeypatch):
    """torch.compile'd verify steps (inductor on a CPU; CUDA graphs are scripts/gpu_check.py's) with drafts of which
    two of three are right, so every round restores the states and re-feeds three committed rows between graph calls."""
    from hf_specgen.drafters.dflash import DFlashProposer

    target = hybrid_target(model_type)
    prompt = prompt_of(random.Random(3), 9, target.config.vocab_size)
    reference = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None)[0].tolist()
    real_propose = DFlashProposer.propose

    def two_right_then_wrong(self, width=None):
        block = real_propose(self, width)  # [1, 4]
        length = self.session.host_lengths[0]
        upcoming = reference[length: length + 3] + [0, 0, 0]
        block[0, 1:] = torch.tensor([upcoming[0], upcoming[1], (upcoming[2] + 1) % target.config.vocab_size])
        return block

    out = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None,
                          speculative_mode="autoregressive", speculative_compile=True)
    assert out[0].tolist() == reference
    monkeypatch.setattr(DFlashProposer, "propose", two_right_then_wrong)
    out = target.generate(prompt, assistant_model=assistant_for("dflash", target), speculative_mode="dflash",
                          block_size=4, max_new_tokens=24, do_sample=False, eos_token_id=None,
                          speculative_compile=True, return_dict_in_generate=True)
    assert out.sequences[0].tolist() == reference
    assert out.speculative_stats.acceptance_lengths[:-1] == [3] * (len(out.speculative_stats.acceptance_lengths) - 1)


@pytest.mark.parametrize("call, extra, named", [
    ("dflash", {"dflash_tree_nodes": 8}, "tree branch"),
    ("eagle3", {"eagle_top_k": 2, "eagle_total_tokens": 8}, "tree branch"),
])
def test_trees_are_refused_before_decoding(call, extra, named):
    target = hybrid_target("qwen3_5_text")
    prompt = torch.tensor([[5, 9, 22, 41]])
    with pytest.raises(ValueError, match=named) as error:
        target.generate(prompt, assistant_model=_assistant(call, target), speculative_mode=call, max_new_tokens=8,
                        do_sample=False, **extra)
    assert "Qwen3_5ForCausalLM" in str(error.value)


def test_a_model_keeping_state_outside_its_cache_layers_is_refused():
    """The probe rolls a verify back before comparing logits: a layer that keeps its own state (here a running sum
    added by a hook) fails it, so such a model is refused instead of decoding wrong tokens."""
    target = hybrid_target("qwen3_5_text", seed=4)
    carried = {}

    def leak(module, args, output):  # remembers every token it has seen, outside any cache
        total = carried.get("sum", torch.zeros_like(output[:, :1])) + output.sum(1, keepdim=True)
        carried["sum"] = total.detach()
        return output + total

    target.model.layers[0].register_forward_hook(leak)
    with pytest.raises(ValueError, match="recurrent layers keep state outside"):
        target.generate(torch.tensor([[5, 9, 22, 41]]), speculative_mode="autoregressive", max_new_tokens=4,
                        do_sample=False)


@pytest.mark.parametrize("model_type, named", [
    ("jamba", "from a zero state, ignoring the state their cache holds"),  # transformers' reference Mamba scan
    ("inkling_text", "take positions from the cache's length"),  # relative position biases from get_query_offset
])
def test_recurrent_targets_that_cannot_verify_several_tokens_exactly_are_refused(model_type, named):
    """Jamba's Mamba layers run a forward of several tokens from a zero state whatever their cache holds (its verify
    logits drifted up to 8e-3 from stock's while the tokens still matched); Inkling's attention reads its positions
    from the cache's length. Both are refused before decoding, with the reason, instead of decoding near-right logits
    that a longer call would turn into wrong tokens."""
    target = hybrid_target(model_type)
    with pytest.raises(ValueError, match=named):
        target.generate(torch.tensor([[5, 9, 22, 41, 7, 13]]), assistant_model=_assistant("dflash", target),
                        speculative_mode="dflash", max_new_tokens=8, do_sample=False)


def test_a_hybrid_draft_model_is_refused_with_the_fix():
    target = hybrid_target("qwen3")  # attention-only target, hybrid draft LM
    with pytest.raises(ValueError, match="use an attention-only draft model"):
        target.generate(torch.tensor([[5, 9, 22, 41]]), assistant_model=hybrid_target("qwen3_5_text"),
                        speculative_mode="classic", max_new_tokens=4, do_sample=False)


def test_a_dflash_drafter_in_the_published_qwen3_5_layout_decodes_a_hybrid_target(tmp_path):
    """A drafter folder written in the layout of the published Qwen3.5 DFlash configs (model_type qwen3, block_size
    at the top level, dflash_config with target_layer_ids and mask_token_id, num_target_layers), here tapping both
    linear-attention and full-attention layers of a Qwen3.5-style target (three linear layers, then one full), loads
    unchanged and decodes exactly; with the published null mask_token_id it is refused with the fix."""
    import json

    from hf_specgen.models.dflash import DFlashDraftModel
    from transformers import Qwen3Config

    config = small_config("qwen3_5_text")
    config.layer_types = ["linear_attention"] * 3 + ["full_attention"]
    config.num_hidden_layers = 4
    target = hf_specgen.enable(_build("qwen3_5_text", config, seed=5))
    vocab, hidden = target.config.vocab_size, target.config.hidden_size
    published = {
        "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "attention_bias": False, "attention_dropout": 0.0, "block_size": 4,
        "dflash_config": {"mask_token_id": vocab - 1, "target_layer_ids": [0, 2, 3]},
        "dtype": "float32", "head_dim": hidden // 4, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": 64, "layer_types": ["full_attention"],
        "max_position_embeddings": 4096, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 1,
        "num_key_value_heads": 2, "num_target_layers": 4, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 10000000, "tie_word_embeddings": False, "use_cache": True, "vocab_size": vocab,
    }
    DFlashDraftModel(Qwen3Config(**published)).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(published))  # the published file, not ours
    drafter = hf_specgen.load_drafter(tmp_path, dtype=torch.float32)
    assert drafter.target_layer_ids == [0, 2, 3] and drafter.block_size == 4
    prompt = prompt_of(random.Random(5), 11, vocab)
    expected = target.generate(prompt, max_new_tokens=24, do_sample=False)
    for extra in ({}, {"block_size": 4}):
        got = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=24,
                              do_sample=False, **extra)
        assert got.tolist() == expected.tolist(), extra

    published["dflash_config"]["mask_token_id"] = None  # as SpecForge's Qwen3.5 DFlash training configs leave it
    (tmp_path / "config.json").write_text(json.dumps(published))
    with pytest.raises(ValueError, match="set `dflash_config.mask_token_id` to a reserved token"):
        target.generate(prompt, assistant_model=hf_specgen.load_drafter(tmp_path, dtype=torch.float32),
                        speculative_mode="dflash", max_new_tokens=4, do_sample=False)
