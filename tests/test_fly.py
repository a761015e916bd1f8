"""FLy: the policy's truth tables (spec's worked examples and more), the entropy, and the engine integration."""

from __future__ import annotations

import math

import pytest
import torch

from hf_specgen.engine.fly import (
    FlyVerifier, committed_prefix, fly_rescue, reference_window, top3_entropy,
)


def _exact(pattern: str) -> torch.Tensor:
    return torch.tensor([c == "T" for c in pattern])


def _rescued(pattern: str, window: int, theta: float = 0.3, entropy: float = 1.0) -> str:
    exact = _exact(pattern)
    flags = fly_rescue(exact, torch.full((len(pattern),), entropy), window, theta)
    return "".join("R" if f else "." for f in flags.tolist())


@pytest.mark.parametrize("pattern, window, expected, n", [
    ("TFTTTFTT", 4, ".R......", 5),  # spec example 1: slot 1 rescued, emit d0..d4 then the target token at 5
    ("FTTTTTTT", 6, "R.......", 8),  # spec example 2: all 8 plus the bonus
    ("TTFTTTTT", 6, "........", 2),  # spec example 3: slot 2 lies in the last 6 slots
    ("FTTTTTTT", 7, "R.......", 8),  # W=7: slot 0 <= K-W-1 = 0, its window slots 1..6 all match
    ("FTTTTTTT", 8, "........", 0),  # W=8: slot 0 is among the last 8 slots
    ("FTFTTTTT", 2, "R.R.....", 8),  # two mismatches, each judged on its own
    ("FFTTTTTT", 3, ".R......", 0),  # slot 0's window contains slot 1's mismatch; slot 1 alone would pass
    ("FTTTT", 6, ".....", 0),        # K < W: nothing can be rescued
    ("FTTFT", 0, "R..R.", 5),        # W=0: every gated mismatch is rescued, even the last slots
])
def test_truth_tables(pattern, window, expected, n):
    got = _rescued(pattern, window)
    assert got == expected
    final = _exact(pattern) | torch.tensor([c == "R" for c in got])
    assert committed_prefix(final) == n


def test_window_boundary_with_default_k15_w6():
    # With K=15, W=6 only slots 0..8 can be rescued.
    for j in range(15):
        pattern = "T" * j + "F" + "T" * (14 - j)
        assert (_rescued(pattern, 6)[j] == "R") == (j <= 8), j


def test_entropy_gate_and_its_off_switch():
    assert _rescued("FTTTTTTT", 6, theta=0.3, entropy=0.29) == "........"
    assert _rescued("FTTTTTTT", 6, theta=0.3, entropy=0.30) == "R......."
    assert _rescued("FTTTTTTT", 6, theta=0.01, entropy=0.0) == "R......."  # theta <= 0.01: gate off
    assert _rescued("FTTTTTTT", 6, theta=0.0, entropy=0.0) == "R......."


def test_vllm_window_convention_is_one_less():
    assert reference_window(6, "vllm") == 7 and reference_window(6, "reference") == 6
    assert reference_window(0, "vllm") == 0
    # vLLM W=5 (five following matches) behaves as reference W=6.
    assert _rescued("FTTTTTTT", reference_window(5, "vllm")) == _rescued("FTTTTTTT", 6)
    with pytest.raises(ValueError, match="fly_window_convention"):
        reference_window(6, "other")


def test_top3_entropy_by_hand():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.1, 0.1]))
    expect = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.1 * math.log(0.1))  # top 3 of the FULL softmax
    assert float(top3_entropy(logits)) == pytest.approx(expect, abs=1e-6)
    uniform3 = torch.tensor([0.0, 0.0, 0.0, -1e9])
    assert float(top3_entropy(uniform3)) == pytest.approx(math.log(3), abs=1e-6)
    assert float(top3_entropy(torch.tensor([30.0, 0.0, 0.0]))) < 1e-9
    # Not renormalized over the top 3: many equal tokens give 3 * (1/V) * log V, not ln 3.
    flat = torch.zeros(100)
    assert float(top3_entropy(flat)) == pytest.approx(3 * 0.01 * math.log(100), abs=1e-6)


