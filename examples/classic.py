"""Classic speculative decoding: a small draft LM proposes K tokens, the target verifies them in one forward.

    python examples/classic.py

Runs offline on a CPU with the embedded tiny world (an 8M-parameter target this project trained, and a 2M draft LM
sharing its tokenizer). Lossless: the output is the target's own greedy output.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen

tokenizer = AutoTokenizer.from_pretrained(hf_specgen.embedded_model("specgen-tiny"))
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny"),
                                                                dtype=hf_specgen.auto_dtype()))
draft_lm = AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny-draft"), dtype=hf_specgen.auto_dtype())

messages = [{"role": "user", "content": "Solve: 12 + 30"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
out = target.generate(input_ids, assistant_model=draft_lm, speculative_mode="classic", num_draft_tokens=4,
                      max_new_tokens=64, return_dict_in_generate=True)
reference = target.generate(input_ids, max_new_tokens=64)
print(tokenizer.decode(out.sequences[0, input_ids.shape[1]:], skip_special_tokens=True))
print("identical to stock greedy generate:", torch.equal(out.sequences, reference))
print(f"tokens per target forward: {out.speculative_stats.mean_acceptance_length:.2f}")
