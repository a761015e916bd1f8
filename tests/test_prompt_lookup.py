"""Copied tokens (``prompt_lookup``, on in the default calls): rows copying their own text verify the copy instead of
the drafter's tokens. The lookup matches a host reference on padded batches, every block and chain mode stays stock
greedy's (fp32, alone and in batches), copied tokens raise the tokens per round on text that repeats itself, a drafter
that is right where the copy is wrong keeps its blocks, and what cannot take it is refused."""

from __future__ import annotations

import random

import pytest
import torch

import hf_specgen
from conftest import assert_draft_cache_holds_the_committed_tokens, make_dflash, make_target
from hf_specgen.engine.lookup import lookup_drafts
from test_batch import padded_batch
from test_eagle3 import make_eagle3
from test_width_policy import ForwardClock


def reference_lookup(sequence: list[int], count: int, sizes=(3, 2)) -> tuple[int, list[int]]:
    """(matched n-gram size, the count tokens after the latest earlier occurrence of the last 3, else 2, tokens)."""
    for n in sizes:
        if len(sequence) <= n:
            continue
        tail = sequence[-n:]
        starts = [i for i in range(len(sequence) - n) if sequence[i: i + n] == tail]
        if starts:
            start = starts[-1] + n  # past the end, the copy repeats the text from start on (a loop)
            follow = [sequence[start + j % (len(sequence) - start)] for j in range(count)]
            return n, follow
    return 0, []