def test_verifier_emits_draft_tokens_for_rescued_slots_and_target_token_after():
    vocab, k = 10, 6
    draft = torch.tensor([9, 1, 2, 3, 4, 5, 6])  # [last committed, d0..d5]
    target_tokens = [1, 7, 3, 4, 5, 6, 8]  # the target disagrees at slot 1 only; bonus 8
    logits = torch.full((k + 1, vocab), -5.0)
    for row, tok in enumerate(target_tokens):
        logits[row, tok] = 2.0
    logits[1, 2] = 1.9  # slot 1: a near tie between 7 and the draft's 2 -> high entropy
    verifier = FlyVerifier(window=3, theta=0.3)
    # Two batch rows: the case above, and the same block with a second mistake at the last slot, which lies in the
    # last W slots and is never rescued: row 2 keeps the rescue at slot 1 and stops at slot 5.
    late = draft.clone()
    late[-1] = 0
    decision = verifier.decide(torch.stack([draft, late]), torch.stack([logits, logits]),
                               torch.stack([logits, logits]), do_sample=False)
    n = decision.n_accepted.tolist()
    assert n == [6, 5] and decision.rescued.tolist() == [1, 1] and decision.mismatches.tolist() == [1, 2]
    assert decision.new_tokens[0, : n[0] + 1].tolist() == [1, 2, 3, 4, 5, 6, 8]
    assert decision.new_tokens[1, : n[1] + 1].tolist() == [1, 2, 3, 4, 5, 6]  # the target's 6 replaces the draft's 0
    # H3 at slot 1 is about 0.70: a threshold of 1.0 refuses the rescue.
    strict = FlyVerifier(window=3, theta=1.0).decide(draft[None], logits[None], logits[None], do_sample=False)
    assert strict.new_tokens[0, :2].tolist() == [1, 7] and strict.rescued.tolist() == [0]


# ----------------------------------------------------------------------------------------------------------------
# Engine integration
# ----------------------------------------------------------------------------------------------------------------
import copy  # noqa: E402
import random  # noqa: E402

from conftest import make_dflash, make_target, random_prompt  # noqa: E402

from hf_specgen.drafters.ngram import ngram_candidates  # noqa: E402


def test_ngram_candidates_take_the_earliest_longest_match():
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    assert ngram_candidates(seq, 4, 6) == [9, 1, 2, 3, 7, 5]  # "1 2 3" first occurs at 0, followed by 9 ...
    assert ngram_candidates(seq, 4, 2) == [9, 1]
    assert ngram_candidates([4, 5, 6], 4, 6) == []
    assert ngram_candidates([7, 8, 7], 4, 6) == [8, 7]  # n = 1: the earlier 7


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_fly_that_can_rescue_nothing_equals_target_greedy(family):
    """W larger than K: no mismatch can be rescued, so FLy reduces to exact verification."""
    target = make_target(family)
    small = make_target(family, seed=4, num_hidden_layers=1)
    drafter = make_dflash(target, block_size=8)
    rng = random.Random(3)
    for _ in range(6):
        prompt = random_prompt(rng, rng.randint(1, 80))
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False)
        for assistant, extra in ((small, {"num_draft_tokens": 5}), (drafter, {"block_size": 8})):
            out = target.generate(prompt, assistant_model=assistant, speculative_mode="fly", fly_window=20,
                                  max_new_tokens=40, do_sample=False, return_dict_in_generate=True, **extra)
            assert out.sequences.tolist() == ref.tolist()
            assert out.speculative_stats.lossy and out.speculative_stats.rescued_tokens == 0


def test_fly_with_gate_and_window_off_rescues_and_is_labelled_lossy():
    target = make_target("qwen3")
    small = make_target("qwen3", seed=4, num_hidden_layers=1)
    prompt = random_prompt(random.Random(5), 30)
    ref = target.generate(prompt, max_new_tokens=60, do_sample=False)
    out = target.generate(prompt, assistant_model=small, speculative_mode="fly", fly_window=0,
                          fly_entropy_threshold=0.0, num_draft_tokens=6, max_new_tokens=60, do_sample=False,
                          return_dict_in_generate=True)
    stats = out.speculative_stats
    assert stats.lossy and stats.rescued_tokens > 0 and stats.initial_mismatches >= stats.rescued_tokens
    assert out.sequences.shape == ref.shape  # max_new_tokens still exact
    assert out.sequences.tolist() != ref.tolist()  # every drafted token is accepted: not the target's text


