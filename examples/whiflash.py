"""WhiFlash: every round a router picks the EAGLE-3 drafter or the DFlash drafter for the next round.

    python examples/whiflash.py

Offline on a CPU with the embedded tiny world's bundle (both drafters, a trained router and calibrated entropy
thresholds in one folder). Lossless under every router (exact in float32; see BF16_NOTE).
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specgen

tokenizer = AutoTokenizer.from_pretrained(hf_specgen.embedded_model("specgen-tiny"))
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny"),
                                                                dtype=hf_specgen.auto_dtype()))
bundle = hf_specgen.load_drafter(hf_specgen.embedded_model("specgen-tiny-whiflash"), dtype=hf_specgen.auto_dtype())

messages = [{"role": "user", "content": "Solve: 7 * 6"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
reference = target.generate(input_ids, max_new_tokens=64)
# bf16 (the auto dtype on a CPU with bf16 units): a verify of several tokens may round a near-tie differently from
# stock's one-token steps, and the texts part there; float32 is exact
BF16_NOTE = " (bf16 near-tie: load the models with dtype=torch.float32 for the exact tokens)"
for router in ("neural", "entropy"):
    bundle.router = router
    out = target.generate(input_ids, assistant_model=bundle, speculative_mode="whiflash", max_new_tokens=64,
                          return_dict_in_generate=True)
    stats = out.speculative_stats
    same = torch.equal(out.sequences, reference)
    note = "" if same or target.dtype == torch.float32 else BF16_NOTE
    print(f"router {router}: identical to stock greedy generate: {same}{note}, "
          f"drafters per round: {''.join('E' if d == 'eagle3' else 'D' for d in stats.drafter_per_round)}")
