"""Sampling on a hybrid target follows its distribution (issue 28): a chi-square check too slow for the test suite.

Batches of 2 identical prompts on a small random Qwen3.5-style target (linear-attention layers, vocabulary of 8);
each row samples on its own and both commit the fewest tokens either accepted, so drafts are accepted and cut. The
drafter proposes the target's greedy continuation. The joint law of the first three new tokens (1,500 samples) is
compared with the target's exactly enumerated one. About 3 minutes on one CPU core (transformers' reference
linear-attention kernels).

    python scripts/hybrid_sampling_check.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the sampling test's exact enumeration

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessorList, StoppingCriteriaList
import hf_specgen
from hf_specgen.architectures import small_config
from hf_specgen.engine.loop import SpeculativeDecoder


def main() -> None:
    from scipy.stats import chisquare
    from test_sampling import SAMPLES, STEPS, VOCAB, GreedySelfProposer, exact_joint
    config = small_config("qwen3_5_text")
    config.vocab_size, config.bos_token_id, config.eos_token_id, config.pad_token_id = VOCAB, None, None, None
    torch.manual_seed(4)
    target = hf_specgen.enable(AutoModelForCausalLM.from_config(config).float().eval())
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(2.0)
    prompt = torch.tensor([[1, 3, 5, 2, 4]])
    expected = exact_joint(target, prompt, LogitsProcessorList())
    decoder = SpeculativeDecoder(target, GreedySelfProposer(target), "test", compile_steps=False)
    torch.manual_seed(1234)
    counts, accepted, rows = dict.fromkeys(expected, 0), 0, 2
    config = GenerationConfig(max_length=prompt.shape[1] + STEPS, do_sample=True, top_k=None, return_dict_in_generate=True)
    for _ in range(SAMPLES // rows):
        out = decoder.generate(prompt.repeat(rows, 1), None, config, LogitsProcessorList(), StoppingCriteriaList())
        for row in out.sequences[:, prompt.shape[1]:].tolist():
            counts[tuple(row)] += 1
        accepted += sum(a - 1 for row in out.speculative_stats.row_acceptance_lengths for a in row)
    kept = [c for c in expected if expected[c] * SAMPLES >= 5]
    rest = [c for c in expected if c not in kept]
    observed = [counts[c] for c in kept] + [sum(counts[c] for c in rest)]
    predicted = [expected[c] * SAMPLES for c in kept] + [sum(expected[c] for c in rest) * SAMPLES]
    predicted = [p * SAMPLES / sum(predicted) for p in predicted]
    pvalue = chisquare(observed, predicted).pvalue
    print(f"{SAMPLES} samples, {accepted} accepted drafts, {len(kept)} cells with 5+ expected: chi-square p = {pvalue:.3g}")
    assert accepted > 60 and len(kept) > 20 and pvalue > 1e-3


if __name__ == "__main__":
    main()