def test_lookup_finds_the_latest_earlier_occurrence_in_every_padded_row():
    """Both ways of looking up give the reference's match and copy on random padded rows: the device's (fixed shapes,
    no host read: lookup_drafts) and the host's (CommittedNgrams, a CPU's decoding), whose tables follow the rows as
    they grow round by round (and are rebuilt for a row cut back, as a stop string does)."""
    from types import SimpleNamespace

    from hf_specgen.engine.lookup import CommittedNgrams

    rng = random.Random(0)
    for trial in range(120):
        batch, capacity = rng.randint(1, 5), rng.randint(2, 40)
        tokens = torch.tensor([[rng.randrange(4) for _ in range(capacity)] for _ in range(batch)])  # stale tail too
        padding = torch.tensor([rng.randint(0, min(3, capacity - 1)) for _ in range(batch)])
        lengths = torch.tensor([rng.randint(int(pad) + 1, max(int(pad) + 1, capacity // 2)) for pad in padding])
        sizes = ((3, 2), (3,), (2,))[trial % 3]
        index = CommittedNgrams(sizes)
        for _ in range(6):  # rounds: each row commits a few tokens, now and then one is cut back
            session = SimpleNamespace(tokens=tokens, lengths=lengths, left_padding=padding)
            host_sizes, host_drafts = index.find(session, 5)
            host = torch.tensor(host_sizes) > 0, torch.tensor(host_sizes), torch.tensor(host_drafts)
            for found, size, drafts in (lookup_drafts(tokens, lengths, padding, 5, sizes), host):
                for b in range(batch):
                    n, follow = reference_lookup(tokens[b, int(padding[b]): int(lengths[b])].tolist(), 5, sizes)
                    assert int(size[b]) == n and bool(found[b]) == (n > 0)
                    if n:
                        assert drafts[b].tolist() == follow
            for b in range(batch):  # the slots past a row's end hold whatever a verify left there, until committed
                tokens[b, int(lengths[b]):] = torch.randint(0, 4, (capacity - int(lengths[b]),))
            grow = [rng.randint(-2, 0) if rng.random() < 0.1 else rng.randint(0, 6) for _ in range(batch)]
            lengths = torch.tensor([min(capacity, max(int(pad) + 1, int(length) + step))
                                    for length, pad, step in zip(lengths, padding, grow)])


def repeating_prompt(rng: random.Random) -> torch.Tensor:
    phrase = [rng.randrange(3, 200) for _ in range(7)]
    return torch.tensor([[rng.randrange(3, 200) for _ in range(4)] + phrase * 3])


CALLS = {  # mode -> (assistant factory, extra arguments)
    "dflash": (lambda t: make_dflash(t, block_size=8), {}),
    "dflash-b8": (lambda t: make_dflash(t, block_size=8), {"block_size": 8}),
    "classic": (lambda t: make_target("qwen3", seed=6, num_hidden_layers=1), {}),
    "eagle3": (make_eagle3, {"eagle_top_k": 1}),
    "whiflash": (lambda t: hf_specgen.WhiFlash(ar=make_eagle3(t), parallel=make_dflash(t, block_size=6),
                                                router="random"), {"eagle_top_k": 1}),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_lookup_drafts_keep_stock_tokens_alone_and_in_batches(call):
    target = make_target("qwen3", seed=5)
    factory, extra = CALLS[call]
    assistant = factory(target)
    mode = call.split("-")[0]
    rng = random.Random(2)
    used = 0
    for prompt in (repeating_prompt(rng), torch.tensor([[rng.randrange(3, 200) for _ in range(12)]])):
        ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
        out = target.generate(prompt, assistant_model=assistant, speculative_mode=mode, max_new_tokens=40,
                              do_sample=False, eos_token_id=None, prompt_lookup=True, return_dict_in_generate=True,
                              **extra)
        assert out.sequences.tolist() == ref.tolist(), call
        used += out.speculative_stats.lookup_drafts
    assert used > 0, call  # the repeating prompt is copied at least once
    ids, mask = padded_batch(rng, [9, 20, 3, 14])
    ids[1, -14:] = torch.tensor([7, 8, 9, 10, 11, 12, 13] * 2)  # one row copies, the others may not
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, eos_token_id=[2, 5],
                          pad_token_id=0)
    out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_mode=mode,
                          max_new_tokens=24, do_sample=False, eos_token_id=[2, 5], pad_token_id=0, prompt_lookup=True,
                          **extra)
    assert out.tolist() == ref.tolist(), (call, "batch")


def test_the_default_call_copies_and_an_explicit_width_does_not_unless_asked():
    from hf_specgen.config import SpeculativeConfig
    from hf_specgen.mixin import _build_decoder

    target = make_target("qwen3", seed=5)
    drafter, eagle = make_dflash(target, block_size=8), make_eagle3(target)
    small = make_target("qwen3", seed=6, num_hidden_layers=1)

    def copies(assistant, **settings) -> bool:
        return _build_decoder(target, assistant, SpeculativeConfig(**settings)).prompt_lookup

    assert copies(drafter, mode="dflash") and copies(small, mode="classic") and copies(eagle, mode="eagle3")
    assert not copies(drafter, mode="dflash", block_size=8) and not copies(small, mode="classic", num_draft_tokens=4)
    assert copies(drafter, mode="dflash", block_size=8, prompt_lookup=True)
    assert not copies(drafter, mode="dflash", prompt_lookup=False)
    # trees and FLy never: an EAGLE-3 tree (a GPU's default), a DFlash tree, FLy's loose rule
    assert not copies(eagle, mode="eagle3", eagle_top_k=3) and not copies(drafter, mode="dflash", dflash_tree_nodes=8)
    assert not copies(small, mode="fly")
    # the default call copies for one prompt at a time; a batch copies only when asked
    for settings, in_batches in (({}, False), ({"prompt_lookup": True}, True)):
        decoder = _build_decoder(target, drafter, SpeculativeConfig(mode="dflash", **settings))
        assert decoder.lookup_in_batches is in_batches
        ids, mask = padded_batch(random.Random(1), [5, 12])
        ids[:, -5:] = torch.tensor([7, 8, 7, 8, 7])  # both rows repeat themselves
        out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                              block_size=8, adaptive_width=False, max_new_tokens=12, do_sample=False,
                              eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, **settings)
        assert (out.speculative_stats.lookup_drafts > 0) is in_batches


def test_copied_tokens_raise_the_tokens_per_round_where_the_text_repeats():
    """A drafter whose drafts are almost never right, on a prompt whose greedy continuation falls into a loop (a
    random model's often does): the lookup commits several tokens a round, the drafter alone about one."""
    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8, seed=9)
    rng = random.Random(0)
    for _ in range(20):
        prompt = torch.tensor([[rng.randrange(3, 100) for _ in range(12)]])
        tail = target.generate(prompt, max_new_tokens=64, do_sample=False, eos_token_id=None)[0, -30:]
        if len(set(tail.tolist())) <= 4:
            break
    assert len(set(tail.tolist())) <= 4  # found a prompt that loops
    taus = {}
    for lookup in (False, True):
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", block_size=8,
                              max_new_tokens=64, do_sample=False, eos_token_id=None, prompt_lookup=lookup,
                              return_dict_in_generate=True)
        taus[lookup] = out.speculative_stats.mean_acceptance_length
    assert taus[True] > 1.5 * taus[False], taus


