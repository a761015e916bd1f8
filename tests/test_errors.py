"""Bad input gets a clear ValueError/TypeError naming the fix, never a shape error from inside a model."""

from __future__ import annotations

import pytest
import torch

import hf_specgen
from conftest import make_dflash, make_target

PROMPT = torch.tensor([[5, 6, 7, 8]])


@pytest.fixture(scope="module")
def pair():
    target = make_target("qwen3")
    return target, make_dflash(target)


def spec(target, drafter, **kwargs):
    kwargs = {"speculative_mode": "dflash", "max_new_tokens": 5, "do_sample": False, **kwargs}
    return target.generate(PROMPT, assistant_model=drafter, **kwargs)


def test_unknown_mode(pair):
    with pytest.raises(ValueError, match=r"Unknown speculative_mode='medusa'.*'dflash'"):
        spec(*pair, speculative_mode="medusa")


def test_mode_without_assistant(pair):
    with pytest.raises(ValueError, match="needs a drafter: pass assistant_model"):
        spec(pair[0], None)


def test_speculative_knob_without_mode(pair):
    with pytest.raises(ValueError, match="also pass speculative_mode"):
        pair[0].generate(PROMPT, block_size=4, max_new_tokens=3)


def test_autoregressive_mode_takes_no_drafter(pair):
    with pytest.raises(ValueError, match="uses no drafter: drop assistant_model"):
        spec(*pair, speculative_mode="autoregressive")
    with pytest.raises(ValueError, match="drafts nothing: drop block_size"):
        pair[0].generate(PROMPT, speculative_mode="autoregressive", block_size=4, max_new_tokens=3)


def test_stock_max_cache_len_reaches_stock_generate(pair):
    """max_cache_len is also a stock argument (static caches): a call without speculative_mode must not eat it."""
    target = pair[0]
    ref = target.generate(PROMPT, max_new_tokens=4, do_sample=False)
    out = target.generate(PROMPT, max_new_tokens=4, do_sample=False, cache_implementation="static", max_cache_len=64)
    assert out.tolist() == ref.tolist()


def test_hidden_size_mismatch(pair):
    target, _ = pair
    other = make_target("qwen3", hidden_size=32, head_dim=8)
    with pytest.raises(ValueError, match="hidden size 32 != target hidden size 64.*another target"):
        spec(target, make_dflash(other))


def test_layer_ids_out_of_range(pair):
    target, _ = pair
    with pytest.raises(ValueError, match=r"taps target layers \[1, 7\].*4 layers"):
        spec(target, make_dflash(target, layer_ids=[1, 7]))


def test_trained_for_other_depth(pair):
    target, _ = pair
    drafter = make_dflash(target)
    drafter.config.num_target_layers = 36
    with pytest.raises(ValueError, match="trained for a 36-layer target"):
        spec(target, drafter)


def test_mask_token_outside_vocab(pair):
    target, _ = pair
    drafter = make_dflash(target)
    drafter.mask_token_id = 151669
    with pytest.raises(ValueError, match="mask_token_id=151669 is not a row of the target's embedding"):
        spec(target, drafter)


def test_block_larger_than_trained(pair):
    with pytest.raises(ValueError, match="block_size=16 is larger than the drafter's trained block size 8"):
        spec(*pair, block_size=16)


@pytest.mark.parametrize("bad", [1, "8", 0])
def test_bad_block_size(pair, bad):
    with pytest.raises(ValueError, match="block_size must be an int >= 2"):
        spec(*pair, block_size=bad)



@pytest.mark.parametrize("bad", ["max_autotune", "reduce-overhead", 2])
def test_bad_compile_setting_names_the_ones_there_are(pair, bad):
    with pytest.raises(ValueError, match="compile must be True, False, 'auto' or 'max-autotune'"):
        spec(*pair, speculative_compile=bad)

def test_beam_search(pair):
    with pytest.raises(ValueError, match="do not support beam search: use num_beams=1"):
        spec(*pair, num_beams=2)


def test_classifier_free_guidance_is_refused_before_decoding(pair):
    """guidance_scale's processor keeps a cache of its own, one token per call: a verify would put it out of step
    (it gave other tokens than stock before this refusal)."""
    target, drafter = pair
    with pytest.raises(ValueError, match="guidance_scale"):
        target.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=4, guidance_scale=1.5, assistant_model=drafter,
                        speculative_mode="dflash")


@pytest.mark.parametrize("asked", ["output_hidden_states", "output_attentions"])
def test_per_token_hidden_states_or_attentions_are_refused_not_left_empty(pair, asked):
    """Stock generate returns them per token; a speculative call returned an output whose field was None."""
    with pytest.raises(ValueError, match="drop output_hidden_states / output_attentions"):
        spec(*pair, return_dict_in_generate=True, **{asked: True})
    assert spec(*pair, **{asked: True}).shape == (1, 9)  # without return_dict_in_generate stock returns none either


def test_num_return_sequences(pair):
    with pytest.raises(ValueError, match="num_return_sequences=1"):
        spec(*pair, num_return_sequences=2, do_sample=True)


def test_max_cache_len_sizes_the_cache_like_stock_generate(pair):
    from hf_specgen.engine.loop import _required_capacity

    assert _required_capacity(4, 5, 8, compiled=False, max_cache_len=None) == 17
    assert _required_capacity(4, 5, 8, compiled=True, max_cache_len=None) == 256
    assert _required_capacity(4, 5, 8, compiled=True, max_cache_len=1000) == 1000  # one size for every call
    assert _required_capacity(4, 5, 8, compiled=False, max_cache_len=10) == 17  # never too small
    ref = pair[0].generate(PROMPT, max_new_tokens=5, do_sample=False)
    assert spec(*pair, max_cache_len=10).tolist() == ref.tolist() == spec(*pair, max_cache_len=300).tolist()


def test_non_dflash_assistant(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="needs a DFlash drafter as assistant_model, got Qwen3ForCausalLM"):
        spec(target, make_target("qwen3", seed=2))


def test_dtype_mismatch(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="drafter is torch.bfloat16 and the target torch.float32"):
        spec(target, make_dflash(target).to(torch.bfloat16))


def test_bad_speculative_config_type(pair):
    with pytest.raises(TypeError, match="speculative_config must be a SpeculativeConfig or a dict"):
        spec(*pair, speculative_config=3)


def test_load_drafter_rejects_other_models(tmp_path):
    make_target("llama").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is not a drafter hf_specgen knows"):
        hf_specgen.load_drafter(str(tmp_path))


def test_enable_rejects_non_models():
    with pytest.raises(TypeError, match="expects a transformers model"):
        hf_specgen.enable(object())
