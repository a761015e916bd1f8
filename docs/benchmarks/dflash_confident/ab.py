"""ab.py DTYPE REPEATS [MAX_NEW_TOKENS]: tried, not kept (2026-11-30): DFlash's default call verifying the width its
block's own probabilities say the drafts are worth, as token-by-token drafters do on a CPU (WidthPolicy.
confident_width). The variants patch the DFlash proposer here; the engine is unchanged. On the tiny world in the
bench's order (code, math, prose, 10 prompts each, per pass), each variant with its own drafter, in one process;
speed over stock generate (wall time with the prefill), medians of REPEATS passes after one warm-up, and tau:

  default     the engine as it is: the width the estimate chose, drafted and verified whole
  unsure      the block drafted to the estimate's reach, ended after the first draft at which the product of its
              probabilities falls below UNSURE_STOP (as a chain stops), then confident_width
  calibrated  the same, each probability first mapped to how often drafts of its tenth were kept (CALIBRATION)
  no stop     calibrated, and the block never ended early: confident_width alone picks among the reach's widths
  b16         the fixed block of 16 (block_size=16)

    python docs/benchmarks/dflash_confident/ab.py bfloat16 3
    python docs/benchmarks/dflash_confident/ab.py calibration bfloat16 [MAX_NEW_TOKENS]   # how often drafts are kept
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "benchmarks"))
import hf_specgen  # noqa: E402
from hf_specgen.drafters.dflash import DFlashProposer  # noqa: E402
from tiny_ab import CATEGORIES, run_in_bench_order, tiny_world_prompts  # noqa: E402

# how often a draft was kept (given the drafts before it were) against its probability under the drafter, tenth by
# tenth (0.0-0.1, ..., 0.9-1.0): `ab.py calibration bfloat16`, the tiny world's code, math and prose, b16
CALIBRATION = torch.tensor([0.05, 0.42, 0.46, 0.63, 0.50, 0.75, 0.83, 0.93, 0.88, 0.98])
torch.set_num_threads(1)
calibrating = sys.argv[1] == "calibration"
args = sys.argv[2:] if calibrating else sys.argv[1:]
dtype = getattr(torch, args[0])
repeats = 0 if calibrating else int(args[1])
max_new_at = 1 if calibrating else 2  # (calibration takes no REPEATS)
max_new = int(args[max_new_at]) if len(args) > max_new_at else 192
models = ROOT / "hub_models"
tok = AutoTokenizer.from_pretrained(models / "specgen-tiny")
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(models / "specgen-tiny", dtype=dtype))
variant = {"name": "default"}
draft_step, propose, init = DFlashProposer._draft_step, DFlashProposer.propose, DFlashProposer.__init__


def confident_step(self, block_ids, context_features, positions, mask, rows=None):
    """The engine's step, and each draft's probability: [B, rows-1] ids, [B, rows-1] probabilities."""
    hidden = self.drafter(self.embed(block_ids), context_features, positions, self.cache, mask, cache_block=True)
    logits = self.head(hidden[:, 1:rows]).float()
    best, columns = logits.max(dim=-1)
    probability = (best - logits.logsumexp(dim=-1)).exp()
    if variant["name"] in ("calibrated", "no stop"):
        probability = CALIBRATION[(probability * 10).long().clamp(max=9)]
    return self.head.token_ids(columns), probability


def confident_propose(self, width=None, whole_block=False, stop_below=None):
    rows = None if width is None or whole_block else width
    drafted, self.confidences = self._run_drafter(self._step, rows)
    if stop_below is not None and variant["name"] != "no stop":
        all_right = self.confidences.cumprod(dim=1).amax(dim=0)  # the surest row's, draft by draft
        unsure = (all_right < stop_below).nonzero()
        if len(unsure):
            n = int(unsure[0]) + 1
            drafted, self.confidences = drafted[:, :n], self.confidences[:, :n]
    return torch.cat([self.block_ids[:, :1], drafted], dim=1)


def patched_init(self, *a, **k):
    init(self, *a, **k)
    confident = variant["name"] in ("unsure", "calibrated", "no stop") or calibrating
    self.stops_when_unsure = confident  # the loop then drafts to the reach, stops unsure, verifies confident_width
    self._step.eager = confident_step.__get__(self) if confident else draft_step.__get__(self)
    self._step._fn = self._step.eager  # (eager: the step the runner calls)


DFlashProposer.__init__ = patched_init
DFlashProposer.propose = lambda self, width=None, whole_block=False, **k: (
    confident_propose(self, width, whole_block, **k) if self.stops_when_unsure else propose(self, width, whole_block))
ids = tiny_world_prompts(tok)

if calibrating:  # b16 rounds: each reached draft's probability, and whether it was kept
    log, kept, seen = [], torch.zeros(10), torch.zeros(10)

    def logged_propose(self, width=None, whole_block=False, **k):
        block = confident_propose(self, width, whole_block)
        log.append(self.confidences[0].tolist())
        return block

    DFlashProposer.propose = logged_propose
    drafter = hf_specgen.load_drafter(models / "specgen-tiny-dflash-b16", dtype=dtype)
    for c in CATEGORIES:
        for x in ids[c]:
            log.clear()
            out = target.generate(x, assistant_model=drafter, speculative_mode="dflash", block_size=16,
                                  max_new_tokens=max_new, return_dict_in_generate=True)
            for probabilities, committed in zip(log, out.speculative_stats.acceptance_lengths):
                for k, p in enumerate(probabilities[:committed]):  # drafts 0 .. committed-1 reached
                    tenth = min(int(p * 10), 9)
                    seen[tenth] += 1
                    kept[tenth] += k < committed - 1
    print("kept by tenth:", [round(float(k / max(s, 1)), 2) for k, s in zip(kept, seen)])
    print("drafts by tenth:", [int(s) for s in seen])
    sys.exit()

variants = ("default", "unsure", "calibrated", "no stop", "b16")
drafters = {name: hf_specgen.load_drafter(models / "specgen-tiny-dflash-b16", dtype=dtype) for name in variants}


def decode(name, x):
    return target.generate(x, assistant_model=drafters[name], speculative_mode="dflash", max_new_tokens=max_new,
                           return_dict_in_generate=True, **({"block_size": 16} if name == "b16" else {}))


run_in_bench_order(target, ids, variants, decode, lambda name: variant.__setitem__("name", name), repeats, max_new)