def test_a_drafter_that_is_right_where_the_copy_is_wrong_keeps_its_blocks():
    """The target's own copy drafts every token right; the prompt repeats a phrase the target does not go on with,
    so copies lead astray. After the first disagreements the drafter wins the scores and the call keeps its blocks:
    about the tokens per round of the drafter alone (8), and few rounds verify a copy."""
    import copy

    target = make_target("qwen3", seed=5)
    twin = copy.deepcopy(target)
    rng = random.Random(3)
    prompt = repeating_prompt(rng)
    runs = {}
    for lookup in (False, True):
        out = target.generate(prompt, assistant_model=twin, speculative_mode="classic", num_draft_tokens=7,
                              max_new_tokens=120, do_sample=False, eos_token_id=None, prompt_lookup=lookup,
                              return_dict_in_generate=True)  # a fixed width: the scores alone decide
        runs[lookup] = out.speculative_stats
    assert runs[True].lookup_drafts <= 3, runs[True].lookup_drafts
    assert runs[True].mean_acceptance_length >= 0.9 * runs[False].mean_acceptance_length


@pytest.mark.parametrize("extra", [{"speculative_mode": "dflash", "dflash_tree_nodes": 8},
                                   {"speculative_mode": "fly"},
                                   {"speculative_mode": "eagle3", "eagle_top_k": 3},
                                   {"speculative_mode": "dflash", "prompt_lookup": "yes"}])
def test_calls_that_cannot_take_copied_tokens_are_refused(extra):
    target = make_target("qwen3", seed=5)
    assistant = make_eagle3(target) if extra["speculative_mode"] == "eagle3" else make_dflash(target)
    with pytest.raises(ValueError, match="prompt_lookup"):
        target.generate(torch.tensor([[5, 6, 7]]), assistant_model=assistant, max_new_tokens=4,
                        **{"prompt_lookup": True, **extra})


