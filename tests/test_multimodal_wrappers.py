"""Multimodal checkpoints with text-only prompts (issue 28): ``AutoModelForCausalLM`` builds Gemma 3 / Gemma 4 as
their ``...ForConditionalGeneration`` wrappers, Qwen3.5 as ``Qwen3_5ForCausalLM`` (its text model, hybrid layers)
and Llama 4 as ``Llama4ForCausalLM``; each decodes text prompts exactly in every chain mode."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import CONFIG_MAPPING, AutoModelForCausalLM

import hf_specgen
from hf_specgen.architectures import _assistant, apply_small_sizes

WRAPPERS = {"gemma3": "Gemma3ForConditionalGeneration", "gemma4": "Gemma4ForConditionalGeneration",
            "qwen3_5": "Qwen3_5ForCausalLM", "llama4": "Llama4ForCausalLM"}
CALLS = {"autoregressive": {}, "dflash": {}, "eagle3": {"eagle_top_k": 1}, "classic": {}}


def small_multimodal(model_type: str):
    config = CONFIG_MAPPING[model_type]()
    text = config.get_text_config(decoder=True)
    apply_small_sizes(text)
    kinds = list(dict.fromkeys(getattr(text, "layer_types", None) or []))
    if kinds:  # one layer of each kind the type has, in order
        text.layer_types = (kinds * 2)[: max(2, len(kinds))]
        text.num_hidden_layers = len(text.layer_types)
    for name in ("vision_config", "audio_config"):
        if getattr(config, name, None) is not None:
            apply_small_sizes(getattr(config, name))
    torch.manual_seed(0)
    model = hf_specgen.enable(AutoModelForCausalLM.from_config(config).float().eval())
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # confident logits: no fp32 near-ties
    return model


@pytest.mark.parametrize("model_type", list(WRAPPERS))
def test_the_class_automodel_builds_decodes_text_prompts_exactly_in_every_chain_mode(model_type):
    model = small_multimodal(model_type)
    assert type(model).__name__ == WRAPPERS[model_type]
    vocab = model.get_input_embeddings().num_embeddings
    rng = random.Random(0)
    for length in (5, 17):
        prompt = torch.tensor([[rng.randrange(3, min(vocab, 30000) - 2) for _ in range(length)]])
        expected = model.generate(prompt, max_new_tokens=12, do_sample=False)
        for mode, extra in CALLS.items():
            got = model.generate(prompt, assistant_model=_assistant(mode, model), speculative_mode=mode,
                                 max_new_tokens=12, do_sample=False, **extra)
            assert got.tolist() == expected.tolist(), (model_type, mode, length)


def test_image_inputs_are_refused_with_the_fix():
    model = small_multimodal("gemma3")
    with pytest.raises(ValueError, match="text prompts only; this call also passes .*pixel_values.*stock generate"):
        model.generate(torch.tensor([[5, 9, 22, 41]]), pixel_values=torch.randn(1, 3, 32, 32), max_new_tokens=4,
                       do_sample=False, speculative_mode="autoregressive")
