"""The quickstart, offline on a CPU: a tiny random Qwen3 target and a DFlash drafter built from configs.

    python examples/quickstart_offline.py

Random weights: the output is lossless (identical to stock greedy generate) but the drafter accepts
almost nothing, so expect no speedup. Swap in real models as in examples/quickstart.py.
"""

import tempfile

import torch
from transformers import AutoModel, Qwen3Config, Qwen3ForCausalLM

import hf_specgen

torch.manual_seed(0)
geometry = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32)
target = Qwen3ForCausalLM(Qwen3Config(**geometry, num_hidden_layers=6)).eval()
draft = hf_specgen.DFlashDraftModel(Qwen3Config(
    **geometry, num_hidden_layers=2, block_size=8, num_target_layers=6,
    dflash_config={"mask_token_id": 999, "target_layer_ids": [1, 3]},
)).eval()

# Save and reload the drafter the way users get it from the Hub.
with tempfile.TemporaryDirectory() as folder:
    draft.save_pretrained(folder)
    draft = AutoModel.from_pretrained(folder, trust_remote_code=True)

hf_specgen.enable(target)
input_ids = torch.randint(0, 999, (1, 20))
out = target.generate(input_ids, assistant_model=draft, speculative_mode="dflash",
                      max_new_tokens=48, do_sample=False, return_dict_in_generate=True)
reference = target.generate(input_ids, max_new_tokens=48, do_sample=False)

print("new tokens:", out.sequences[0, 20:].tolist())
print("identical to stock greedy generate:", torch.equal(out.sequences, reference))
print("acceptance lengths per round:", out.speculative_stats.acceptance_lengths)