def test_compiled_steps_take_copied_tokens_without_new_graphs():
    """The lookup runs between the compiled steps with fixed shapes: the fixed block keeps its one verify graph and
    one draft graph, later calls recompile nothing, and the tokens are stock greedy's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    target = make_target("qwen3", seed=21)
    drafter = make_dflash(target)
    rng = random.Random(4)
    used = 0
    try:
        for call in range(3):
            prompt = repeating_prompt(rng)
            ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
            out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", speculative_compile=True,
                                  max_new_tokens=40, do_sample=False, eos_token_id=None, adaptive_width=False,
                                  prompt_lookup=True, return_dict_in_generate=True)
            assert out.sequences.tolist() == ref.tolist()
            used += out.speculative_stats.lookup_drafts
            if call == 0:
                assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
                torch._dynamo.config.error_on_recompile = True
        assert counters["stats"]["unique_graphs"] == 2
        assert used > 0
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()


def test_the_rows_said_to_copy_next_are_the_rows_the_next_overlay_copies_whatever_the_drafter_drafts():
    """``copies_next`` (read with a round's numbers, before the next width is chosen) names exactly the rows whose next
    overlay takes a 3-token copy: on random padded buffers, with the 3-token score trusted or not, and drafts that
    disagree with every copy (so no 2-token copy is taken either)."""
    from types import SimpleNamespace

    from hf_specgen.engine.lookup import HostPromptLookup, PromptLookup

    rng = random.Random(5)
    for trial in range(60):
        batch, capacity = rng.randint(1, 5), rng.randint(8, 40)
        tokens = torch.tensor([[rng.randrange(4) for _ in range(capacity)] for _ in range(batch)])
        padding = torch.tensor([rng.randint(0, 3) for _ in range(batch)])
        lengths = torch.tensor([rng.randint(int(pad) + 1, capacity - 4) for pad in padding])
        session = SimpleNamespace(tokens=tokens, lengths=lengths, left_padding=padding)
        draft = torch.full((batch, 5), 99)  # no copy starts with 99: only trusted 3-token copies replace it
        blocks = []
        for told_first, lookup in ((True, PromptLookup("cpu", 4)), (False, PromptLookup("cpu", 4)),
                                   (True, HostPromptLookup(4)), (False, HostPromptLookup(4))):
            # the loop's order (the overlay reuses copies_next's lookup), and alone
            lookup.score[0] = -1 if trial % 3 == 0 else 0  # 3-token copies distrusted in every third trial
            said = lookup.copies_next(session).bool().tolist() if told_first else None
            blocks.append(lookup.overlay(draft, session))
            said = said or lookup.copies_next(session).bool().tolist()
            assert (blocks[-1][:, 1:] != 99).any(dim=1).tolist() == said
        assert all(torch.equal(blocks[0], block) for block in blocks)


def test_the_host_lookup_makes_the_device_lookups_choices_round_after_round():
    """A CPU's decoding looks up, overlays, judges and scores copies in Python (HostPromptLookup), a GPU's with device
    tensors (PromptLookup): over rounds of random growing padded rows, random drafts that often share a copy's first
    token, and random verdicts, both give the same blocks, copy blocks, rows said to copy next, unused copies'
    agreement, scores and count of copies taken."""
    from types import SimpleNamespace

    from hf_specgen.engine.lookup import HostPromptLookup, PromptLookup

    rng = random.Random(7)
    for trial in range(40):
        batch, capacity, width = rng.randint(1, 4), 64, rng.choice((2, 4, 6))
        tokens = torch.tensor([[rng.randrange(3) for _ in range(capacity)] for _ in range(batch)])
        padding = torch.tensor([rng.randint(0, 3) for _ in range(batch)])
        lengths = padding + torch.tensor([rng.randint(1, 8) for _ in range(batch)])
        device, host = PromptLookup("cpu", width - 1), HostPromptLookup(width - 1)
        for _ in range(8):
            session = SimpleNamespace(tokens=tokens, lengths=lengths, left_padding=padding, last_slots=lengths - 1,
                                      token_block=lambda slots, n, t=tokens: t.gather(1, slots[:, None]))
            said = [lookup.copies_next(session) for lookup in (device, host)]
            assert torch.equal(*said)
            draft = torch.cat([tokens.gather(1, (lengths - 1)[:, None]),
                               torch.randint(0, 3, (batch, width - 1))], dim=1)
            verified = torch.randint(0, 3, (batch, width))
            agreed = [lookup.agreement_of_unused_copy(session, verified) for lookup in (device, host)]
            assert torch.equal(*agreed)
            if bool(said[0].all()) and rng.random() < 0.5:  # (a round verifies copies alone where every row has one)
                blocks = [lookup.copy_block(session, width) for lookup in (device, host)]
            else:
                blocks = [lookup.overlay(draft, session) for lookup in (device, host)]
                accepted = torch.randint(0, width, (batch,))
                active = torch.rand(batch) < 0.8
                for lookup in (device, host):
                    lookup.learn(accepted, verified, active)
            assert torch.equal(*blocks)
            assert device.score.tolist() == host.score and int(device.taken_rows) == host.taken_rows
            grow = torch.tensor([rng.randint(1, width - 1) for _ in range(batch)])
            for b in range(batch):  # each row commits the first tokens of its block
                tokens[b, int(lengths[b]): int(lengths[b]) + int(grow[b])] = blocks[0][b, 1: 1 + int(grow[b])]
            lengths = (lengths + grow).clamp(max=capacity - width)


def _copying_policy():
    """A CopyingWidthPolicy over a drafter drafting blocks of up to 8 rows (its drafting a tenth of a plain step) and
    copies verified alone in up to 16 rows, with verify costs rising gently with the width."""
    from hf_specgen.engine.width_policy import AcceptanceEstimate, CopyingWidthPolicy, CostTable, WidthPolicy

    costs = CostTable({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 16: 1.6}, draft=0.1)
    return CopyingWidthPolicy(WidthPolicy((1, 2, 4, 8), costs, AcceptanceEstimate(8)),
                              WidthPolicy((1, 2, 4, 8, 16), costs, AcceptanceEstimate(16), drafts=False))


def _run_copying(policy, rounds: int, keeps) -> list[tuple[bool, bool, int]]:
    """``rounds`` rounds, every other one with a copy at hand; ``keeps(copies_alone, width)``: drafts kept.
    Returns (copy at hand, verified the copy alone, width) per round."""
    chosen = []
    for round_ in range(rounds):
        copying = round_ % 2 == 0
        width = policy.choose(copying=copying)
        chosen.append((copying, policy.copies_alone, width))
        policy.observe(width, [keeps(policy.copies_alone, width) if width > 1 else 0])
    return chosen


def test_rounds_with_a_copy_at_hand_verify_it_alone_and_wide_when_copies_are_right():
    """The drafter keeps none of its drafts, the copies all of theirs: rounds with a copy at hand verify it alone
    (no drafting) in the widest block, the others take plain steps. One estimate for both would blur them into one
    width that suits neither."""
    policy = _copying_policy()
    chosen = _run_copying(policy, 80, lambda alone, width: width - 1 if alone else 0)
    late = chosen[-20:]
    assert all(alone and width == 16 for copying, alone, width in late if copying)
    assert all(width == 1 for copying, alone, width in late if not copying)
    assert policy.copy.acceptance.rates(16)[-1] > 0.9


def test_a_drafter_that_beats_the_copies_keeps_the_rounds_with_a_copy_at_hand():
    """The drafter keeps every draft, the copies none: where a copy is at hand the drafter's block is verified, with no
    copied tokens in it (``overlays_copies``), and the copy is not tried again: its estimate learns from those rounds
    that it would have kept nothing (``observe_unused_copy``)."""
    policy = _copying_policy()
    chosen = []
    for round_ in range(96):
        copying = round_ % 2 == 0
        width = policy.choose(copying=copying)
        chosen.append((copying, policy.copies_alone, policy.overlays_copies, width))
        policy.observe(width, [0 if policy.copies_alone else width - 1] if width > 1 else [0])
        if copying and not policy.copies_alone:
            policy.observe_unused_copy(0, width)  # the copy's first token was not the target's
    late = [c for c in chosen[16:] if c[0]]
    assert not any(alone for _, alone, _, _ in late)
    assert all(width == 8 and not overlays for _, alone, overlays, width in late)
    assert policy.copy.acceptance.rates(16)[0] < 0.1


def test_copies_come_back_once_the_rounds_the_drafter_takes_show_them_right():
    """Copies fail, then the text turns to copying while the drafter keeps failing: with no rounds spent trying the
    copy while the drafter leads, the copy's own probes (narrow, where plain steps lead) and what the rounds with a copy
    at hand show it would have kept bring it back within a few such rounds, verified alone and wide."""
    policy = _copying_policy()
    copies_right = False

    def run(rounds):
        chosen = []
        for round_ in range(rounds):
            copying = round_ % 2 == 0
            width = policy.choose(copying=copying)
            chosen.append((copying, policy.copies_alone, width))
            right = copies_right and policy.copies_alone
            policy.observe(width, [width - 1 if right else 0] if width > 1 else [0])
            if copying and not policy.copies_alone:  # committed: the verified tokens up to the first wrong draft
                policy.observe_unused_copy(16 if copies_right else 0, 1)
        return chosen

    late = [(alone, width) for copying, alone, width in run(60)[-30:] if copying]
    assert sum(alone for alone, _ in late) <= 2  # the copy's own probes, narrow (costing at most 1.25 plain steps)
    assert all(width <= 4 for alone, width in late if alone)
    copies_right = True
    then = [alone and width == 16 for copying, alone, width in run(30) if copying]
    assert any(then[:6]) and all(then[-5:])
def looping_prompt(target, new: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A prompt whose greedy continuation of ``new`` tokens falls into a loop (a random model's often does), and that
    continuation."""
    rng = random.Random(0)
    for _ in range(20):
        prompt = torch.tensor([[rng.randrange(3, 100) for _ in range(12)]])
        ref = target.generate(prompt, max_new_tokens=new, do_sample=False, eos_token_id=None)
        if len(set(ref[0, -40:].tolist())) <= 4:
            return prompt, ref
    raise AssertionError("no prompt of 20 loops")


def test_the_default_call_verifies_a_loop_by_copies_alone_wider_than_the_drafters_block(monkeypatch):
    """A drafter whose drafts are almost never right, on a prompt whose continuation loops: the default call's rounds
    with a copy at hand verify it alone (no drafter forward), learn an estimate of their own (kept on the model for
    the next call), widen past the drafter's block, and the tokens are stock greedy's (fp32)."""
    from hf_specgen.engine.width_policy import _ACCEPTANCE, COPIED

    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8, seed=9)
    prompt, ref = looping_prompt(target, 96)
    ForwardClock(monkeypatch, target, drafter)  # the costs of a quiet machine, whatever shares the CPU
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=96,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist()
    estimates = _ACCEPTANCE[target][drafter]
    copied, alone = estimates[COPIED], estimates[""]
    assert copied.reached[1] > 0 and copied.rates(2)[0] > 0.6  # copy rounds ran and mostly kept their first token
    assert alone.rates(2)[0] < copied.rates(2)[0]
    stats = out.speculative_stats
    assert max(stats.round_widths) == 16  # copies are verified past the drafter's block of 8
    assert stats.draft_forwards < stats.num_rounds / 2  # rounds that verify the copy alone draft nothing


