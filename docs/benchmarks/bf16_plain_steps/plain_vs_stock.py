"""Does the engine's plain decoding (one token per step, no drafter) give stock generate's tokens in bf16? Batch 1, the
real target, the bench's 16 prompts (HumanEval, GSM8K, MT-Bench, QA), 96 new tokens, one thread. For each prompt:
whether the texts are equal, and the largest difference of the logits of the first new token (the prefill) and of
the next five (plain steps). Run from the repository root (after `specgen prepare`):

    python docs/benchmarks/bf16_plain_steps/plain_vs_stock.py [DTYPE]   # bfloat16 (default) or float32"""
import sys, torch
import hf_specgen
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_specgen.bench.prompt_sets import pick_prompts
from hf_specgen.targets import resolve_target
torch.set_num_threads(1)
dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.bfloat16
path = resolve_target("smollm2-135m-instruct"); tok = AutoTokenizer.from_pretrained(path)
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval())
CATS = ("humaneval", "math_reasoning", "mt_bench", "qa")
records = [r for r in pick_prompts(["specbench", "humaneval"], 4) if r.get("category") in CATS]
equal = 0
for record in records:
    chat = tok.apply_chat_template([{"role": "user", "content": record["prompt"]}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(chat, return_tensors="pt", add_special_tokens=False)
    common = dict(**ids, max_new_tokens=96, do_sample=False, output_logits=True, return_dict_in_generate=True)
    stock = target.generate(**common)
    plain = target.generate(**common, speculative_mode="autoregressive")
    same = torch.equal(stock.sequences, plain.sequences)
    equal += same
    gaps = [float((a.float() - b.float()).abs().max()) for a, b in zip(stock.logits[:6], plain.logits[:6])]
    print(f"{record['category']:15s} prompt {ids['input_ids'].shape[1]:4d} tokens  same text: {same!s:5s}  "
          f"largest logit difference, prefill {gaps[0]:.4f}, steps 1-5 {max(gaps[1:]):.4f}")
print(f"{dtype}: {equal} of {len(records)} texts equal stock generate's")
