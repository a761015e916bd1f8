"""speculative_mode="classic": a small causal LM drafts K tokens per round; output equals stock greedy."""

from __future__ import annotations

import copy
import random
import zlib

import pytest
import torch

from conftest import assert_draft_cache_holds_the_committed_tokens, make_target, random_prompt


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2", "mistral"])
def test_classic_greedy_equals_stock_fp32(family):
    target = make_target(family)
    small = make_target(family, seed=5, num_hidden_layers=1)
    rng = random.Random(zlib.crc32(family.encode()))
    for case in range(8):
        k = rng.choice((1, 3, 7))
        prompt = random_prompt(rng, rng.randint(1, 150))
        max_new = rng.randint(1, 60)
        ref = target.generate(prompt, max_new_tokens=max_new, do_sample=False)
        out = target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=k,
                              max_new_tokens=max_new, do_sample=False)
        assert out.tolist() == ref.tolist(), (family, case, k)


def test_classic_equals_transformers_assisted_generation_with_the_same_draft_model():
    # Both are lossless, so our engine and transformers' own assisted loop (generate(assistant_model=...) without
    # speculative_mode) must return identical tokens for the same target and draft LM.
    target = make_target("qwen3")
    small = make_target("qwen3", seed=5, num_hidden_layers=1)
    rng = random.Random(3)
    for case in range(4):
        prompt = random_prompt(rng, rng.randint(5, 80))
        max_new = rng.randint(10, 50)
        theirs = target.generate(prompt, assistant_model=small, max_new_tokens=max_new, do_sample=False)
        ours = target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=4,
                               max_new_tokens=max_new, do_sample=False)
        assert ours.tolist() == theirs.tolist(), case


def test_target_as_its_own_draft_accepts_every_draft():
    target = make_target("qwen3")
    twin = copy.deepcopy(target)
    prompt = random_prompt(random.Random(0), 40)
    out = target.generate(prompt, assistant_model=twin, speculative_mode="classic", num_draft_tokens=5,
                          max_new_tokens=61, do_sample=False, return_dict_in_generate=True)
    ref = target.generate(prompt, max_new_tokens=61, do_sample=False)
    assert out.sequences.tolist() == ref.tolist()
    lengths = out.speculative_stats.acceptance_lengths
    assert lengths[:-1] == [6] * (len(lengths) - 1)  # 60 tokens after the prefill's first: 10 full rounds


def test_classic_with_padded_prompt_and_sampling_runs_and_keeps_length():
    target = make_target("llama")
    small = make_target("llama", seed=3, num_hidden_layers=1)
    ids = torch.tensor([[0, 0, 5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0)
    out = target.generate(ids, attention_mask=mask, assistant_model=small, speculative_mode="classic",
                          max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert out.tolist() == ref.tolist()
    torch.manual_seed(0)
    sampled = target.generate(ids, attention_mask=mask, assistant_model=small, speculative_mode="classic",
                              max_new_tokens=20, do_sample=True, top_k=20, pad_token_id=0)
    assert sampled.shape[1] <= 26


def test_classic_errors_name_the_fix():
    target = make_target("qwen3")
    other_vocab = make_target("qwen3", vocab_size=300, num_hidden_layers=1)
    prompt = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="same tokenizer|target's tokenizer"):
        target.generate(prompt, assistant_model=other_vocab, speculative_mode="classic", max_new_tokens=4)
    small = make_target("qwen3", seed=2, num_hidden_layers=1)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        target.generate(prompt, assistant_model=small, speculative_mode="classic", block_size=4, max_new_tokens=4)
    with pytest.raises(ValueError, match="num_draft_tokens must be"):
        target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=0)


def test_confidence_threshold_stops_drafting_early_and_stays_lossless():
    """draft_confidence_threshold (transformers' assisted-generation heuristic): fewer draft forwards, same tokens."""
    target = make_target("llama")
    small = make_target("llama", seed=5, num_hidden_layers=1)
    rng = random.Random(9)
    widths = []
    hook = target.model.register_forward_pre_hook(lambda module, args, kwargs: widths.append(
        kwargs["input_ids"].shape[1]), with_kwargs=True)
    for threshold in (0.05, 0.5, 0.99):
        prompt = random_prompt(rng, rng.randint(1, 60))
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False)
        widths.clear()
        out = target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=6,
                              draft_confidence_threshold=threshold, max_new_tokens=40, do_sample=False,
                              return_dict_in_generate=True)
        assert out.sequences.tolist() == ref.tolist(), threshold
        stats = out.speculative_stats
        if threshold == 0.99:  # a random draft model is never that sure: one draft forward per round
            assert stats.draft_forwards == stats.num_rounds
            assert widths[1:] == [2] * stats.num_rounds  # eager verifies carry only the drafted token (after prefill)
    hook.remove()
    plain = target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=6,
                            max_new_tokens=40, do_sample=False, return_dict_in_generate=True).speculative_stats
    assert plain.draft_forwards == 6 * plain.num_rounds
    with pytest.raises(ValueError, match="probability in"):
        target.generate(prompt, assistant_model=small, speculative_mode="classic", draft_confidence_threshold=1.5)
    with pytest.raises(ValueError, match="applies to speculative_mode='classic'"):
        target.generate(prompt, assistant_model=small, speculative_mode="fly", draft_confidence_threshold=0.4)


@pytest.mark.parametrize("call", [dict(num_draft_tokens=5), dict(), dict(num_draft_tokens=4, prompt_lookup=True)])
def test_a_draft_lm_feeds_one_row_where_its_cache_holds_every_committed_row_but_the_newest(monkeypatch, call):
    """A drafting round's first draft-LM step feeds the newest committed token alone where the draft cache read every
    committed row before it (the last round kept fewer drafts than were fed), else the two newest. Before each such
    step, layer 0's keys at every slot the cache is taken to hold are those of the committed tokens (they depend on
    the token and position alone); a draft LM of the target's weights, lightly perturbed, keeps every draft in some
    rounds and not in others, so both steps run. Fixed, the width policy's (the default call) and with copies."""
    from hf_specgen.drafters.draft_lm import DraftModelProposer

    target = make_target("qwen3", seed=5)
    draft_lm = copy.deepcopy(target)
    with torch.no_grad():
        for parameter in draft_lm.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.02)
    rng = random.Random(4)
    prompt = random_prompt(rng, 20)
    prompt = torch.cat([prompt, prompt[:, 3:15]], dim=1)  # text to copy from, for prompt lookup
    reference = target.generate(prompt, max_new_tokens=60, do_sample=False, eos_token_id=None)
    steps = []
    start = DraftModelProposer.start  # (the step runner is an instance attribute: wrapped per call)

    def checked_start(self, session, prompt_features):
        start(self, session, prompt_features)
        runner = self._step

        def first_or_later(ids, positions, mask):
            if positions[0, 0] == self.session.last_slots[0] - ids.shape[1] + 1:  # a round's first step
                assert_draft_cache_holds_the_committed_tokens(self, int(positions[0, 0]))  # the slots before it
                steps.append(ids.shape[1])
            return runner(ids, positions, mask)

        self._step = first_or_later

    monkeypatch.setattr(DraftModelProposer, "start", checked_start)
    out = target.generate(prompt, assistant_model=draft_lm, speculative_mode="classic", max_new_tokens=60,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True, **call)
    assert out.sequences.tolist() == reference.tolist()
    kept = out.speculative_stats.acceptance_lengths
    assert 1 in steps and 2 in steps, (steps, kept)