@pytest.mark.parametrize("mode", ["dflash", "eagle3", "whiflash"])
def test_after_rounds_of_copies_alone_the_drafter_drafts_from_the_whole_context(monkeypatch, mode):
    """Rounds with a copy at hand verify it alone or the drafter's block, at random, at random widths (WhiFlash: with
    either drafter, at random): the tokens are stock greedy's, and every block drafted after copy rounds equals the
    one drafted from scratch over the whole committed sequence (a drafter that missed a copy round's committed rows
    would draft otherwise)."""
    from hf_specgen.drafters.dflash import DFlashProposer
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer
    from hf_specgen.engine.width_policy import CopyingWidthPolicy, RoutedWidthPolicy, WidthPolicy
    from test_eagle3 import _reference_chain
    from test_width_policy import _record_single_row_proposals, any_confident_width

    rng = random.Random(12)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: rng.choice(self.widths))
    monkeypatch.setattr(WidthPolicy, "confident_width", any_confident_width(rng))
    monkeypatch.setattr(RoutedWidthPolicy, "_drafter_for",
                        lambda self, vote, context: (rng.choice(sorted(self.policies)), False))
    monkeypatch.setattr(CopyingWidthPolicy, "_copy_leads", lambda self: rng.random() < 0.6)
    target = make_target("llama", seed=4)
    dflash, eagle = make_dflash(target, block_size=8), make_eagle3(target)
    assistant = {"dflash": dflash, "eagle3": eagle,
                 "whiflash": hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="random")}[mode]
    copies_alone = []
    real_choose = CopyingWidthPolicy.choose

    def choose(self, copying=False):
        width = real_choose(self, copying)
        copies_alone.append(self.copies_alone)
        return width

    monkeypatch.setattr(CopyingWidthPolicy, "choose", choose)
    seen = {"dflash": _record_single_row_proposals(monkeypatch, DFlashProposer),
            "eagle3": _record_single_row_proposals(monkeypatch, Eagle3ChainProposer)}
    prompt = repeating_prompt(rng)
    ref = target.generate(prompt, max_new_tokens=60, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, assistant_model=assistant, speculative_mode=mode, max_new_tokens=60,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                          **({} if mode == "dflash" else {"eagle_top_k": 1}))
    assert out.sequences.tolist() == ref.tolist()
    stats = out.speculative_stats
    assert sum(copies_alone) >= 3
    assert any(not alone and width > 1 and any(copies_alone[:i])
               for i, (alone, width) in enumerate(zip(copies_alone, stats.round_widths)))  # drafted after copies
    assert len(seen["dflash"]) + len(seen["eagle3"]) >= 3
    embed, width = target.get_input_embeddings(), dflash.block_size
    for committed, drafts in seen["eagle3"]:
        assert drafts[0, 1:].tolist() == _reference_chain(target, eagle, committed, drafts.shape[1] - 1)
    for committed, drafts in seen["dflash"]:
        start = committed.shape[1] - 1  # the block's first row: the last committed token
        with torch.no_grad():
            hidden = target(committed[:, :start], output_hidden_states=True).hidden_states
            context = torch.cat([hidden[i + 1] for i in dflash.target_layer_ids], dim=-1)
            block = torch.tensor([[int(committed[0, start])] + [dflash.mask_token_id] * (width - 1)])
            h = dflash(embed(block), context, torch.arange(start + width)[None])
            expected = target.lm_head(h[0, 1:]).argmax(dim=-1)
        assert drafts[0, 1:].tolist() == expected[: drafts.shape[1] - 1].tolist()


