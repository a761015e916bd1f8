"""The Hub custom_generate repo (hub_models/speculative-generate) on stock models that were never enabled."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

import hf_specgen
from conftest import GEOMETRY, make_dflash

REPO = str(Path(__file__).resolve().parents[1] / "hub_models" / "speculative-generate")


def _stock(config_cls, model_cls, **extra):
    torch.manual_seed(0)
    model = model_cls(config_cls(**GEOMETRY, **extra)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked distributions, like a trained model
    return model


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_custom_generate_runs_our_engine_on_a_stock_model_exactly(family):
    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[family]
    target = _stock(config_cls, model_cls, head_dim=16)
    cls = type(target)
    drafter = make_dflash(target, block_size=4)
    ids = torch.randint(3, 200, (1, 14))
    reference = target.generate(ids, max_new_tokens=24, do_sample=False)
    out = target.generate(ids, custom_generate=REPO, trust_remote_code=True, assistant_model=drafter,
                          speculative_mode="dflash", max_new_tokens=24, do_sample=False, return_dict_in_generate=True)
    assert torch.equal(out.sequences, reference)
    assert len(out.speculative_stats.acceptance_lengths) > 0  # our engine decoded it
    assert type(target) is cls and not isinstance(target, hf_specgen.SpecGenMixin)  # the model is left as it was


def test_custom_generate_needs_trust_remote_code_and_a_mode():
    target = _stock(Qwen3Config, Qwen3ForCausalLM, head_dim=16)
    ids = torch.randint(3, 200, (1, 8))
    with pytest.raises(ValueError, match="trust_remote_code"):
        target.generate(ids, custom_generate=REPO, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs speculative_mode="):
        target.generate(ids, custom_generate=REPO, trust_remote_code=True, max_new_tokens=4)


def test_custom_generate_repo_ends_at_stop_strings_as_stock_does():
    """The repo's calls go through the same path as an enabled model's: stop strings with the caller's tokenizer
    (which transformers does not hand a custom_generate callable) end the output where stock generate ends it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hub = Path(__file__).resolve().parents[1] / "hub_models"
    target = AutoModelForCausalLM.from_pretrained(hub / "specgen-tiny", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(hub / "specgen-tiny")
    drafter = hf_specgen.load_drafter(str(hub / "specgen-tiny-dflash-b16"), dtype=torch.float32)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Write a function that adds two numbers."}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    free = target.generate(ids, max_new_tokens=32, do_sample=False)
    stop = tokenizer.decode(free[0, ids.shape[1] + 8: ids.shape[1] + 10]).strip()
    call = dict(max_new_tokens=32, do_sample=False, stop_strings=[stop], tokenizer=tokenizer)
    reference = target.generate(ids, **call)
    assert reference.shape[1] < free.shape[1]
    out = target.generate(ids, custom_generate=REPO, trust_remote_code=True, assistant_model=drafter,
                          speculative_mode="dflash", **call)
    assert out.tolist() == reference.tolist()
