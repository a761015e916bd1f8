"""Speculative decoding with a published DFlash drafter.

Needs network access to the Hugging Face Hub and a GPU (Qwen3-8B in bf16 is ~16 GB):
    python examples/quickstart.py
For a version that runs offline on a CPU, see examples/quickstart_offline.py.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen

TARGET = "Qwen/Qwen3-8B"
DRAFTER = "z-lab/Qwen3-8B-DFlash-b16"

tokenizer = AutoTokenizer.from_pretrained(TARGET)
target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.bfloat16, device_map="cuda")
draft = hf_specgen.load_drafter(DRAFTER, dtype=torch.bfloat16).to("cuda")
hf_specgen.enable(target)

messages = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
input_ids = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, enable_thinking=False, return_tensors="pt"
).to("cuda")

out = target.generate(input_ids, assistant_model=draft, speculative_mode="dflash",
                      max_new_tokens=256, do_sample=False, return_dict_in_generate=True)
print(tokenizer.decode(out.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
stats = out.speculative_stats
print(f"tau = {stats.mean_acceptance_length:.2f} tokens/round over {stats.num_rounds} rounds, "
      f"{stats.decode_tokens_per_second:.1f} decode tokens/s")

# z-lab's own entry point works on our class too:
ids = draft.spec_generate(input_ids=input_ids, target=target, max_new_tokens=256, temperature=0.0,
                          stop_token_ids=[tokenizer.eos_token_id])