def test_mla_drafts_the_same_tokens_with_fewer_forwards():
    """Greedy drafting with and without prompt-lookup MLA: identical rounds (so identical drafts), fewer forwards."""
    target = make_target("qwen3")
    twin = copy.deepcopy(target)  # a draft LM that agrees with the target makes every draft token visible
    twin.model.layers = twin.model.layers[:3]  # ... but not always: drop a layer
    twin.config.num_hidden_layers = 3
    pattern = [11, 12, 13, 14, 15, 16, 17, 18]
    prompt = torch.tensor([pattern * 6])  # repetitive: prompt lookup finds candidates
    runs = {}
    for ngram in (False, True):
        out = target.generate(prompt, assistant_model=twin, speculative_mode="fly", fly_window=20, fly_ngram=ngram,
                              num_draft_tokens=10, max_new_tokens=60, do_sample=False, return_dict_in_generate=True)
        runs[ngram] = out
    assert runs[True].sequences.tolist() == runs[False].sequences.tolist()
    assert runs[True].speculative_stats.acceptance_lengths == runs[False].speculative_stats.acceptance_lengths
    assert runs[True].speculative_stats.draft_forwards < runs[False].speculative_stats.draft_forwards


def test_batched_mla_drafts_the_same_tokens_as_batched_greedy_drafting():
    """A ragged batch (each row its own prompt lookup, candidates or none): the same rows and rounds as drafting
    without lookup, in a lossy setting (rescues happen), with fewer draft forwards."""
    from test_batch import padded_batch

    target = make_target("llama")
    twin = copy.deepcopy(target)
    twin.model.layers = twin.model.layers[:2]
    twin.config.num_hidden_layers = 2
    ids, mask = padded_batch(random.Random(6), [12, 40, 3])
    pattern = torch.tensor([21, 22, 23, 24, 25, 26])
    ids[1, -36:] = pattern.repeat(6)  # row 1 repeats itself: long candidates; the others are random
    runs = {}
    for ngram in (False, True):
        runs[ngram] = target.generate(ids, attention_mask=mask, assistant_model=twin, speculative_mode="fly",
                                      fly_window=2, fly_entropy_threshold=0.3, fly_ngram=ngram, num_draft_tokens=8,
                                      max_new_tokens=50, do_sample=False, eos_token_id=None,
                                      return_dict_in_generate=True)
    plain, mla = runs[False].speculative_stats, runs[True].speculative_stats
    assert runs[True].sequences.tolist() == runs[False].sequences.tolist()
    assert mla.row_acceptance_lengths == plain.row_acceptance_lengths
    assert plain.rescued_tokens > 0  # lossy rounds: the drafts decide the text, so equal drafts are under test
    assert mla.draft_forwards < plain.draft_forwards


def test_fly_sampling_rules_run_and_keep_lengths():
    target = make_target("qwen3")
    small = make_target("qwen3", seed=4, num_hidden_layers=1)
    prompt = random_prompt(random.Random(9), 20)
    for rule in ("reference", "lossless_core"):
        torch.manual_seed(0)
        out = target.generate(prompt, assistant_model=small, speculative_mode="fly", fly_sampling_rule=rule,
                              do_sample=True, top_k=10, max_new_tokens=30, return_dict_in_generate=True)
        assert out.sequences.shape[1] <= 20 + 30 and out.speculative_stats.lossy


def test_fly_settings_are_validated_and_saved_in_the_generation_config(tmp_path):
    target = make_target("qwen3")
    small = make_target("qwen3", seed=4, num_hidden_layers=1)
    prompt = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="fly_window must be"):
        target.generate(prompt, assistant_model=small, speculative_mode="fly", fly_window=-1)
    with pytest.raises(ValueError, match="fly_entropy_threshold"):
        target.generate(prompt, assistant_model=small, speculative_mode="fly", fly_entropy_threshold=2.0)
    with pytest.raises(ValueError, match=r"only apply to speculative_mode in \('fly',\)"):
        target.generate(prompt, assistant_model=small, speculative_mode="classic", fly_window=3)
    with pytest.raises(ValueError, match="block_size"):
        target.generate(prompt, assistant_model=make_dflash(target), speculative_mode="fly", num_draft_tokens=4)
    # Saved with the generation config, the settings apply without any keyword argument.
    from transformers import GenerationConfig

    GenerationConfig(speculative_mode="fly", fly_window=20, num_draft_tokens=4, max_new_tokens=12,
                     do_sample=False).save_pretrained(tmp_path)
    loaded = GenerationConfig.from_pretrained(tmp_path)
    assert loaded.speculative_mode == "fly" and loaded.fly_window == 20
    out = target.generate(prompt, assistant_model=small, generation_config=loaded, return_dict_in_generate=True)
    assert out.speculative_stats.mode == "fly" and out.speculative_stats.block_size == 5
    assert out.sequences.shape[1] == 3 + 12
