"""At temperature > 0 the output distribution equals the target's (chi-square on a toy vocabulary)."""

from __future__ import annotations


import pytest
import torch
from scipy.stats import chisquare
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import hf_specgen
from hf_specgen.bench.batch_curve import left_padded
from hf_specgen.engine.loop import SpeculativeDecoder
from conftest import make_dflash, make_target
from test_eagle3 import make_eagle3


class GreedySelfProposer:
    """Drafts the target's own greedy continuation of the committed prefix: drafts are often accepted."""

    tapped_layer_ids = None
    block_size = 4

    def __init__(self, target):
        self.target = target

    def start(self, session, prompt_features):
        self.session = session

    def propose(self):
        # Every row's committed tokens, left-padded into one stock batched greedy call: [B, W] blocks.
        session = self.session
        ids, mask = left_padded([session.row(b) for b in range(session.batch_size)], pad_token_id=0)
        width = ids.shape[1]
        greedy = type(self.target).__mro__[2].generate(  # stock generate, no speculation
            self.target, ids, attention_mask=mask, max_new_tokens=self.block_size - 1, do_sample=False,
            min_new_tokens=self.block_size - 1
        )
        return greedy[:, width - 1:]

    def commit(self, features, n_committed):
        pass

VOCAB = 8  # tokens 0..6 are text, 7 is the drafter's mask token
STEPS = 3  # joint distribution of the first three generated tokens: 512 cells
SAMPLES = 1500


@torch.no_grad()
def exact_joint(target, prompt, warpers) -> dict[tuple, float]:
    """P(t1, t2, t3 | prompt) under the warped target distribution, enumerated exactly."""
    probs = {(): 1.0}
    for _ in range(STEPS):
        nxt = {}
        prefixes = list(probs)
        batch = torch.cat([torch.cat([prompt, torch.tensor([list(p)], dtype=torch.long)], 1) for p in prefixes])
        logits = target(batch).logits[:, -1].float()
        scores = warpers(batch, logits)
        dist = torch.softmax(scores, -1)
        for row, prefix in enumerate(prefixes):
            for tok in range(VOCAB):
                if dist[row, tok] > 0:
                    nxt[prefix + (tok,)] = probs[prefix] * float(dist[row, tok])
        probs = nxt
    return probs


@pytest.mark.parametrize(
    "proposer, sampling",
    [("dflash", dict(temperature=1.0)), ("dflash", dict(temperature=0.7, top_k=4)),
     ("dflash", dict(temperature=1.2, top_p=0.8)), ("greedy-self", dict(temperature=1.0)),
     ("dflash-tree", dict(temperature=1.0)), ("whiflash", dict(temperature=1.0)),
     ("dflash-any-widths", dict(temperature=1.0))],
)
def test_sampled_tokens_follow_target_distribution(proposer, sampling, monkeypatch):
    target = make_target("qwen3", vocab_size=VOCAB, pad_token_id=None, bos_token_id=None, eos_token_id=None, seed=4)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.25)  # keep the toy distributions spread out so many cells are populated
    drafter = make_dflash(target, block_size=4)
    drafter.config.dflash_config["mask_token_id"] = VOCAB - 1
    drafter.mask_token_id = VOCAB - 1
    prompt = torch.tensor([[1, 3, 5, 2, 4]])
    warpers = LogitsProcessorList([TemperatureLogitsWarper(sampling["temperature"])])
    if "top_k" in sampling:
        warpers.append(TopKLogitsWarper(sampling["top_k"]))
    if "top_p" in sampling:
        warpers.append(TopPLogitsWarper(sampling["top_p"]))
    expected = exact_joint(target, prompt, warpers)

    torch.manual_seed(1234)
    counts = dict.fromkeys(expected, 0)
    accepted_drafts, widths_seen = 0, set()
    oracle = SpeculativeDecoder(target, GreedySelfProposer(target), "test", compile_steps=False)
    # Samples come ROWS at a time: a batch of identical prompts draws each row independently (the batched acceptance
    # is the code under test; test_batch.py checks rows of different prompts). WhiFlash's rows vote at random, so its
    # batches switch between an EAGLE-3 tree and the DFlash block.
    rows = 25
    if proposer == "dflash-any-widths":  # the default call's width policy, each round's width drawn at random
        import random

        from hf_specgen.engine.width_policy import WidthPolicy

        rng = random.Random(7)
        monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: rng.choice(self.widths))
    bundle = hf_specgen.WhiFlash(ar=make_eagle3(target), parallel=drafter, router="random")
    for _ in range(SAMPLES // rows):
        if proposer.startswith("dflash"):  # "dflash-tree": DDTree-style trees of 6 nodes from the same drafter
            # The fixed block (or tree) every round: acceptance of every slot is under test.
            tree = ({"dflash_tree_nodes": 6} if proposer == "dflash-tree" else
                    {} if proposer == "dflash-any-widths" else {"adaptive_width": False})
            out = target.generate(prompt.repeat(rows, 1), assistant_model=drafter, speculative_mode="dflash",
                                  max_new_tokens=STEPS, do_sample=True, return_dict_in_generate=True, **sampling,
                                  **tree)
        elif proposer == "whiflash":
            out = target.generate(prompt.repeat(rows, 1), assistant_model=bundle, speculative_mode="whiflash",
                                  eagle_top_k=2, eagle_depth=3, eagle_total_tokens=5, max_new_tokens=STEPS,
                                  do_sample=True, return_dict_in_generate=True, **sampling)
        else:
            out = target.generate(prompt.repeat(rows, 1), max_new_tokens=STEPS, do_sample=True,
                                  return_dict_in_generate=True,
                                  custom_generate=lambda model, input_ids, logits_processor, stopping_criteria,
                                  generation_config, **kw: oracle.generate(input_ids, None, generation_config,
                                                                           logits_processor, stopping_criteria),
                                  **sampling)
        for row in out.sequences[:, prompt.shape[1]:].tolist():
            key = tuple(row)
            assert key in counts, f"sampled a sequence the warped target gives probability 0: {key}"
            counts[key] += 1
        accepted_drafts += sum(a - 1 for row in out.speculative_stats.row_acceptance_lengths for a in row)
        widths_seen.update(out.speculative_stats.round_widths)
    # Drafts really are accepted (the random drafter sometimes, the greedy one often): acceptance is under test.
    assert accepted_drafts > (SAMPLES // 4 if proposer == "greedy-self" else 40)
    if proposer == "dflash-any-widths":
        assert widths_seen == {1, 2, 4}  # plain steps and both prefixes of the block were sampled through

    # Pool rare cells so every expected count is >= 5 (chi-square validity).
    cells = sorted(expected, key=expected.get, reverse=True)
    observed, predicted, rest_o, rest_p = [], [], 0, 0.0
    for cell in cells:
        if expected[cell] * SAMPLES >= 5:
            observed.append(counts[cell]); predicted.append(expected[cell] * SAMPLES)
        else:
            rest_o += counts[cell]; rest_p += expected[cell] * SAMPLES
    if rest_p > 0:
        observed.append(rest_o); predicted.append(rest_p)
    predicted = [p * SAMPLES / sum(predicted) for p in predicted]
    result = chisquare(observed, predicted)
    assert len(observed) > 20
    assert result.pvalue > 1e-3, (result, sampling)
