"""hf_specgen's speculative decoding as a transformers ``custom_generate`` recipe, for any stock causal LM.

    out = model.generate(input_ids, custom_generate="hf-specgen/speculative-generate", trust_remote_code=True,
                         assistant_model=drafter, speculative_mode="dflash", max_new_tokens=256)

transformers calls ``generate(model=..., **every generate() argument)``; the model is used as it is (its class is not
changed). Without ``speculative_mode`` (as an argument or in the generation config) the call is stock ``generate``.
"""

import functools

from transformers import GenerationMixin


def generate(model, *args, **kwargs):
    from hf_specgen.mixin import speculative_generate

    # transformers passes every generate() parameter, most of them None: leave those to their defaults
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    if "speculative_mode" not in kwargs and getattr(model.generation_config, "speculative_mode", None) is None:
        raise ValueError("custom_generate='hf-specgen/speculative-generate' needs speculative_mode= (dflash, eagle3, "
                         "whiflash, classic, fly or autoregressive) and, except for autoregressive, assistant_model=")
    stock = functools.partial(GenerationMixin.generate, model)
    return speculative_generate(model, stock, *args, **kwargs)