def test_a_draft_lm_catches_up_on_the_rows_copies_alone_committed(monkeypatch):
    """The target's twin as draft LM drafts only right tokens, if its cache holds the whole committed sequence. On a
    looping text the rounds with a copy at hand verify it alone in 16 rows (past anything the twin drafted), the
    others draft 7 tokens: every drafting round after the copies keeps all 7 drafts."""
    import copy

    from hf_specgen.engine.width_policy import CopyingWidthPolicy, WidthPolicy

    target = make_target("qwen3", seed=5)
    twin = copy.deepcopy(target)
    prompt, ref = looping_prompt(target, 96)
    monkeypatch.setattr(CopyingWidthPolicy, "_copy_leads", lambda self: True)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: self.widths[-1])
    out = target.generate(prompt, assistant_model=twin, speculative_mode="classic", max_new_tokens=96,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist()
    stats = out.speculative_stats
    widths, kept = stats.round_widths, stats.acceptance_lengths
    first_copy = widths.index(16)
    after = [i for i in range(first_copy, len(widths) - 1) if widths[i] == 8]  # drafted (the last round may stop)
    assert after and all(kept[i] == 8 for i in after), list(zip(widths, kept))


def test_a_draft_lm_reads_the_copies_a_drafted_round_kept_in_place_of_its_drafts(monkeypatch):
    """A drafted round may verify copied tokens in place of the draft LM's drafts (the overlay); where the target
    keeps them, the draft cache had read the draft LM's own drafts at those slots, so it reads the committed tokens
    when it next drafts. Copies made right here (the target's own continuation, in every round) and a draft LM of
    other weights: before each draft, layer 0's keys at every slot the draft cache has read are those of the
    committed tokens (they depend on the token and position alone)."""
    from hf_specgen.drafters.draft_lm import DraftModelProposer
    from hf_specgen.engine.lookup import HostPromptLookup

    target = make_target("qwen3", seed=5)
    draft_lm = make_target("qwen3", seed=9, num_hidden_layers=1)
    prompt = torch.randint(3, 200, (1, 13), generator=torch.Generator().manual_seed(2))
    reference = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)[0]

    def overlay(self, draft, session):  # every row takes "copies" that are the target's own next tokens
        start = session.host_lengths[0]
        copies = reference[start: start + draft.shape[1] - 1]
        copies = torch.cat([copies, copies.new_zeros(draft.shape[1] - 1 - len(copies))])
        self._round = None
        return torch.cat([draft[:, :1], copies[None]], dim=1)

    monkeypatch.setattr(HostPromptLookup, "overlay", overlay)
    monkeypatch.setattr(HostPromptLookup, "learn", lambda self, *args: None)
    checked = []
    catch_up = DraftModelProposer._catch_up

    def checked_catch_up(self, firsts):
        catch_up(self, firsts)
        read = int(firsts[0])  # slots 0 .. firsts - 1 hold what the draft cache has read
        assert_draft_cache_holds_the_committed_tokens(self, read)
        checked.append(read)

    monkeypatch.setattr(DraftModelProposer, "_catch_up", checked_catch_up)
    out = target.generate(prompt, assistant_model=draft_lm, speculative_mode="classic", num_draft_tokens=4,
                          prompt_lookup=True, max_new_tokens=40, do_sample=False, eos_token_id=None,
                          return_dict_in_generate=True)
    assert out.sequences[0].tolist() == reference.tolist()
    kept = out.speculative_stats.acceptance_lengths
    assert max(kept) == 5 and len(checked) == len(kept)  # copies kept whole, each round's draft cache checked


def test_a_hybrid_target_stays_exact_with_copies_verified_alone(monkeypatch):
    """On a target with linear-attention layers a copy round that commits fewer rows than it verified re-feeds the
    committed ones, as a drafted round does: with every round that has a copy at hand verifying it alone, at random
    widths, the tokens are stock greedy's."""
    from hf_specgen.architectures import _assistant
    from hf_specgen.engine.width_policy import CopyingWidthPolicy, WidthPolicy
    from test_hybrid import hybrid_target

    rng = random.Random(5)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: rng.choice(self.widths))
    monkeypatch.setattr(CopyingWidthPolicy, "_copy_leads", lambda self: True)
    target = hybrid_target("qwen3_5_text", seed=3)
    prompt = repeating_prompt(rng)
    ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, assistant_model=_assistant("dflash", target), speculative_mode="dflash",
                          max_new_tokens=40, do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist()
    assert out.speculative_stats.lookup_drafts >= 3  # copy rounds ran
