"""The tiny world's classic draft LM, default call, in batches, beside stock batched `generate`, in one process:

- ``current``: the engine as it is (the draft LM reads the prompt when it first drafts, and a probe's cost includes
  that read: ``WidthPolicy.read_seconds``);
- ``no-read-cost``: the same, but probes costed without the read (as before the read cost);
- ``eager``: also the prompt read as the call starts (as before both changes);
- ``plain``: the engine's plain steps (``speculative_mode="autoregressive"``), the width every round could take.

Each drafting variant has its own draft model object (so its own carried estimates); per batch size the first 2
batches of the 30 tiny-world prompts (left-padded), 96 new tokens, REPEATS passes in turns; prints each call's speed
over stock's (medians).

    python docs/benchmarks/draft_lm_lazy_prompt/batch_ab.py bfloat16 4,8,16 [REPEATS]

With MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 and float32 for an AVX2-only CPU's
`auto` dtype.
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import hf_specgen  # noqa: E402
from hf_specgen.bench.prompt_sets import load_prompt_set  # noqa: E402
from hf_specgen.drafters import draft_lm  # noqa: E402
from hf_specgen.engine import width_policy  # noqa: E402

torch.set_num_threads(1)
dtype, sizes = getattr(torch, sys.argv[1]), [int(size) for size in sys.argv[2].split(",")]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 4
models = ROOT / "hub_models"
tokenizer = AutoTokenizer.from_pretrained(models / "specgen-tiny")
tokenizer.padding_side = "left"
target = AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype)
hf_specgen.enable(target)
VARIANTS = ("current", "no-read-cost", "eager")
drafters = {name: AutoModelForCausalLM.from_pretrained(models / "specgen-tiny-draft", dtype=dtype) for name in VARIANTS}
Proposer, Policy = draft_lm.DraftModelProposer, width_policy.WidthPolicy
lazy_start, read_seconds = Proposer.start, Policy.read_seconds


def eager_start(self, session, prompt_features):  # the prompt read as the call starts, as before
    lazy_start(self, session, prompt_features)
    self._catch_up(session.last_slots - 1)


def use(name):
    Proposer.start = eager_start if name == "eager" else lazy_start
    Policy.read_seconds = read_seconds if name == "current" else (lambda self: 0.0)


texts = [tokenizer.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False,
                                       add_generation_prompt=True) for p in load_prompt_set("tinyworld")]
for size in sizes:
    batches = [texts[i:i + size] for i in range(0, len(texts) - size + 1, size)][:2]
    seconds = {name: [] for name in ("stock", *VARIANTS, "plain")}
    for _ in range(repeats):
        for name in seconds:
            use(name)
            start = time.perf_counter()
            for batch in batches:
                encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
                if name == "stock":
                    target.generate(**encoded, do_sample=False, max_new_tokens=96)
                elif name == "plain":
                    target.generate(**encoded, speculative_mode="autoregressive", max_new_tokens=96)
                else:
                    target.generate(**encoded, assistant_model=drafters[name], speculative_mode="classic",
                                    max_new_tokens=96)
            seconds[name].append(time.perf_counter() - start)
    use("current")
    stock = statistics.median(seconds["stock"])
    print(f"batch {size}: " + " ".join(f"{name} {stock / statistics.median(times):.3f}x"
                                       for name, times in seconds.items() if name != "stock"), flush=True)
