"""Speculative decoding with a published DFlash drafter: Qwen3-8B with z-lab's drafter on a GPU.

    python examples/quickstart.py

Without a GPU, or when the Hugging Face Hub cannot be reached, it says so and runs the same code on the models
shipped with hf_specgen instead: SmolLM2-135M-Instruct with this project's drafter once `specgen prepare` has run,
else the embedded tiny world. Either way it prints tokens per second beside stock `generate`'s and whether the answer
is token for token the target's own.
"""

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen
from hf_specgen.targets import is_prepared

HUB_TARGET, HUB_DRAFTER = "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"


def load_models():
    """(tokenizer, enabled target, DFlash drafter, device): the Hub pair on a GPU, else the embedded models."""
    if torch.cuda.is_available():
        try:
            tokenizer = AutoTokenizer.from_pretrained(HUB_TARGET)
            target = AutoModelForCausalLM.from_pretrained(HUB_TARGET, dtype=torch.bfloat16, device_map="cuda")
            draft = hf_specgen.load_drafter(HUB_DRAFTER, dtype=torch.bfloat16).to("cuda")
            return tokenizer, hf_specgen.enable(target), draft, "cuda"
        except OSError as error:
            print(f"The Hub could not be reached ({str(error).splitlines()[0]}): using the embedded models.")
    else:
        print("No GPU here: using the models embedded in hf_specgen instead of Qwen3-8B.")
    if is_prepared("smollm2-135m-instruct"):  # auto_dtype: bf16 only where the CPU has bf16 units
        target, tokenizer = hf_specgen.load_target("smollm2-135m-instruct", dtype=hf_specgen.auto_dtype())
        draft = hf_specgen.load_drafter(hf_specgen.embedded_model("smollm2-135m-instruct-dflash-b16"),
                                        dtype=hf_specgen.auto_dtype())
        return tokenizer, target, draft, "cpu"
    print("(SmolLM2-135M-Instruct is not prepared: `specgen prepare` installs it; using the 8M-parameter tiny world.)")
    folder = hf_specgen.embedded_model("specgen-tiny")
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(folder, dtype=hf_specgen.auto_dtype()))
    draft = hf_specgen.load_drafter(hf_specgen.embedded_model("specgen-tiny-dflash-b16"), dtype=hf_specgen.auto_dtype())
    return AutoTokenizer.from_pretrained(folder), target, draft, "cpu"


tokenizer, target, draft, device = load_models()
messages = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"].to(device)


def timed_generate(**kwargs):
    """(generate's output, its wall-clock seconds: prefill and decode)."""
    start = time.perf_counter()
    result = target.generate(input_ids, max_new_tokens=128, do_sample=False, **kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


out, first_seconds = timed_generate(assistant_model=draft, speculative_mode="dflash", return_dict_in_generate=True)
print(tokenizer.decode(out.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
stats = out.speculative_stats
print(f"\ntau = {stats.mean_acceptance_length:.2f} tokens per target forward over {stats.num_rounds} rounds")
reference, stock_seconds = timed_generate()
# The first speculative call in a process also times this machine's forwards once (about a second on a CPU), kept on
# the model for every later call: the second call runs at the speed later calls do.
again, second_seconds = timed_generate(assistant_model=draft, speculative_mode="dflash")
rates = [(ids.shape[1] - input_ids.shape[1]) / seconds
         for ids, seconds in ((reference, stock_seconds), (out.sequences, first_seconds), (again, second_seconds))]
print(f"tokens/s with the prefill: stock generate {rates[0]:.1f}, DFlash {rates[1]:.1f} in the first call (the "
      f"one-time timing included), {rates[2]:.1f} in the next")
# bf16 (the auto dtype on a CPU with bf16 units): a verify of several tokens may round a near-tie differently from
# stock's one-token steps, and the texts part there; float32 is exact
BF16_NOTE = " (bf16 near-tie: load the models with dtype=torch.float32 for the exact tokens)"
same = torch.equal(out.sequences, reference)
print(f"identical to stock greedy generate: {same}{'' if same or target.dtype == torch.float32 else BF16_NOTE}")
