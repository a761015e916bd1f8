"""EAGLE-3: a one-layer drafter fed with three of the target's hidden states drafts a tree, verified in one forward.

    python examples/eagle3.py

Offline on a CPU with the embedded tiny world. Lossless. `eagle_top_k=1` drafts a chain instead of a tree.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen

tokenizer = AutoTokenizer.from_pretrained(hf_specgen.embedded_model("specgen-tiny"))
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny"),
                                                                dtype=hf_specgen.auto_dtype()))
eagle = hf_specgen.load_drafter(hf_specgen.embedded_model("specgen-tiny-eagle3"), dtype=hf_specgen.auto_dtype())

messages = [{"role": "user", "content": "Complete this function:\ndef add(a, b):"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
reference = target.generate(input_ids, max_new_tokens=64)
for shape in ({"eagle_top_k": 4, "eagle_depth": 6, "eagle_total_tokens": 16}, {"eagle_top_k": 1, "num_draft_tokens": 5}):
    out = target.generate(input_ids, assistant_model=eagle, speculative_mode="eagle3", max_new_tokens=64,
                          return_dict_in_generate=True, **shape)
    print(f"{shape}: identical to stock greedy generate: {torch.equal(out.sequences, reference)}, "
          f"tokens per target forward: {out.speculative_stats.mean_acceptance_length:.2f}")
print(tokenizer.decode(reference[0, input_ids.shape[1]:], skip_special_tokens=True))
