"""Why the engine's plain steps part from stock's in bf16: the prefill of one bench prompt (the 245-token MT-Bench one,
where the two prefills' logits differ) through the target's forward with the engine's arguments, then with one thing
changed at a time; each line prints how far the last position's logits are from stock `generate`'s, and the
attention call (SDPA) each makes in layer 0.

    python docs/benchmarks/bf16_plain_steps/attention_path.py [PROMPT_INDEX]
"""

import functools
import sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, StaticCache

import hf_specgen
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target

torch.set_num_threads(1)
path = resolve_target("smollm2-135m-instruct")
tokenizer = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval())
prompt = [r["prompt"] for r in pick_prompts(["specbench", "humaneval"], 4)][int(sys.argv[1]) if len(sys.argv) > 1 else 7]
ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                    return_tensors="pt", return_dict=True)["input_ids"]
length = ids.shape[1]
forward, prefills = target.forward, []


@functools.wraps(forward)  # (the engine reads the forward's signature)
def recording(*args, **kwargs):  # the engine's prefill: its arguments
    if kwargs.get("input_ids") is not None and kwargs["input_ids"].shape[1] == length:
        prefills.append(kwargs)
    return forward(*args, **kwargs)


target.forward = recording
target.generate(ids, max_new_tokens=1, do_sample=False, speculative_mode="autoregressive")
target.forward = forward
engine = prefills[0]
stock = target.generate(ids, max_new_tokens=1, do_sample=False, output_logits=True,
                        return_dict_in_generate=True).logits[0][0].float()
mask = engine["attention_mask"]  # [1, 1, P, K]: the engine's additive mask over K cache slots
slots = mask.shape[-1]
plain = {"input_ids": ids, "position_ids": engine["position_ids"]}
sdpa, calls = F.scaled_dot_product_attention, []


def spying(q, k, v, attn_mask=None, **kwargs):
    calls.append(f"q {tuple(q.shape)} k {tuple(k.shape)} mask "
                 f"{None if attn_mask is None else (str(attn_mask.dtype), tuple(attn_mask.shape))} "
                 f"is_causal {kwargs.get('is_causal')} enable_gqa {kwargs.get('enable_gqa')}")
    return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)


def static():
    return StaticCache(config=target.config, max_cache_len=slots)


cases = [
    ("the engine's prefill (its cache and mask)", dict(engine)),
    ("the engine's mask over a transformers StaticCache of K slots", {**plain, "attention_mask": mask, "cache": static()}),
    ("the same mask as booleans", {**plain, "attention_mask": mask == 0, "cache": static()}),
    ("the same mask in fp32 with -inf", {**plain, "cache": static(), "attention_mask": torch.zeros(
        mask.shape).masked_fill(mask != 0, float("-inf"))}),
    ("no mask: transformers' own, over the same StaticCache", {**plain, "cache": static()}),
    ("no mask, a DynamicCache (stock's prefill)", {**plain, "cache": DynamicCache(config=target.config)}),
]
F.scaled_dot_product_attention = spying
print(f"prompt of {length} tokens; the engine's mask {tuple(mask.shape)} {mask.dtype}")
with torch.no_grad():
    for name, kwargs in cases:
        calls.clear()
        if isinstance(kwargs.get("cache"), StaticCache):
            kwargs["cache_position"] = torch.arange(length)
        logits = forward(**{k: v for k, v in kwargs.items() if k != "use_cache"}).logits[0, -1].float()
        print(f"{name}: logits {float((logits - stock).abs().max()):.4f} off stock's; layer 0: {calls[0]}")
F.scaled_dot_product_attention = sdpa
