"""FLy (lossy, opt-in): keeps a draft token the target disagreed with when the target was unsure and agreed with
the following draft tokens. Faster, but the output is no longer exactly the target's: measure accuracy first.

    python examples/fly.py

Offline on a CPU with the embedded tiny world: FLy over a draft LM, and FLy over DFlash blocks.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen

tokenizer = AutoTokenizer.from_pretrained(hf_specgen.embedded_model("specgen-tiny"))
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny"),
                                                                dtype=hf_specgen.auto_dtype()))
draft_lm = AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny-draft"), dtype=hf_specgen.auto_dtype())
dflash = hf_specgen.load_drafter(hf_specgen.embedded_model("specgen-tiny-dflash-b16"), dtype=hf_specgen.auto_dtype())

messages = [{"role": "user", "content": "Write a short story about a lighthouse."}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
reference = target.generate(input_ids, max_new_tokens=96)
for name, assistant in (("draft LM", draft_lm), ("DFlash", dflash)):
    out = target.generate(input_ids, assistant_model=assistant, speculative_mode="fly", fly_window=6,
                          fly_entropy_threshold=0.3, max_new_tokens=96, return_dict_in_generate=True)
    stats = out.speculative_stats
    print(f"FLy over {name}: lossy={stats.lossy}, identical to stock: {torch.equal(out.sequences, reference)}, "
          f"{stats.rescued_tokens} draft tokens kept against the target's choice, "
          f"tokens per target forward {stats.mean_acceptance_length:.2f}")
