"""The width policy (speculation that never loses): exact under any sequence of widths, eager, batched and compiled;
plain steps when every draft is wrong; drafting again once drafts are right; costs measured once and kept, saved and
loaded; an explicit block keeps the fixed width."""

from __future__ import annotations

import copy
import math
import random
import statistics
import types
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import hf_specgen
from conftest import load_repo_module, make_dflash, make_target, random_prompt
from hf_specgen.drafters.dflash import DFlashProposer
from hf_specgen.engine import width_policy
from hf_specgen.engine.narrow_rows import KINDS
from hf_specgen.engine.support import engine_probe_reason
from hf_specgen.engine.width_policy import LAST_PROBE_AFTER, AcceptanceEstimate, CostTable, WidthPolicy
from test_batch import padded_batch
from test_dflash_tree import most_probable_prefixes, tree_paths


def any_confident_width(rng: random.Random):
    """A ``WidthPolicy.confident_width`` drawn at random: a chain that stopped drafting when unsure verifies any width
    its drafts fill (one row included)."""
    return lambda self, chosen, confidences, rate: rng.choice(
        [w for w in self.widths if w <= min(chosen, min(map(len, confidences)) + 1)])


@pytest.fixture
def random_widths(monkeypatch):
    """Every round takes a width drawn at random among the policy's buckets (plain steps included), and WhiFlash's
    default call a drafter drawn at random."""
    return use_random_widths(monkeypatch)


def use_random_widths(monkeypatch) -> random.Random:
    """What the ``random_widths`` fixture sets up (for other test modules)."""
    rng = random.Random(3)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: rng.choice(self.widths))
    monkeypatch.setattr(WidthPolicy, "confident_width", any_confident_width(rng))
    monkeypatch.setattr(width_policy.RoutedWidthPolicy, "_drafter_for",
                        lambda self, vote, context: (rng.choice(sorted(self.policies)), False))
    return rng


def _exact_on_padded_batch(target, rng, lengths, new, **speculative):
    """A left-padded batch of prompts of ``lengths`` decoded with ``speculative`` generate() arguments: asserts the
    tokens are stock greedy's and returns the speculative output (with its stats)."""
    ids, mask = padded_batch(rng, lengths)
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, eos_token_id=None)
    out = target.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, eos_token_id=None,
                          return_dict_in_generate=True, **speculative)
    assert out.sequences.tolist() == ref.tolist()
    return out


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_any_sequence_of_widths_returns_the_stock_tokens(family, random_widths):
    target = make_target(family, seed=7)
    drafter = make_dflash(target, block_size=8)
    rng = random.Random(5)
    for lengths, new in (([13], 40), ([5, 17, 1, 30], 25), ([9, 1, 22, 4], 31)):
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, speculative_mode="dflash")
        widths = out.speculative_stats.round_widths
        assert len(widths) == out.speculative_stats.num_rounds and {1, 2, 4, 8} <= set(widths)


def test_plain_steps_attend_no_slots_for_a_block_they_do_not_draft(random_widths):
    """Eager drafting rounds attend the used cache prefix rounded up to VISIBLE_BUCKET, which also holds the
    drafter's block (its margin). A plain step at batch 1 attends exactly the committed tokens' keys with no mask of
    ours, as stock generate's step does (test_greedy_equality: the same kernel path, the same bf16 logits), and so
    does the prefill: the prompt's keys only."""
    from hf_specgen.engine.graphs import VISIBLE_BUCKET

    target = make_target("qwen3", seed=7)
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(9), VISIBLE_BUCKET - 6)  # rounds start on both sides of a bucket's end
    keys = []

    engine_probe_reason(target)  # the engine's one-off probe of the model runs before the hook

    def record(module, args, kwargs):  # (rows, keys attended, whether a mask of ours came with them)
        mask, cache = kwargs.get("attention_mask"), kwargs.get("cache", kwargs.get("past_key_values"))
        layer = cache.layers[0] if cache is not None else None
        attended = mask.shape[-1] if mask is not None else (layer.visible or layer.max_cache_len)
        keys.append((kwargs["input_ids"].shape[1], attended, mask is not None))

    handle = target.register_forward_pre_hook(record, with_kwargs=True)
    try:
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=16,
                              do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    finally:
        handle.remove()
    assert out.sequences.tolist() == target.generate(prompt, max_new_tokens=16, do_sample=False,
                                                     eos_token_id=None).tolist()
    stats = out.speculative_stats
    rounds = keys[-stats.num_rounds:]  # after the prefill (and the first call's cost timing)
    length, saved = prompt.shape[1] + 1, 0  # committed before the first round
    capacity = prompt.shape[1] + 16 + 2 * drafter.block_size  # the verify block + the drafter block's margin
    bucket = lambda slots: min(capacity, -(-slots // VISIBLE_BUCKET) * VISIBLE_BUCKET)  # noqa: E731
    # the prefill attends the prompt's keys only, as a plain call's does (not the first block's and its margin)
    assert keys[0] == (prompt.shape[1], prompt.shape[1], False)
    for (rows, attended, masked), width, committed in zip(rounds, stats.round_widths, stats.acceptance_lengths):
        assert rows == width
        if width == 1:
            assert (attended, masked) == (length, False)
        else:
            assert (attended, masked) == (bucket(length + width + drafter.block_size), True)
        saved += attended < bucket(length + width + drafter.block_size)
        length += committed
    assert saved  # some plain step attended fewer keys than a drafting round would have


@pytest.mark.parametrize("shape", ["block", "tree", "block, draft vocabulary"])
def test_compiled_width_changes_reuse_one_graph_per_width(monkeypatch, shape):
    """Compiled: each width bucket (1, 4 and the block; for DFlash trees, node budgets) is one verify graph; after
    the first call has seen every width, changing widths round to round recompiles nothing, and the tokens stay the
    stock ones (also with a drafter that proposes only part of the vocabulary)."""
    torch._dynamo.reset()
    counters.clear()
    cycle = [8, 4, 1, 1, 4, 8, 1, 8, 4, 4, 1, 8]
    state = {"round": 0}

    def cycling(self, copying=False):
        state["round"] += 1
        return cycle[state["round"] % len(cycle)]

    monkeypatch.setattr(WidthPolicy, "choose", cycling)
    target = make_target("qwen3", seed=21)
    tree = dict(dflash_tree_nodes=8, dflash_tree_top_k=2, adaptive_width=True) if shape == "tree" else {}
    drafter = make_dflash(target, block_size=8)
    if shape == "block, draft vocabulary":
        drafter.set_draft_vocab(range(0, 256, 2))
    for out in _compiled_calls_recompile_nothing(target, random.Random(0), 40, assistant_model=drafter,
                                                 speculative_mode="dflash", **tree):
        assert set(out.speculative_stats.round_widths) == {1, 4, 8}


def _compiled_calls_recompile_nothing(target, rng, new: int, **speculative) -> list:
    """Two compiled calls (prompts of 12 and 37 tokens) with ``speculative`` generate() arguments: both give stock
    greedy's tokens and the second compiles no new graph and recompiles nothing. Returns both outputs."""
    outs = []
    try:
        for prompt_len in (12, 37):
            prompt = random_prompt(rng, prompt_len)
            ref = target.generate(prompt, max_new_tokens=new, do_sample=False, eos_token_id=None)
            outs.append(target.generate(prompt, speculative_compile=True, max_new_tokens=new, do_sample=False,
                                        eos_token_id=None, return_dict_in_generate=True, **speculative))
            assert outs[-1].sequences.tolist() == ref.tolist()
            if len(outs) == 1:
                graphs = counters["stats"]["unique_graphs"]
                torch._dynamo.config.error_on_recompile = True
        assert counters["stats"]["unique_graphs"] == graphs
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()
    return outs


@pytest.mark.parametrize("drafter_kind", ["dflash", "eagle3 chain"])
def test_compiled_calls_build_every_widths_graphs_before_their_first_round(monkeypatch, drafter_kind):
    """Compiled steps build every width bucket's graphs (the target's verify and the drafter's step over the rows a
    verify of that width hands it) before a call's first round. A first call of plain steps only leaves nothing to
    compile for a second call that drafts at every width (any recompile raises), and a third call over a cache of
    another size, whose costs are known already, builds its graphs before its rounds too: no graph appears once
    rounds have started (a compile there stalls the call: minutes with max-autotune). Tokens stay stock greedy's."""
    from test_eagle3 import make_eagle3

    torch._dynamo.reset()
    counters.clear()
    state = {"widths": [1], "round": 0, "graphs": []}

    def scripted(self, copying=False):
        state["round"] += 1
        state["graphs"].append(counters["stats"]["unique_graphs"])  # graphs built so far, at each round's start
        return state["widths"][state["round"] % len(state["widths"])]

    monkeypatch.setattr(WidthPolicy, "choose", scripted)
    # a chain on a CPU reads each draft's probability (never stopping here), drafts and verifies the scripted width
    monkeypatch.setattr("hf_specgen.engine.loop.UNSURE_STOP", 0.0)
    monkeypatch.setattr(WidthPolicy, "unsure_drafting_width", lambda self, chosen: chosen)
    monkeypatch.setattr(WidthPolicy, "confident_width", lambda self, chosen, confidences, rate: chosen)
    target = make_target("qwen3", seed=21)
    if drafter_kind == "dflash":
        speculative = dict(assistant_model=make_dflash(target, block_size=8), speculative_mode="dflash")
    else:
        speculative = dict(assistant_model=make_eagle3(target), speculative_mode="eagle3", eagle_top_k=1,
                           num_draft_tokens=7, adaptive_width=True)
    rng = random.Random(3)
    try:
        for call, (widths, cache_len) in enumerate((([1], 256), ([8, 4, 1, 4, 8, 1], 256), ([4, 1, 8], 512))):
            state.update(widths=widths, round=0, graphs=[])
            torch._dynamo.config.error_on_recompile = call == 1
            prompt = random_prompt(rng, (12, 37, 20)[call])
            ref = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None)
            out = target.generate(prompt, speculative_compile=True, max_cache_len=cache_len, max_new_tokens=40,
                                  do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                                  prompt_lookup=False, **speculative)
            assert out.sequences.tolist() == ref.tolist()
            assert set(out.speculative_stats.round_widths) == set(widths)
            assert len(set(state["graphs"] + [counters["stats"]["unique_graphs"]])) == 1, state["graphs"]
    finally:
        torch._dynamo.config.error_on_recompile = False
        torch._dynamo.reset()


def test_compiled_whiflash_default_call_reuses_its_graphs_across_drafters_and_widths(monkeypatch):
    """Compiled WhiFlash default call: rounds cycle through both drafters and each drafter's width buckets. After the
    first call, a second call with another prompt length recompiles nothing, and the tokens stay the stock ones."""
    from test_eagle3 import make_eagle3

    torch._dynamo.reset()
    counters.clear()
    state = {"round": 0}

    def cycling(self, copying=False):
        state["round"] += 1
        return self.widths[state["round"] % len(self.widths)]

    monkeypatch.setattr(WidthPolicy, "choose", cycling)
    monkeypatch.setattr(width_policy.RoutedWidthPolicy, "_drafter_for",
                        lambda self, vote, context: (("eagle3", "dflash")[state["round"] // 3 % 2], False))
    target = make_target("llama", seed=4)
    bundle = hf_specgen.WhiFlash(ar=make_eagle3(target, draft_vocab=128), parallel=make_dflash(target, block_size=8),
                                 router="random")
    for out in _compiled_calls_recompile_nothing(target, random.Random(2), 48, assistant_model=bundle,
                                                 speculative_mode="whiflash"):
        assert {"eagle3", "dflash", "plain"} <= set(out.speculative_stats.drafter_per_round)


def _oracle_after(reference: list[int], switch_at: int):
    """A DFlashProposer.propose that drafts wrong tokens while fewer than ``switch_at`` tokens are committed, then
    the target's own greedy continuation (``reference``: prompt + stock greedy tokens). The drafter still runs, so its
    cache follows the call as usual."""
    real_propose = DFlashProposer.propose

    def propose(self, width=None, whole_block=False):
        block = real_propose(self, width, whole_block)  # [1, w]
        length = self.session.host_lengths[0]
        upcoming = reference[length: length + block.shape[1] - 1]
        if length >= switch_at:  # right up to the reference's end (the call stops there)
            block[0, 1: 1 + len(upcoming)] = torch.tensor(upcoming, dtype=torch.long)
        else:
            block[0, 1:] = torch.tensor([(t + 1) % 200 + 3 for t in reference[length: length + block.shape[1] - 1]]
                                        + [3] * (block.shape[1] - 1 - len(upcoming)))
        return block

    return propose


def test_plain_steps_while_every_draft_is_wrong_then_drafting_once_drafts_are_right(monkeypatch):
    target = make_target("qwen3", seed=2)
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(4), 10)
    new = 150
    reference = target.generate(prompt, max_new_tokens=new, do_sample=False, eos_token_id=None)
    switch_at = prompt.shape[1] + 70
    # Equal verify costs at every width and a cheap drafter: a right draft pays at once, a wrong one never.
    table = CostTable({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}, draft=0.1)
    monkeypatch.setattr(width_policy, "costs_of", lambda model: width_policy.CostModel({"k": table}))
    monkeypatch.setattr(width_policy.CostModel, "table", lambda self, key: table)
    monkeypatch.setattr(DFlashProposer, "propose", _oracle_after(reference[0].tolist(), switch_at))
    monkeypatch.setattr(WidthPolicy, "learn_costs", lambda *a, **k: None)
    monkeypatch.setattr(WidthPolicy, "clocked_seconds", lambda self, width: None)  # these costs, not this CPU's
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=new,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                          prompt_lookup=False)  # the drafter's drafts alone (a random model's text may loop)
    assert out.sequences.tolist() == reference.tolist()
    stats = out.speculative_stats
    lengths = prompt.shape[1] + 1 + torch.tensor([0] + stats.acceptance_lengths[:-1]).cumsum(0)  # before each round
    before = [w for w, n in zip(stats.round_widths, lengths.tolist()) if n < switch_at]
    after = [w for w, n in zip(stats.round_widths, lengths.tolist()) if n >= switch_at]
    # While every draft is wrong: mostly plain steps, with probes more than 8 plain rounds apart; a probe here costs
    # only its drafting, 0.1 plain steps, so the back-off stops at 10 plain rounds (a failed probe wastes 1/96 of
    # them: longest_probe_gap), where probes that cost more back off to 64 (test_policy_probes_back_off_and_return)
    assert before.count(1) >= 0.8 * len(before)
    first_plain = before.index(1)
    assert first_plain <= 8
    probes = [i for i, w in enumerate(before) if w > 1 and i > first_plain]
    assert len(probes) >= 4 and all(8 < b - a <= 11 for a, b in zip(probes, probes[1:]))
    # Once drafts are right, the next probe brings drafting back at the full block, and it stays.
    first_drafting = next(i for i, w in enumerate(after) if w > 1)
    assert first_drafting <= 11 and after[first_drafting + 1:].count(8) >= 0.8 * len(after[first_drafting + 1:])
    assert max(stats.acceptance_lengths) == 8


class ForwardClock:
    """A clock that only the models move: each target forward adds TARGET_STEP plus PER_ROW per verified row, each
    drafter forward DRAFT. Installed as the engine's ``time``, it lets the policy measure, time and clock its rounds
    through its own code, as on a quiet machine with these costs, whatever else shares the CPU (test workers)."""

    TARGET_STEP, PER_ROW, DRAFT = 0.010, 0.0002, 0.008

    def __init__(self, monkeypatch, target, drafter):
        self.now = 0.0
        for module in (hf_specgen.engine.loop, width_policy):
            monkeypatch.setattr(module, "time", self)
        target.model.layers[0].register_forward_pre_hook(self._target_forward)
        drafter.layers[0].register_forward_pre_hook(self._draft_forward)

    def perf_counter(self) -> float:
        return self.now

    def _target_forward(self, module, args):
        hidden = args[0]  # [B, n, H]: the rows this forward verifies
        self.now += self.TARGET_STEP + self.PER_ROW * hidden.shape[0] * hidden.shape[1]

    def _draft_forward(self, module, args):
        self.now += self.DRAFT


def test_a_useless_drafter_falls_back_to_plain_steps_with_measured_costs(monkeypatch):
    """The policy's own measuring and clocks (a clock moved by the forwards, so that test workers sharing the CPU
    cannot make drafting look cheap), a random drafter. After its first rounds a call runs plain steps; the next call
    starts from what the first learned (its acceptance evidence, scaled down, and its drafter timing), and falls back
    as well."""
    target = make_target("qwen3", seed=12)  # a target of its own: costs learned by no other test
    drafter = make_dflash(target, block_size=8)
    ForwardClock(monkeypatch, target, drafter)
    prompt = random_prompt(random.Random(8), 20)
    ref = target.generate(prompt, max_new_tokens=60, do_sample=False, eos_token_id=None)

    def call():  # the drafter's drafts alone (a random model's text may loop, and copies would pay)
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=60,
                              do_sample=False, eos_token_id=None, return_dict_in_generate=True, prompt_lookup=False)
        assert out.sequences.tolist() == ref.tolist()
        return out.speculative_stats.round_widths

    first = call()
    assert first.count(1) >= 0.8 * len(first)
    learned = width_policy._ACCEPTANCE[target][drafter][""]
    assert learned.reached[1] > 0 and learned.accepted[1] <= 0.2 * learned.reached[1]
    (table,) = width_policy.costs_of(target).tables.values()
    assert table.draft is not None  # the next call needs no timing round
    carried = learned.carried()
    scale = min(1.0, width_policy.CARRIED_WEIGHT / learned.reached[1])
    assert carried.reached == pytest.approx([r * scale for r in learned.reached])
    assert carried.accepted == pytest.approx([a * scale for a in learned.accepted])
    second = call()
    assert width_policy._ACCEPTANCE[target][drafter][""] is not learned  # the second call kept its own estimate
    assert second.count(1) >= 0.8 * len(second)


def test_costs_are_measured_once_saved_and_loaded(tmp_path, monkeypatch):
    target = make_target("llama", seed=3)
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(1), 15)
    target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=20)
    tables = width_policy.costs_of(target).tables
    (key,) = tables
    # the drafter's widths, and 16 for copied tokens verified alone (COPY_WIDTH: the default call copies)
    assert key == "cpu|float32|batch1|eager" and set(tables[key].verify) == {1, 2, 4, 8, 16}
    assert tables[key].draft is not None and all(s > 0 for s in tables[key].verify.values())
    hf_specgen.save_costs(target, tmp_path / "costs.json")

    def no_measuring(*args, **kwargs):
        raise AssertionError("costs were measured again")

    monkeypatch.setattr(hf_specgen.engine.loop, "measure_verify_costs", no_measuring)
    target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=20)  # kept on it
    fresh = make_target("llama", seed=3)
    hf_specgen.load_costs(fresh, tmp_path / "costs.json")
    out = fresh.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=20)
    assert out.tolist() == target.generate(prompt, max_new_tokens=20, do_sample=False).tolist()
    # A batch of 3 is another cost key (batch bucket 4): measured then.
    monkeypatch.undo()
    rows = torch.cat([prompt] * 3)
    target.generate(rows, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=10)
    assert "cpu|float32|batch4|eager" in width_policy.costs_of(target).tables


def test_a_drafters_first_call_times_only_the_verify_widths_no_other_drafters_calls_timed(monkeypatch):
    """A verify of w rows is the target's forward whichever drafter drafted them: an EAGLE-3 chain's first call after
    a DFlash call times only the widths the DFlash call did not (a chain chooses among every width up to 8; DFlash's
    buckets and the copies' width 16 are known), a WhiFlash call of both after them times none, and the tokens stay
    stock's."""
    from test_eagle3 import make_eagle3

    target = make_target("llama", seed=3)
    prompt = random_prompt(random.Random(1), 15)
    stock = target.generate(prompt, max_new_tokens=20, do_sample=False).tolist()
    timed, real = [], hf_specgen.engine.loop.measure_verify_costs

    def spy(run_verify, widths, device, **timing):
        timed.extend(widths)
        return real(run_verify, widths, device, **timing)

    monkeypatch.setattr(hf_specgen.engine.loop, "measure_verify_costs", spy)
    dflash, eagle3 = make_dflash(target, block_size=8), make_eagle3(target)
    calls = ((dflash, "dflash", [1, 2, 4, 8, 16]), (eagle3, "eagle3", [3, 5, 6, 7]),
             (hf_specgen.WhiFlash(ar=eagle3, parallel=dflash), "whiflash", []))
    for drafter, mode, widths in calls:
        timed.clear()
        out = target.generate(prompt, assistant_model=drafter, speculative_mode=mode, max_new_tokens=20)
        assert sorted(set(timed)) == widths, mode  # (DFlash also times its lm_head over the block's rows: 8)
        assert out.tolist() == stock, mode
    assert len(width_policy.costs_of(target).tables) == 2  # each kind of drafter keeps its own drafting cost


def test_an_eager_calls_verify_timings_share_one_budget_warm_ups_included(monkeypatch):
    """An EAGLE-3 chain's first call times its widths 1-8, then 16 for copied tokens: the second timing has what the
    first left of the call's MEASURE_BUDGET_SECONDS, and both count their warm-ups in it, so a first call spends
    about a second timing however many tables it fills; the next call, with every width known, times nothing."""
    import time

    from test_eagle3 import make_eagle3

    target = make_target("llama", seed=3)
    prompt = random_prompt(random.Random(1), 15)
    timings, real = [], hf_specgen.engine.loop.measure_verify_costs

    def spy(run_verify, widths, device, **timing):
        started = time.perf_counter()
        seconds = real(run_verify, widths, device, **timing)
        timings.append((tuple(widths), timing, time.perf_counter() - started))
        return seconds

    monkeypatch.setattr(hf_specgen.engine.loop, "measure_verify_costs", spy)
    monkeypatch.setattr(hf_specgen.engine.loop, "RETIMINGS", 0)  # (a width read dear by chance: timed again)
    drafter = make_eagle3(target)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=20)
    assert out.tolist() == target.generate(prompt, max_new_tokens=20, do_sample=False).tolist()
    (chain, first, spent), (copies, second, _) = timings
    assert chain == tuple(range(1, 9)) and copies == (16,)
    assert first == {"warmups_in_budget": True, "budget": width_policy.MEASURE_BUDGET_SECONDS}
    assert second["warmups_in_budget"] and second["budget"] <= max(0.0, width_policy.MEASURE_BUDGET_SECONDS - spent)
    timings.clear()
    target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=20)
    assert timings == []


def test_a_verify_width_timed_dearer_than_a_wider_one_is_timed_again(monkeypatch):
    """A stall in a width's only timed pass would stand for good: a width that reads dear is seldom chosen, so no
    round's clock corrects it. Timings made up here: each width costs 1 + w/10 ms, but the first timing of width 3
    stalls (5x) and width 6 is slow every time (a kernel that really is). Width 3 is timed again and takes its cost;
    width 6 is timed RETIMINGS more times and keeps what it measured; no other width is timed again."""
    from test_eagle3 import make_eagle3

    from hf_specgen.engine.loop import RETIMINGS, SpeculativeDecoder

    target = make_target("llama", seed=3)
    prompt = random_prompt(random.Random(1), 15)
    timed = []

    def made_up(run_verify, widths, device, **timing):
        first = not timed
        timed.append(tuple(widths))
        return {w: (1 + w / 10) * 1e-3 * (5 if w == 6 or (w == 3 and first) else 1) for w in widths}

    retime, measured = SpeculativeDecoder._retime_dear_widths, []

    def noted(table, widths, run_verify, device):
        retime(table, widths, run_verify, device)
        measured.append(dict(table.verify))  # (before any round's clock refines it)

    monkeypatch.setattr(hf_specgen.engine.loop, "measure_verify_costs", made_up)
    monkeypatch.setattr(SpeculativeDecoder, "_retime_dear_widths", staticmethod(noted))
    drafter = make_eagle3(target)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=20)
    assert out.tolist() == target.generate(prompt, max_new_tokens=20, do_sample=False).tolist()
    assert timed[: 1 + RETIMINGS] == [tuple(range(1, 9)), (3, 6), *[(6,)] * (RETIMINGS - 1)]
    assert all(3 not in widths and 6 not in widths for widths in timed[1 + RETIMINGS:])  # (the copies' width 16)
    assert measured[0] == pytest.approx({w: (1 + w / 10) * 1e-3 * (5 if w == 6 else 1) for w in range(1, 9)})


def test_an_explicit_width_keeps_the_fixed_block(qwen3_pair):
    target, drafter = qwen3_pair
    prompt = random_prompt(random.Random(2), 9)
    for kwargs in ({"block_size": 8}, {"adaptive_width": False}):
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=30,
                              return_dict_in_generate=True, **kwargs)
        assert out.speculative_stats.round_widths == [] and out.speculative_stats.draft_forwards == \
            out.speculative_stats.num_rounds
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=30,
                          block_size=4, adaptive_width=True, return_dict_in_generate=True)
    assert set(out.speculative_stats.round_widths) <= {1, 2, 4}
    for kwargs in ({"block_size": 8}, {"adaptive_width": False}):  # FLy alike
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="fly", max_new_tokens=30,
                              return_dict_in_generate=True, **kwargs)
        assert out.speculative_stats.round_widths == []


def test_a_batch_that_shrinks_into_a_new_bucket_times_it_in_one_pass(monkeypatch):
    """Rows that finish leave an eager batch; once the rest fit a smaller batch bucket the policy takes that
    bucket's costs, timed in the middle of the call where the table lacks them: one timed pass and no warm-up there
    (the call's first timing keeps its warm-up and repeats), and the tokens stay stock's."""
    from test_batch import _stops_at_different_rounds

    from hf_specgen.engine.width_policy import batch_bucket

    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8)
    ids, mask = padded_batch(random.Random(12), [9, 20, 14, 3, 30, 7, 11, 25])
    stops, ref = _stops_at_different_rounds(target, ids, mask, 40)
    timings, real = [], hf_specgen.engine.loop.measure_verify_costs

    def spy(run_verify, widths, device, **timing):
        timings.append(timing)
        return real(run_verify, widths, device, **timing)

    monkeypatch.setattr(hf_specgen.engine.loop, "measure_verify_costs", spy)
    out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                          max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0,
                          return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist()
    new_buckets = len({batch_bucket(size) for size in out.speculative_stats.round_batch_sizes}) - 1
    assert new_buckets >= 1
    quick = [i for i, timing in enumerate(timings) if timing == {"warmups": 0, "budget": 0.0}]
    assert len(quick) >= new_buckets and quick == list(range(len(timings) - len(quick), len(timings)))
    assert timings[0].get("warmups", 1) >= 1  # the call's first timing (bucket 8) as before


def test_a_batch_that_shrinks_into_a_bucket_without_drafting_timed_keeps_choosing_by_the_larger_batchs(monkeypatch):
    """A batch whose rows leave moves into smaller batch buckets mid-call; where a bucket's table has no drafting
    cost, its policy chooses by the larger batch's (fewer rows draft for no more) instead of drafting untimed whole
    blocks, which a call's last rounds are too few to time: with a useless drafter the rounds after each move stay
    plain steps, the tokens stay stock's, and the smaller buckets' tables are left for a call of their own to time."""
    from hf_specgen.engine.width_policy import batch_bucket

    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8)
    ids, mask = padded_batch(random.Random(12), [9, 20, 14, 3, 30, 7, 11, 25])
    free = target.generate(ids, attention_mask=mask, max_new_tokens=60, do_sample=False, eos_token_id=None)
    stops = [int(free[b, ids.shape[1] + 20 + 4 * b]) for b in range(4)]  # (random text: they end other rows too)
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=60, do_sample=False, eos_token_id=stops,
                          pad_token_id=0)
    ForwardClock(monkeypatch, target, drafter)  # drafting costs 0.8 plain steps: a useless drafter never pays
    out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                          max_new_tokens=60, do_sample=False, eos_token_id=stops, pad_token_id=0,
                          return_dict_in_generate=True, prompt_lookup=False)
    assert out.sequences.tolist() == ref.tolist()
    stats = out.speculative_stats
    buckets = [batch_bucket(size) for size in stats.round_batch_sizes]
    moved = [i for i in range(1, len(buckets)) if buckets[i] != buckets[i - 1]]
    assert len(moved) >= 2 and stats.round_widths[moved[0] - 1] == 1  # plain steps before the first move
    for first in moved:  # each smaller bucket's first rounds (before the fix: 3 untimed drafting rounds each)
        assert stats.round_widths[first: first + 3] == [1] * len(stats.round_widths[first: first + 3]), first
    tables = width_policy.costs_of(target).tables
    drafted = [key for key, table in tables.items() if table.draft is not None]
    assert len(drafted) == 1 and "|batch8|" in drafted[0]  # the fallback is no measurement


def test_each_round_tells_the_policy_which_rows_remain_and_what_each_may_still_commit(monkeypatch):
    """The loop hands the width policy, before each round of a batch, the active rows' places in the caller's batch
    and the tokens each may still commit (max_new_tokens less what it has), also after finished rows have left the
    batch; a call of one prompt rates the mean row as before (no rows)."""
    from test_batch import _stops_at_different_rounds

    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8)
    ids, mask = padded_batch(random.Random(12), [9, 20, 14, 3, 30, 7, 11, 25])
    stops, ref = _stops_at_different_rounds(target, ids, mask, 40)
    seen, real = [], WidthPolicy.set_rows

    def spy(self, row_ids, tokens_left, rows_leave):
        seen.append((list(row_ids), list(tokens_left), rows_leave))
        real(self, row_ids, tokens_left, rows_leave)

    monkeypatch.setattr(WidthPolicy, "set_rows", spy)
    out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                          max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0,
                          return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist()
    stats = out.speculative_stats
    assert len(seen) == stats.num_rounds and min(stats.round_batch_sizes) < 8  # rows left the batch
    decoding = [row for row in range(8) if stats.row_acceptance_lengths[row]]  # (a row can end at its first token)
    assert seen[0] == (decoding, [39] * len(decoding), True)  # the prefill committed each row's first token
    rounds_of = {row: 0 for row in range(8)}
    for row_ids, tokens_left, _ in seen:
        assert row_ids == sorted(row_ids)
        for row, left in zip(row_ids, tokens_left):
            assert left == 40 - 1 - sum(stats.row_acceptance_lengths[row][: rounds_of[row]]), (row, left)
            rounds_of[row] += 1
    assert all(rounds_of[row] == len(stats.row_acceptance_lengths[row]) for row in range(8))
    seen.clear()
    target.generate(ids[:1], attention_mask=mask[:1], assistant_model=drafter, speculative_mode="dflash",
                    max_new_tokens=10, do_sample=False)
    assert seen == []


def _batch_policy(costs: dict[int, float], row_drafts: dict[int, int], rounds: int = 40,
                  rows_leave: bool = False) -> WidthPolicy:
    """A policy over a batch whose row ``r`` kept ``row_drafts[r]`` drafts of every round of 4 rows, for ``rounds``
    rounds; then ``set_rows`` with 48 tokens left in each row."""
    policy = WidthPolicy((1, 2, 4), CostTable(costs, draft=0.0), AcceptanceEstimate(4), opening_probe=False)
    rows = sorted(row_drafts)
    policy.set_rows(rows, [48] * len(rows), rows_leave)
    for _ in range(rounds):
        policy.observe(4, [row_drafts[r] for r in rows])
    policy.set_rows(rows, [48] * len(rows), rows_leave)
    return policy


def test_a_batch_drafts_only_where_its_slowest_rows_rounds_pay():
    """A call of a batch lasts until its slowest row is done. Two rows whose drafts are all kept beside two whose
    drafts all fail: the mean row commits 2.5 tokens a round of 4 rows (1.6 plain steps), so the mean row's rate
    drafts, but the failing rows still need 48 rounds at 1.6 plain steps each, where plain steps take 48 at 1.0:
    plain steps. The two good rows alone draft the full width, and a batch of one row rates the mean row as before."""
    costs = {1: 1.0, 2: 1.35, 4: 1.6}
    mixed = _batch_policy(costs, {0: 3, 1: 3, 2: 0, 3: 0})
    assert mixed.acceptance.expected_tokens(4) / 1.6 > 1.0  # the mean row's rate says drafting pays
    assert mixed.rate(1) == pytest.approx(1.0)  # plain steps: every row done after 48 rounds of 1.0
    assert mixed.rate(1) > max(mixed.rate(2), mixed.rate(4)) and mixed.choose() == 1
    good = _batch_policy(costs, {0: 3, 1: 3})
    assert good.rate(4) > 2 * good.rate(1) and good.choose() == 4
    one_row = _batch_policy(costs, {0: 3, 1: 3, 2: 0, 3: 0})
    one_row.set_rows([0], [48], rows_leave=False)  # a batch of one row: the mean row's rate
    assert one_row.rows is None and one_row.rate(4) == pytest.approx(one_row.acceptance.expected_tokens(4) / 1.6)


def test_a_batch_counts_the_spread_of_its_rows_finishing_rounds():
    """Rows of equal estimates still finish apart (each round commits a random count), and the call waits for the
    last: with a one-in-two chance per draft, a batch's drafting rate falls below the mean row's the more rows it
    has, while plain steps (one token a row per round) keep theirs. Where finished rows leave the batch, the rounds
    after the first rows finish cost less, so the batch's rate is higher than where they stay (compiled steps)."""
    costs = {1: 1.0, 2: 1.2, 4: 1.5}
    mean_row = _batch_policy(costs, {0: 1, 1: 1})
    mean_row.set_rows([0], [48], rows_leave=False)
    rates = {}
    for batch in (2, 8):
        policy = _batch_policy(costs, dict.fromkeys(range(batch), 1))
        assert policy.rate(1) == pytest.approx(1.0)
        rates[batch] = policy.rate(4)
    assert rates[8] < rates[2] < mean_row.rate(4)
    staying = _batch_policy(costs, {0: 3, 1: 3, 2: 1, 3: 1})
    leaving = _batch_policy(costs, {0: 3, 1: 3, 2: 1, 3: 1}, rows_leave=True)
    assert leaving.rate(4) > staying.rate(4)
    assert leaving.rate(1) == pytest.approx(staying.rate(1))  # plain rows finish together: no round has fewer rows


def test_each_batch_row_keeps_its_own_estimate_for_one_call():
    """Each row's estimate starts from the batch's (a row the policy has not seen rates as the batch does), follows
    its own drafts, and is neither carried into the next call (other prompts) nor kept past a forget."""
    estimate = AcceptanceEstimate(4)
    estimate.observe(4, [3, 0], row_ids=[5, 9])
    good, bad = (estimate.row_round_moments(row, 4)[3][0] for row in (5, 9))
    batch = estimate.expected_tokens(4)
    assert bad < batch < good
    assert estimate.row_round_moments(7, 4)[3][0] == pytest.approx(batch)  # no rounds of its own yet
    assert estimate.row_round_moments(7, 4)[0] == (1.0, 0.0)  # a plain step commits one token, no spread
    assert estimate.carried().row_estimates == {}
    estimate.forget()
    assert estimate.row_estimates == {}


def test_drafting_rounds_that_catch_up_after_plain_steps_teach_no_drafting_cost():
    """A round that drafts after plain steps first runs the drafter over every row those steps committed (a probe),
    so its drafting clock is no steady round's: only a drafting round after a drafting round teaches the cost. In a
    call of mostly plain steps the probes' median (0.03 here) would otherwise move the cost up call after call."""
    table = CostTable({1: 0.01, 4: 0.012}, draft=0.004)
    policy = WidthPolicy((1, 2, 4), table, AcceptanceEstimate(4))
    widths = [4, 1, 1, 4, 1, 1, 4, 1, 1, 4, 4]  # mostly probes, as in a call of plain steps
    drafting = [0.05, 0, 0, 0.03, 0, 0, 0.03, 0, 0, 0.03, 0.004]  # after plain steps: 0.03 (catch-up)
    policy.learn_costs(widths, [0.02] * len(widths), drafting)
    assert table.draft == pytest.approx(0.004)
    # nor one after a drafting round whose drafter first read rows it had not seen (a draft LM re-reading the copies
    # the round before kept in place of its drafts)
    table = CostTable({1: 0.01, 4: 0.012}, draft=0.004)
    policy = WidthPolicy((1, 2, 4), table, AcceptanceEstimate(4))
    policy.read_rows = {1: 3, 2: 3}
    policy.learn_costs([4, 4, 4, 4], [0.02] * 4, [0.004, 0.03, 0.03, 0.004])
    assert table.draft == pytest.approx(0.004)


def _choices_while_every_draft_fails(policy: WidthPolicy, rounds: int) -> list[int]:
    """The widths ``policy`` chooses over ``rounds`` rounds in which every draft is wrong."""
    choices = []
    for _ in range(rounds):
        width = policy.choose()
        choices.append(width)
        policy.observe(width, [0])
    return choices


def test_policy_probes_back_off_and_return():
    """The schedule itself: plain steps when drafts fail, probes after 8, 16, then every 24 plain rounds (the
    back-off stops where a failed probe, 0.25 plain steps more than a plain round here, wastes 1/96 of the plain
    rounds between: longest_probe_gap; a dearer probe backs off to 64, see the test below), and drafting as soon as a
    probe's drafts are accepted."""
    policy = WidthPolicy((1, 2, 4, 8), CostTable({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3}, draft=0.2), AcceptanceEstimate(8))
    choices = _choices_while_every_draft_fails(policy, 300)
    drafted = [i for i, w in enumerate(choices) if w > 1]
    assert drafted[:2] == [0, 1]  # the even prior drafts until the failures outweigh it
    gaps = [b - a - 1 for a, b in zip(drafted[1:], drafted[2:])]  # plain rounds between probes
    assert policy.longest_probe_gap() == 24 and gaps[:3] == [8, 16, 24] and set(gaps[3:]) == {24}
    while (width := policy.choose()) == 1:
        pass
    assert width == 2  # the widest width costing at most 1.25 plain steps
    after = []
    for _ in range(3):  # the probe and the rounds after it draft right
        policy.observe(width, [width - 1])
        width = policy.choose()
        after.append(width)
    assert after == [4, 8, 8]  # widening at most twice per round past what the new evidence has verified


def test_a_probe_verifies_more_than_one_draft_where_every_drafting_round_costs_much_more_than_a_plain_step():
    """Where a round of 2 rows already costs far more than a plain step (fp32 on a CPU without bf16 units: 2 rows
    cost 1.6 single-row forwards, 8 rows 1.7), a probe verifies the widest width costing at most a tenth more than
    the narrowest drafting round, so one lucky draft cannot restart drafting; where narrow rounds are cheap, the
    widest costing at most 1.25 plain steps, as before."""
    def probe(costs: dict[int, float]) -> int:
        policy = WidthPolicy((1, 2, 4, 8, 16), CostTable(costs, draft=0.1), AcceptanceEstimate(16))
        for _ in range(200):  # every draft wrong, until the schedule probes
            if (width := policy.choose()) > 1 and policy.probing:
                return width
            policy.observe(width, [0])
        raise AssertionError("no probe in 200 rounds")

    assert probe({1: 1.0, 2: 1.6, 4: 1.65, 8: 1.7, 16: 2.0}) == 8  # 8 rows' round 1.8 <= 1.1 x 2 rows' 1.7
    assert probe({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 16: 1.6}) == 4  # within 1.25 plain steps
    assert probe({1: 1.0, 2: 1.6, 4: 2.2, 8: 2.6, 16: 3.0}) == 2  # nothing wider near the narrowest


def test_scheduled_probes_are_far_enough_apart_that_failed_ones_waste_at_most_a_32nd_of_the_time():
    """Where a probe's round costs 1.9 plain steps (8 rows and drafting, fp32 on an AVX2-only CPU), a drafter whose
    every draft fails is probed at most every 29 plain rounds (0.9 / 29 < 1/32), not from 8 on; the back-off past
    that is the schedule's (64). Where a probe costs at most 1.25 plain steps, the schedule alone: see
    test_policy_probes_back_off_and_return."""
    policy = WidthPolicy((1, 2, 4, 8, 16), CostTable({1: 1.0, 2: 1.6, 4: 1.65, 8: 1.7, 16: 2.0}, draft=0.2),
                         AcceptanceEstimate(16))
    choices = _choices_while_every_draft_fails(policy, 400)
    drafted = [i for i, w in enumerate(choices) if w > 1]
    gaps = [b - a - 1 for a, b in zip(drafted[1:], drafted[2:])]  # plain rounds between probes
    assert policy.probe_gap() == 29 and gaps[:3] == [29, 32, 64] and set(gaps[3:]) == {64}
    assert all(choices[i] == 8 for i in drafted[2:])  # each probe verifies 8 rows (probe_width)


def test_a_probe_pays_for_its_drafters_read_of_the_rows_it_has_not_seen():
    """A draft LM reads the prompt and plain steps' rows before it drafts (one forward over every batch row): the
    read's seconds per row are learned from drafting rounds that read enough rows (their drafting clock less their
    drafting), and a probe after plain steps is charged that read at the share of recent probes that failed, so a
    batch whose probes fail while the read grows stops probing (the tiny world's batch of 16 in bf16: a probe's round
    took 116 ms where a plain step took 7), while nothing to read leaves the schedule as it was and a small share of
    probes failing charges little."""
    table = CostTable({1: 0.01, 2: 0.0105, 4: 0.011}, draft=0.001)
    policy = WidthPolicy((1, 2, 4), table, AcceptanceEstimate(4))
    widths, drafting = [4, 1, 1, 4, 4], [0.101, 0, 0, 0.0013, 0.001]
    policy.read_rows = {0: 100, 3: 2}  # the prompt read in round 0; round 3 read 2 rows: too few to learn from
    policy.learn_costs(widths, [0.02] * len(widths), drafting)
    assert table.read == pytest.approx(0.001) and table.draft == pytest.approx(0.001)

    def gap(unread: int, failing: float) -> int:
        probing = WidthPolicy((1, 2, 4), table, AcceptanceEstimate(4))
        probing.acceptance.probes_failing = failing
        probing.set_unread(unread)
        return probing.probe_gap()

    assert gap(0, 0.5) <= width_policy.FIRST_PROBE_AFTER  # nothing to read: a cheap probe, as before
    assert gap(100, 0.5) > 8 * gap(0, 0.5) and gap(100, 1.0) > gap(100, 0.5) > gap(100, 0.1)
    # the share follows the probes' outcomes: each that fails moves it up, each that pays down
    policy = WidthPolicy((1, 2, 4), CostTable({1: 1.0, 2: 1.05, 4: 1.1}, draft=0.2), AcceptanceEstimate(4))
    _choices_while_every_draft_fails(policy, 200)
    assert policy.acceptance.probes_failing > 0.9
    assert policy.acceptance.carried().probes_failing == policy.acceptance.probes_failing  # carried to the next call


@pytest.mark.parametrize("mode", ["dflash", "eagle3", "whiflash"])
def test_a_probe_of_a_drafter_on_the_targets_features_is_charged_its_read_of_the_rows_it_has_not_seen(
        mode, monkeypatch):
    """DFlash and EAGLE-3 run over the target's features at every committed row their own drafted verifies did not
    hand them (the prompt's, plain steps') when they next draft, as a draft LM reads its unseen rows: the loop counts
    those rows for the drafting round that reads them (PendingContextRows.unread_rows; WhiFlash's: each drafter's
    own backlog, for that drafter's policy), and the policy learns the read's seconds per row from such rounds (CostTable.read),
    which a probe after plain steps is then charged (test_a_probe_pays_for_its_drafters_read_of_the_rows_it_has_not_seen).
    A round after a drafted one reads nothing unseen."""
    from test_eagle3 import make_eagle3

    target = make_target("llama", seed=4)
    drafters = {"dflash": lambda: make_dflash(target, block_size=8), "eagle3": lambda: make_eagle3(target),
                "whiflash": lambda: hf_specgen.WhiFlash(ar=make_eagle3(target, draft_vocab=128),
                                                        parallel=make_dflash(target, block_size=8))}
    rounds, read = [], {}

    def choose(self, copying=False):  # rounds 0-3 and 8-10 plain, the others the widest
        rounds.append(self)
        return 1 if len(rounds) <= 4 or 9 <= len(rounds) <= 11 else self.widths[-1]

    learn_costs = WidthPolicy.learn_costs

    def learning(self, *args, **kwargs):
        read.update(self.read_rows)
        learn_costs(self, *args, **kwargs)

    monkeypatch.setattr(WidthPolicy, "choose", choose)
    monkeypatch.setattr(WidthPolicy, "learn_costs", learning)
    # WhiFlash: EAGLE-3 drafts rounds 4-7, DFlash from round 11 (its backlog: the prompt, 4 plain steps, EAGLE-3's
    # 4 verifies of up to 8 rows, 3 plain steps)
    monkeypatch.setattr(width_policy.RoutedWidthPolicy, "_drafter_for",
                        lambda self, vote, context: ("eagle3" if len(rounds) < 8 else "dflash", False))
    lengths = [6, 13, 2]  # left-padded to 13 prompt rows
    out = _exact_on_padded_batch(target, random.Random(2), lengths, 30, assistant_model=drafters[mode](),
                                 speculative_mode=mode, prompt_lookup=False)
    widths = out.speculative_stats.round_widths
    assert widths[:4] == [1] * 4 and widths[8:11] == [1] * 3
    # the first drafting round reads the prompt and 4 plain steps' rows; the one after the second run of plain steps
    # their 3 rows (EAGLE-3 keeps its last committed row pending too, for its next draft's seed; a chain that stopped
    # unsure at its first draft verifies one row, yet drafted)
    assert read[4] == 13 + 4 and set(read) == {4, 11}
    assert read[11] == {"dflash": 3, "eagle3": 4}.get(mode, 13 + 4 + sum(widths[4:8]) + 3)
    # round 4, the call's first drafting round, drafted the whole block (timed) and read 17 rows: the read is learned
    assert any(table.read is not None for table in width_policy.costs_of(target).tables.values())


def _call_after_failing_drafts():
    """A second call (a new policy over the carried estimate) of a drafter whose drafts all failed in the first."""
    costs = CostTable({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3}, draft=0.2)
    first = WidthPolicy((1, 2, 4, 8), costs, AcceptanceEstimate(8))
    _choices_while_every_draft_fails(first, 400)
    assert first.acceptance.probe_after == LAST_PROBE_AFTER
    return WidthPolicy((1, 2, 4, 8), costs, first.acceptance.carried())


def test_the_next_call_goes_on_from_the_probe_gap_reached():
    """A drafter whose probes keep failing on this target: the next call (a new prompt) opens with one probe, then
    waits the backed-off gap (24 plain rounds, the longest a probe this cheap waits) before the next, not 8 again;
    the failed opening probe does not widen it."""
    second = _call_after_failing_drafts()
    choices = _choices_while_every_draft_fails(second, 150)
    drafted = [i for i, w in enumerate(choices) if w > 1]
    assert drafted[:3] == [0, 25, 50]


def _calls_that_open_with_a_probe(costs: CostTable, calls: int, drafts_right_in: tuple[int, ...] = ()) -> list[int]:
    """Of ``calls`` calls of 40 rounds of one drafter (a new policy per call over the estimate carried from the last),
    the ones whose first round drafts; every draft is wrong except in the calls ``drafts_right_in``."""
    estimate, opened = AcceptanceEstimate(16), []
    for call in range(calls):
        policy = WidthPolicy((1, 2, 4, 8, 16), costs, estimate)
        for round_index in range(40):
            width = policy.choose()
            if round_index == 0 and width > 1:
                opened.append(call)
            policy.observe(width, [width - 1 if call in drafts_right_in else 0])
        estimate = policy.acceptance.carried()
    return opened


def test_opening_probes_back_off_across_calls_where_probes_are_dear():
    """Where a probe costs 1.9 plain steps (8 rows and drafting, fp32 on an AVX2-only CPU), a drafter whose opening
    probes keep failing opens with one in calls 0, 2, 6, 14, 22, ... (every 2, 4, then 8 calls), and a probe that
    pays brings them back to every call; where a probe costs at most 1.25 plain steps, every call opens with one.
    Without the back-off every call would open with a probe."""
    dear = CostTable({1: 1.0, 2: 1.6, 4: 1.65, 8: 1.7, 16: 2.0}, draft=0.2)
    assert _calls_that_open_with_a_probe(dear, 24) == [0, 2, 6, 14, 22]
    # call 6 opens and its drafts are right: call 7 drafts from its first round on that evidence (no probe), then call
    # 8, call 7's failed drafts outweighing what call 6 carried, opens with a probe again (every call), and the
    # back-off starts over
    assert _calls_that_open_with_a_probe(dear, 24, drafts_right_in=(6,)) == [0, 2, 6, 7, 8, 10, 14, 22]
    cheap = CostTable({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 1.25}, draft=0.02)
    assert _calls_that_open_with_a_probe(cheap, 12) == list(range(12))


def test_a_predictable_prompt_after_failing_ones_drafts_from_its_first_round():
    """The carried evidence says plain steps, but the new prompt's drafts are right: the opening probe keeps them and
    drafting widens at once (a CI run's tiny-world bench: the default call decoded the math prompt, which came after
    the code one, at tau 1.03, where the fixed block committed 13 tokens a round)."""
    second = _call_after_failing_drafts()
    choices = []
    for _ in range(4):
        width = second.choose()
        choices.append(width)
        second.observe(width, [width - 1])  # every draft right
    assert choices == [2, 4, 8, 8]


def _probes_with_the_target(sure: bool, rounds: int, policy: WidthPolicy, right_from: int | None = None):
    """``rounds`` rounds of ``policy`` in the middle of a call (no opening probe), every plain step's token one the
    target was ``sure`` of (or not), every draft wrong until round ``right_from``, then right: the rounds that drafted
    and what kind of probe each was (None: a drafting round)."""
    policy.opening_probe = False
    drafted = []
    for i in range(rounds):
        width = policy.choose()
        if width > 1:
            drafted.append((i, policy.probing))
        policy.observe(width, [width - 1 if right_from is not None and i >= right_from else 0])
        if width == 1:
            policy.observe_sure(sure)
    return drafted


def test_plain_steps_the_target_is_sure_of_call_a_probe_which_backs_off_while_such_probes_fail():
    """Plain steps win (every draft is wrong; a probe costs 1.9 plain steps, fp32 on an AVX2-only CPU, so the
    schedule waits 29 plain rounds). Where the target gave each plain step's token 0.9 or more, 4 such steps in a row
    call a probe; each that fails doubles the run the next one needs (8, 16, ... up to 64), carried into the next
    call; any probe that pays brings it back to 4. Where the target is unsure, the schedule alone probes."""
    dear = CostTable({1: 1.0, 2: 1.6, 4: 1.65, 8: 1.7, 16: 2.0}, draft=0.2)
    policy = WidthPolicy((1, 2, 4, 8, 16), dear, AcceptanceEstimate(16))
    drafted = _probes_with_the_target(True, 300, policy)
    assert drafted[:3] == [(4, "sure"), (13, "sure"), (30, "sure")]  # 4, 8, then 16 sure plain steps
    assert policy.acceptance.sure_after == width_policy.LAST_PROBE_AFTER
    assert policy.acceptance.carried().sure_after == width_policy.LAST_PROBE_AFTER
    unsure = _probes_with_the_target(False, 300, WidthPolicy((1, 2, 4, 8, 16), dear, AcceptanceEstimate(16)))
    assert [i for i, _ in unsure[:3]] == [29, 59, 92] and {kind for _, kind in unsure} == {"scheduled"}

    # the drafts turn right at round 100: the next probe pays, drafting resumes, and sure runs call probes from 4 on
    policy = WidthPolicy((1, 2, 4, 8, 16), dear, AcceptanceEstimate(16))
    drafted = _probes_with_the_target(True, 160, policy, right_from=100)
    first = next(i for i, kind in drafted if i >= 100)
    assert [i for i, _ in drafted if i > first] == list(range(first + 1, 160))
    assert policy.acceptance.sure_after == width_policy.FIRST_SURE_RUN


def test_a_predictable_prompt_without_an_opening_probe_drafts_after_a_few_sure_plain_steps():
    """A call that does not open with a probe (backed off across calls where probes are dear) after calls whose drafts
    failed: where the target is sure of its tokens, the fourth plain step calls a probe, which keeps its drafts, and
    drafting widens at once; where it is not, the carried schedule's gap (24 plain rounds) passes first. Before, the
    tiny world's math prompts after unpredictable ones spent whole answers in plain steps (fp32, kernels capped at
    AVX2: DFlash's default call 1.74-2.03x stock on math where its fixed block read 2.4x)."""
    sure = _probes_with_the_target(True, 12, _call_after_failing_drafts(), right_from=0)
    assert sure[0] == (4, "sure") and [i for i, _ in sure[1:]] == list(range(5, 12))
    unsure = _probes_with_the_target(False, 30, _call_after_failing_drafts(), right_from=0)
    assert unsure[0] == (24, "scheduled")


def _dear_chain_policy() -> WidthPolicy:
    """A draft LM's policy where drafting is dear (fp32 on an AVX2 CPU: the tiny world's draft LM drafts a token in
    half a plain step, and a 2-row verify costs 1.5): a probe verifies 2 rows, and before any evidence plain steps
    rate best."""
    return WidthPolicy((1, 2, 4, 8), CostTable({1: 1.0, 2: 1.5, 4: 1.6, 8: 1.75}, draft=3.5), AcceptanceEstimate(8),
                       draft_share=lambda w: (w - 1) / 7)


def test_a_probe_that_passes_where_plain_steps_still_rate_best_is_followed_by_wider_ones(monkeypatch):
    """A 2-row probe that keeps its draft drops the old evidence, and the new estimate's prior past slot 1 still rates
    plain steps best: the next round probes twice as wide, keeping the first probe's evidence, and once the drafts
    are seen right at 4 rows drafting pays and goes on. Without the follow-up, such a call drafted 3 rounds of 40 (the
    tiny world's draft LM on its math prompts, fp32 with the kernels capped at AVX2: tau 1.05, 0.97x stock; with it
    2.59, 1.08x). A follow-up that fails ends the probes: plain steps again. WhiFlash's drafters do not follow up."""
    policy, widths = _dear_chain_policy(), []
    policy.opening_probe = False
    for _ in range(12):
        width = policy.choose()
        widths.append((width, policy.probing))
        policy.observe(width, [width - 1])  # every draft right
        if width == 1:
            policy.observe_sure(True)
    assert widths[4:6] == [(2, "sure"), (4, "follow-up")]
    assert all(width > 1 and probing is None for width, probing in widths[6:])
    assert policy.acceptance.reached[1] > 2  # the follow-up kept the first probe's evidence (both rounds count)

    without = _dear_chain_policy()
    monkeypatch.setattr(WidthPolicy, "follow_up_width", lambda self: None)
    assert len(_probes_with_the_target(True, 40, without, right_from=0)) == 3
    monkeypatch.undo()

    failing = _dear_chain_policy()
    failing.opening_probe = False
    rounds = []
    for _ in range(7):
        width = failing.choose()
        rounds.append((width, failing.probing))
        failing.observe(width, [1 if failing.probing == "sure" else 0])  # the probe's one draft right, then none
        if width == 1:
            failing.observe_sure(True)
    assert rounds == [(1, None)] * 4 + [(2, "sure"), (4, "follow-up"), (1, None)]

    # not under WhiFlash's router, where the other drafter's estimate is the rival (a chain's short probes pass easily)
    routed, _ = _routed_policy(dflash_draft=0.5)
    chain = routed.policies["eagle3"]
    chain.acceptance.observe(2, [1])  # its 2-row probe kept its draft
    chain.probing, chain.passed_width = "sure", 2
    assert chain.follow_up_width() is None
    chain.follows_up = True
    assert chain.follow_up_width() == 4


def test_each_plain_round_tells_the_policy_whether_the_target_was_sure_of_its_token(monkeypatch):
    """The loop reads, with a plain round's numbers, whether the target gave its token SURE_PROBABILITY or more: the
    verdicts the policy gets are stock greedy's own probabilities of the tokens after the first (which the prefill
    chose), against the threshold. A target with a sharpened head is sure of some tokens and not of others."""
    target = make_target("qwen3", seed=3)
    with torch.no_grad():
        target.lm_head.weight.mul_(12.0)
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(5), 10)
    stock = target.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None, output_scores=True,
                            return_dict_in_generate=True)
    expected = [float(score[0].softmax(-1).max()) >= width_policy.SURE_PROBABILITY for score in stock.scores[1:]]
    assert 0 < sum(expected) < len(expected)
    verdicts = []
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: 1)  # every round a plain step
    monkeypatch.setattr(WidthPolicy, "observe_sure", lambda self, sure: verdicts.append(sure))
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=40,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True, prompt_lookup=False)
    assert out.sequences.tolist() == stock.sequences.tolist()
    assert verdicts == expected


def test_only_a_call_of_one_prompt_opens_with_a_probe(monkeypatch):
    """A batch's probe first runs the drafter over every row's prompt: the loop gives the opening probe to calls of
    one prompt only, and not to the policy of a batch that shrank to one row."""
    from test_batch import _stops_at_different_rounds

    opening, real = [], WidthPolicy.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        opening.append(self.opening_probe)

    monkeypatch.setattr(WidthPolicy, "__init__", spy)
    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8)
    ids, mask = padded_batch(random.Random(12), [9, 20, 14, 3, 30, 7, 11, 25])
    stops, _ = _stops_at_different_rounds(target, ids, mask, 40)
    out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                          max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0,
                          return_dict_in_generate=True)
    assert min(out.speculative_stats.round_batch_sizes) == 1 and len(opening) >= 2  # it shrank, policy by policy
    assert not any(opening)
    opening.clear()
    target.generate(ids[:1, mask[0].bool()], assistant_model=drafter, speculative_mode="dflash", max_new_tokens=8,
                    do_sample=False)
    assert opening and all(opening)  # the drafter's policy (and the copies' policy, which drafts nothing)


def test_the_clock_overrules_a_model_that_says_drafting_pays():
    """The cost model says width 8 pays (cheap verify, drafts accepted), but this call's rounds at width 8 take ten
    plain steps' time each: after MIN_CLOCKED_ROUNDS such rounds the policy runs plain steps. A one-off slow round
    alone does not do it (the median of the last rounds)."""
    costs = CostTable({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3}, draft=0.2)
    policy = WidthPolicy((1, 2, 4, 8), costs, AcceptanceEstimate(8))
    policy.acceptance.widest = 8
    for _ in range(6):  # evidence that the drafts are right
        policy.acceptance.observe(8, [7])
    assert policy.choose() == 8
    for _ in range(3):
        policy.observe(1, [0], seconds=1.0)  # plain steps of this call: 1 token per second
    policy.observe(8, [7], seconds=100.0)  # a one-off stall (say, a compile)
    for _ in range(2):
        policy.observe(8, [7], seconds=1.5)
    assert policy.choose() == 8  # median of 1.5 s rounds: 5.3 tokens/s against a plain 1 token/s
    for _ in range(2):
        policy.observe(8, [7], seconds=10.0)  # the same rounds now take ten plain steps each
    assert policy.choose() == 1


def test_no_probes_where_even_perfect_drafts_could_not_pay():
    """A compute-bound batch: a verify of w rows costs w plain steps, so even a draft accepted whole commits w tokens
    for more than w steps' time. Once the drafts fail the policy stays on plain steps, with no probe; when the costs
    change (they follow the rounds), probing resumes."""
    costs = CostTable({1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}, draft=0.2)
    policy = WidthPolicy((1, 2, 4, 8), costs, AcceptanceEstimate(8))
    assert not policy.drafting_could_pay()
    choices = _choices_while_every_draft_fails(policy, 200)
    assert set(choices) == {1}  # the even prior's draft would not pay either at these costs
    costs.verify.update({2: 1.05, 4: 1.1, 8: 1.3})  # the same batch turns memory-bound (say, a longer context)
    assert policy.drafting_could_pay()
    assert policy.choose() > 1  # the streak kept counting: the probe comes at once


def test_a_slow_one_off_drafting_round_does_not_make_drafting_look_slow(monkeypatch):
    """A compiled step's first call at a new shape compiles and records a CUDA graph: seconds, where its replays take
    milliseconds. Emulated here by a drafter whose first timed round and one later round are slow: the policy keeps
    drafting (right drafts) and the learned drafting cost stays a steady round's. With the first timed round taken as
    the drafting cost, this call ran plain steps (on an H100 the default call ran at 0.42x the fixed block)."""
    target = make_target("qwen3", seed=31)
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(6), 12)
    new = 200
    reference = target.generate(prompt, max_new_tokens=new, do_sample=False, eos_token_id=None)
    oracle = _oracle_after(reference[0].tolist(), switch_at=0)
    calls = {"n": 0}
    clock = ForwardClock(monkeypatch, target, drafter)  # the forwards move it (test workers share the CPU)

    def slow_twice(self, width=None, whole_block=False):
        calls["n"] += 1
        if calls["n"] in (2, 12):  # round 1 (the first timed round) and round 11
            clock.now += 0.25
        return oracle(self, width, whole_block)

    monkeypatch.setattr(DFlashProposer, "propose", slow_twice)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", max_new_tokens=new,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                          prompt_lookup=False)  # the drafter's rounds alone
    assert out.sequences.tolist() == reference.tolist()
    widths = out.speculative_stats.round_widths
    assert calls["n"] > 12 and widths.count(8) >= 0.9 * len(widths)
    (table,) = width_policy.costs_of(target).tables.values()
    assert table.draft < 0.05


def test_a_call_moves_a_cost_by_a_bounded_step():
    table = CostTable({1: 0.01, 8: 0.02}, draft=0.005)
    table.learn_verify(8, 5.0)  # a compile, not a round
    table.learn_draft(5.0)
    assert table.verify[8] == pytest.approx(0.02 * (1 + width_policy.COST_AVERAGING))
    assert table.draft == pytest.approx(0.005 * (1 + width_policy.COST_AVERAGING))
    table.learn_verify(1, 0.005)  # cheaper rounds are learned as they are
    assert table.verify[1] == pytest.approx(0.01 + width_policy.COST_AVERAGING * (0.005 - 0.01))
    table.learn_verify(4, 0.3)  # a width never measured takes the clock it sees
    assert table.verify[4] == 0.3


def test_a_call_that_drafts_from_its_first_round_gets_plain_rounds_to_compare_with():
    """The model says width 8 pays, but not overwhelmingly: every REFERENCE_EVERY-th round is a plain step until the
    call has MIN_CLOCKED_ROUNDS of them; then the clock decides (here drafting rounds deliver less than plain steps,
    so plain steps win). Where the model rates drafting far above plain steps, no reference round is run."""
    def drafting_policy(verify):
        policy = WidthPolicy((1, 2, 4, 8), CostTable(verify, draft=0.2), AcceptanceEstimate(8))
        policy.acceptance.widest = 8
        for _ in range(6):
            policy.acceptance.observe(8, [3])  # half the block accepted
        return policy

    policy = drafting_policy({1: 1.0, 2: 1.5, 4: 2.5, 8: 3.0})
    assert 1.0 < max(policy.rate(w) for w in (2, 4, 8)) / policy.rate(1) < width_policy.REFERENCE_MARGIN
    choices = []
    for _ in range(40):
        width = policy.choose()
        choices.append(width)
        # drafting rounds: 4 tokens in 8 s (0.5 tokens/s); plain steps: 1 token per second
        policy.observe(width, [0 if width == 1 else 3], seconds=1.0 if width == 1 else 8.0)
    plain = [i for i, w in enumerate(choices) if w == 1]
    every = width_policy.REFERENCE_EVERY
    assert plain[:width_policy.MIN_CLOCKED_ROUNDS] == [every, 2 * every + 1, 3 * every + 2]
    after = choices[plain[width_policy.MIN_CLOCKED_ROUNDS - 1]:]
    assert after[:width_policy.FIRST_PROBE_AFTER] == [1] * width_policy.FIRST_PROBE_AFTER  # the clock: plain wins
    assert after.count(1) >= 0.8 * len(after)  # (and the odd probe, in case the text changes)

    confident = drafting_policy({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3})
    assert confident.rate(4) > width_policy.REFERENCE_MARGIN * confident.rate(1)
    widths = []
    for _ in range(40):
        widths.append(confident.choose())
        confident.observe(widths[-1], [3], seconds=1.0)
    assert 1 not in widths


@pytest.mark.parametrize("compiled", [False, True])
def test_classic_default_call_is_exact_under_any_widths_and_its_twin_draft_accepts_everything(random_widths,
                                                                                            compiled):
    """speculative_mode='classic' with no num_draft_tokens adapts its width: a round of w rows drafts w - 1 tokens,
    a plain step drafts none, and the tokens plain steps committed reach the draft model before it drafts again. The
    target's own copy as draft model shows it: under any sequence of widths every draft is accepted (a draft cache
    that missed the plain steps' tokens would draft wrong ones), in a batch as well, eager and compiled."""
    import copy

    target = make_target("qwen3", seed=11, num_hidden_layers=1)  # one layer: quicker to compile
    twin = copy.deepcopy(target)
    rng = random.Random(12)
    # (compiling takes its time: one short call there; batches of the compiled width buckets are covered by DFlash's)
    cases = (([14], 40),) if compiled else (([21], 60), ([6, 19, 11], 45))
    for lengths, new in cases:
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=twin, speculative_mode="classic",
                                     speculative_compile=compiled, prompt_lookup=False)  # the drafter's own drafts
        stats = out.speculative_stats
        widths = stats.round_widths
        assert 1 in widths and max(widths) == 8  # plain steps and the default 7 drafts + 1
        committed = [n for n in stats.acceptance_lengths]
        per_round = [w for w in widths for _ in range(len(lengths))][: len(committed)]
        assert committed[:-len(lengths)] == per_round[:-len(lengths)]  # every draft accepted (the last round cut)


def test_a_draft_lm_reads_the_prompt_only_when_it_first_drafts(monkeypatch):
    """The classic draft LM reads the prompt in the forward that catches it up on plain steps' rows, when it first
    drafts: a call that decodes in plain steps never runs the draft model, and one that drafts after a few plain
    steps has every draft of the target's own copy accepted (a draft cache that missed the prompt, or read it at the
    wrong slots, would draft wrong tokens), in a left-padded batch too; the read computes no logits but its last
    row's."""
    import copy

    target = make_target("qwen3", seed=11, num_hidden_layers=1)
    twin = copy.deepcopy(target)
    # its linears' kinds as if timed already (once a process, on its own forwards: SpeculativeDecoder's
    # _draft_model_routes), so that the forwards counted are the calls' own
    width_policy.costs_of(twin).narrow_rows.update({("cpu", kind.name): False for kind in KINDS})
    forwards = []
    twin.register_forward_hook(lambda module, args, output: forwards.append(1))
    head_rows = []  # per forward of its lm_head: the rows it computed for each batch row
    twin.lm_head.register_forward_hook(lambda module, args, output: head_rows.append(args[0].shape[1]))
    rng = random.Random(14)
    for plain_rounds, lengths in ((10_000, [21]), (10_000, [6, 19, 11]), (4, [21]), (3, [6, 19, 11])):
        rounds = []

        def choose(self, copying=False):  # plain steps first, then the widest rounds
            rounds.append(self)
            return 1 if len(rounds) <= plain_rounds else self.widths[-1]

        monkeypatch.setattr(WidthPolicy, "choose", choose)
        forwards.clear()
        head_rows.clear()
        out = _exact_on_padded_batch(target, rng, lengths, 30, assistant_model=twin, speculative_mode="classic",
                                     prompt_lookup=False)
        stats = out.speculative_stats
        if plain_rounds > 30:
            assert forwards == [] and set(stats.round_widths) == {1} and stats.draft_forwards == 0
        else:
            assert stats.round_widths[:plain_rounds] == [1] * plain_rounds and max(stats.round_widths) > 1
            per_round = [w for w in stats.round_widths for _ in range(len(lengths))][: len(stats.acceptance_lengths)]
            assert stats.acceptance_lengths[:-len(lengths)] == per_round[:-len(lengths)]  # every draft accepted
            # the read and each drafting step compute the vocabulary's logits for their last row alone
            assert head_rows and set(head_rows) == {1}


def test_fly_default_call_is_exact_with_a_closed_gate_under_any_widths_and_its_twin_draft_accepts_everything(
        random_widths):
    """speculative_mode='fly' with no width takes the width policy (its whole block or a plain step). With a gate no
    mismatch passes (the top-3 entropy never reaches ln 3) its tokens are stock greedy's under any sequence of those,
    over a DFlash block and with a draft LM; the target's own copy as draft LM, drafting with prompt lookup (FLy's
    MLA, on by default), has every draft accepted, which a draft cache that missed the plain steps' tokens would not
    give. Its acceptance is kept apart from the same drafter's exact rounds."""
    import copy

    target = make_target("qwen3", seed=11, num_hidden_layers=2)
    twin = copy.deepcopy(target)
    drafter = make_dflash(target, block_size=8)
    rng = random.Random(13)
    closed = dict(speculative_mode="fly", fly_entropy_threshold=1.0986)
    twin_widths = []
    for lengths, new in (([21], 60), ([6, 19, 11], 90)):
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, **closed)
        assert {1, 8} <= set(out.speculative_stats.round_widths)
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=twin, **closed)
        stats = out.speculative_stats
        twin_widths += stats.round_widths
        per_round = [w for w in stats.round_widths for _ in range(len(lengths))][: len(stats.acceptance_lengths)]
        assert stats.acceptance_lengths[:-len(lengths)] == per_round[:-len(lengths)]  # every draft accepted
    assert set(twin_widths) == {1, 16}  # plain steps and the default 15 drafts + 1
    assert set(width_policy._ACCEPTANCE[target][drafter]) == {"fly W=6 theta=1.0986 reference"}


def test_fly_default_call_verifies_its_whole_block_or_a_plain_step():
    """FLy keeps a mismatch only with W matching drafts after it, so a prefix of its block would lose the rescues it
    is for: its policy chooses between the whole block and a plain step, nothing in between."""
    target = make_target("qwen3", seed=11, num_hidden_layers=2)
    drafter = make_dflash(target, block_size=8)
    out = target.generate(random_prompt(random.Random(6), 12), assistant_model=drafter, speculative_mode="fly",
                          max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
    assert set(out.speculative_stats.round_widths) == {1, 8}


def test_an_explicit_num_draft_tokens_keeps_the_classic_width():
    target = make_target("qwen3", seed=11)
    small = make_target("qwen3", seed=5, num_hidden_layers=1)
    prompt = random_prompt(random.Random(2), 9)
    out = target.generate(prompt, assistant_model=small, speculative_mode="classic", num_draft_tokens=3,
                          max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    assert out.speculative_stats.round_widths == []
    with pytest.raises(ValueError, match="draft_confidence_threshold is a width heuristic"):
        target.generate(prompt, assistant_model=small, speculative_mode="classic", adaptive_width=True,
                        draft_confidence_threshold=0.4, max_new_tokens=4)


def _record_single_row_proposals(patch, proposer) -> list:
    """Patch ``proposer.propose`` to record (committed sequence, proposal) of every call at batch 1; returns the list."""
    seen, original = [], proposer.propose

    def recording(self, width=None, whole_block=False, **stop):
        drafts = original(self, width, whole_block, **stop)
        if self.session.batch_size == 1:
            seen.append((self.session.committed().clone(), drafts))
        return drafts

    patch.setattr(proposer, "propose", recording)
    return seen


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_eagle3_default_call_is_exact_under_any_widths_and_drafts_from_the_whole_context(random_widths, shape):
    """speculative_mode='eagle3' with no width adapts it: a chain round of w rows drafts w - 1 tokens, a tree round
    verifies a tree of w nodes, a plain step drafts nothing and its target features join the drafter's context.
    Under any sequence of widths the tokens are stock greedy's (batches too), and every chain or tree drafted after
    plain steps equals the one drafted from scratch over the whole committed sequence (a context that missed a plain
    step's features, or kept an unaccepted draft's, would draft otherwise)."""
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer, Eagle3TreeProposer
    from test_eagle3 import _reference_chain, _reference_tree, make_eagle3

    target = make_target("llama", seed=4)
    drafter = make_eagle3(target, draft_vocab=128)
    if shape == "tree":
        with torch.no_grad():
            drafter.lm_head.weight.mul_(30)  # peaked: deep nodes outscore shallow ones (see test_eagle3)
    proposer = Eagle3TreeProposer if shape == "tree" else Eagle3ChainProposer
    tree = dict(eagle_top_k=3, eagle_depth=4) if shape == "tree" else dict(eagle_top_k=1)
    rng = random.Random(6)
    with pytest.MonkeyPatch.context() as patch:
        seen = _record_single_row_proposals(patch, proposer)
        for lengths, new in (([19], 40), ([7, 15, 2], 30)):
            out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter,
                                         speculative_mode="eagle3", prompt_lookup=False, **tree)
            widths = out.speculative_stats.round_widths
            assert 1 in widths and len(set(widths)) >= 3
    assert len(seen) > 5 and len({drafts.shape[-1] if shape == "chain" else len(drafts) for _, drafts in seen}) >= 2
    for committed, drafts in seen:
        if shape == "chain":
            assert drafts[0, 1:].tolist() == _reference_chain(target, drafter, committed, drafts.shape[1] - 1)
        else:
            assert (drafts.tokens[0].tolist(), drafts.parents[0].tolist()) == _reference_tree(
                target, drafter, committed, 3, 4, len(drafts))


def test_tree_budgets_follow_what_each_budget_would_have_kept():
    """A tree's expected accepted drafts at n nodes: what the verified trees' best n - 1 candidates kept (one verify
    tells every smaller budget). Trees that keep more the wider they are get wide budgets, one wide round every few
    brings evidence for the budgets between, drafts never accepted bring plain steps, and drafts accepted again
    bring trees back."""
    from hf_specgen.engine.width_policy import EXPLORE_EVERY, TreeAcceptanceEstimate

    widths = (1, 2, 4, 8, 16)
    kept = {2: 0.9, 4: 1.6, 8: 2.9, 16: 3.4}  # what each budget keeps of this drafter's trees
    estimate = TreeAcceptanceEstimate(widths, depth=6)
    assert estimate.expected_tokens(2) == pytest.approx(1.5)  # the prior, before any round
    assert estimate.expected_tokens(4) == pytest.approx(2.0)  # (each doubling adds what the last one did)
    for _ in range(100):
        estimate.observe(16, [3, 4], {n: [kept[n]] * 2 for n in kept if n <= 16})
    assert estimate.expected_tokens(8) == pytest.approx(1 + 2.9, rel=0.02)
    assert estimate.carried().expected_tokens(8) == pytest.approx(estimate.expected_tokens(8), rel=0.02)

    # verify costs that grow with the width and cheap drafting: budget 8 pays best, 16 now and then (exploring)
    costs = CostTable({1: 1.0, 2: 1.02, 4: 1.05, 8: 1.15, 16: 1.6}, draft=0.2)
    policy = WidthPolicy(widths, costs, estimate, draft_share=lambda w: min(w - 1, 6) / 6)
    chosen = []
    for _ in range(4 * EXPLORE_EVERY):
        chosen.append(policy.choose())
        policy.observe(chosen[-1], [2, 3], within={n: [kept[n]] * 2 for n in kept if n <= chosen[-1]})
    assert chosen.count(8) >= 0.6 * len(chosen) and 16 in chosen and 1 not in chosen
    # then no draft is ever accepted: plain steps, probes further and further apart
    chosen = []
    for _ in range(150):
        chosen.append(policy.choose())
        policy.observe(chosen[-1], [0, 0], within={n: [0, 0] for n in kept if n <= chosen[-1]})
    assert chosen[40:].count(1) >= 0.9 * len(chosen[40:])  # (the block's per-slot estimate takes as long)
    probes = [i for i, w in enumerate(chosen) if w > 1 and i >= 40]
    assert len(probes) >= 2 and all(b - a > 8 for a, b in zip(probes, probes[1:]))
    # drafts accepted again: the next probe keeps its drafts and trees come back, widening
    after = []
    for _ in range(80):
        after.append(policy.choose())
        width = after[-1]
        full = {n: [estimate.draft_slots(n)] * 2 for n in kept if n <= width}
        policy.observe(width, [estimate.draft_slots(width)] * 2, within=full)
    first = next(i for i, w in enumerate(after) if w > 1)
    assert first <= 64 and after[first + 1:].count(1) <= 0.1 * len(after[first + 1:]) and max(after) >= 8


def _unsure_drafter(mode: str, target):
    """A drafter for ``mode`` whose drafts' probabilities spread from near 0 to near 1 (its head's weights scaled)."""
    from test_eagle3 import make_eagle3

    if mode == "classic":
        drafter = make_target("llama", seed=5, num_hidden_layers=1)
        with torch.no_grad():
            drafter.get_output_embeddings().weight.mul_(30)
        return drafter
    eagle = make_eagle3(target, draft_vocab=128)
    with torch.no_grad():
        eagle.lm_head.weight.mul_(3)
    return eagle if mode == "eagle3" else hf_specgen.WhiFlash(ar=eagle, parallel=make_dflash(target, block_size=8),
                                                              router="random")


@pytest.mark.parametrize("mode", ["eagle3", "classic", "whiflash"])
def test_a_token_by_token_drafter_on_a_cpu_stops_drafting_when_unsure(mode, monkeypatch):
    """The default call of a drafter that drafts token by token (an EAGLE-3 chain, a draft LM, WhiFlash's EAGLE-3
    rounds) on a CPU drafts until every row's chance that all its drafts are right (the product of the drafter's
    probabilities) falls below UNSURE_STOP, then verifies the width confident_width picks from them. The tokens stay
    stock greedy's, at batch 1 and 3."""
    from hf_specgen.engine.width_policy import UNSURE_STOP

    target = make_target("llama", seed=4)
    drafter = _unsure_drafter(mode, target)
    original, rounds = WidthPolicy.confident_width, []
    choices = random.Random(3)  # a drafter this young gets plain steps: the rounds' widths drawn at random instead
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: choices.choice(self.widths))
    # WhiFlash: each round to the router's vote, so no clock decides which rounds call ``choose`` (an exploring
    # round, chosen by the measured costs, asks none and would move the random widths of all that follow)
    monkeypatch.setattr(width_policy.RoutedWidthPolicy, "_drafter_for", lambda self, vote, context: (vote, False))

    def recording(self, chosen, confidences, rate):
        width = original(self, chosen, confidences, rate)
        rounds.append((chosen, confidences, width))
        return width

    monkeypatch.setattr(WidthPolicy, "confident_width", recording)
    rng = random.Random(8)
    for lengths, new in (([19], 60), ([7, 15, 2], 40)):
        single = len(rounds)
        out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, speculative_mode=mode,
                                     prompt_lookup=False)
        assert len(rounds) > single  # the rounds that drafted chose their width from the drafts' probabilities
        if mode == "whiflash":  # EAGLE-3's rounds only: DFlash drafts its block in one forward
            drafters = out.speculative_stats.drafter_per_round
            assert "dflash" in drafters and len(rounds) - single <= drafters.count("eagle3")
    stopped = 0
    for chosen, confidences, width in rounds:
        drafts = len(confidences[0])
        assert all(len(row) == drafts for row in confidences) and 1 <= drafts <= chosen - 1
        assert all(0.0 < p <= 1.0 for row in confidences for p in row)
        assert width <= min(chosen, drafts + 1)
        if len(confidences) == 1:  # batch 1: the rule, draft by draft
            (row,) = confidences
            assert all(math.prod(row[:j]) >= UNSURE_STOP for j in range(1, drafts))  # each next draft was worth it
            if drafts < chosen - 1:
                stopped += 1
                assert math.prod(row) < UNSURE_STOP  # and it stopped only once it was not
    assert stopped >= 2 and len({width for _, _, width in rounds}) >= 3


@pytest.mark.parametrize("mode", ["eagle3", "classic", "whiflash"])
def test_a_drafter_that_stops_when_unsure_drafts_up_to_the_reach_at_any_width(mode, monkeypatch):
    """Eager, a token-by-token drafter's policy chooses among every width up to its block (it may stop after any
    draft), and when it stops only where unsure, a round drafts as far as the estimate's reach (twice the widest
    round verified so far), not just the width the policy chose: here every round is chosen 2 rows wide, the
    drafter is never unsure and every draft is verified, so the rounds widen 2, 4, 8 up to the block (a batch's
    stay 2 rows wide). Not WhiFlash's EAGLE-3 side, whose policy's rates are compared with DFlash's: its widths stay
    the buckets and its rounds the chosen width. The tokens stay stock greedy's."""
    target = make_target("llama", seed=4)
    drafter = _unsure_drafter(mode, target)
    offered = set()

    def narrowest(self, copying=False):
        offered.add(self.widths)
        return 2

    monkeypatch.setattr(WidthPolicy, "choose", narrowest)
    monkeypatch.setattr("hf_specgen.engine.loop.UNSURE_STOP", 0.0)
    monkeypatch.setattr(WidthPolicy, "confident_width", lambda self, chosen, confidences, rate: len(confidences[0]) + 1)
    prompt = random_prompt(random.Random(6), 21)
    ref = target.generate(prompt, max_new_tokens=50, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode=mode, max_new_tokens=50, do_sample=False,
                          eos_token_id=None, return_dict_in_generate=True, prompt_lookup=False)
    assert out.sequences.tolist() == ref.tolist()
    block = max(max(widths) for widths in offered)
    widths = out.speculative_stats.round_widths
    if mode == "whiflash":
        assert offered == {(1, 2, 4, 8)} and set(widths) == {2}, (offered, widths)
        assert "eagle3" in out.speculative_stats.drafter_per_round
        return
    assert offered == {tuple(range(1, block + 1))} and block >= 8
    assert widths[-4:-1] == [block] * 3 and {2, 4} <= set(widths), widths
    # a batch drafts until every row is unsure, seldom before the block: it drafts the chosen width while two rows
    # decode (30 tokens each, at most 2 a round: 15 rounds at least; a row left alone drafts on to the reach)
    out = _exact_on_padded_batch(target, random.Random(2), [9, 17], 30, assistant_model=drafter,
                                 speculative_mode=mode, prompt_lookup=False)
    assert out.speculative_stats.round_widths[:15] == [2] * 15


def test_a_draft_lm_drafting_on_to_the_reach_attends_every_slot_it_writes(monkeypatch):
    """A round chosen 2 rows wide that drafts on to the reach writes past the slots the chosen width would show its
    eager steps (the committed ones rounded up to 8): they are shown too, so every draft-LM forward's mask has a
    column for each slot it writes, and the target's own copy as draft LM, never unsure here, has every draft
    kept."""
    target = make_target("qwen3", seed=3)
    draft_lm = copy.deepcopy(target)
    forwards = []  # (first position, whether a written slot has no mask column)
    draft_lm.model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append((
        int(kwargs["position_ids"].min()), int(kwargs["position_ids"].max()) >= kwargs["attention_mask"].shape[-1])),
        with_kwargs=True)
    monkeypatch.setattr(WidthPolicy, "choose", lambda self, copying=False: 2)
    monkeypatch.setattr("hf_specgen.engine.loop.UNSURE_STOP", 0.0)
    monkeypatch.setattr(WidthPolicy, "confident_width", lambda self, chosen, confidences, rate: len(confidences[0]) + 1)
    prompt = random_prompt(random.Random(1), 30)
    ref = target.generate(prompt, max_new_tokens=60, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, assistant_model=draft_lm, speculative_mode="classic",
                          max_new_tokens=60, do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                          prompt_lookup=False)
    assert out.sequences.tolist() == ref.tolist()
    stats = out.speculative_stats
    # the rounds' forwards: from its first read of the prompt on (before it, the kernels' timing runs a drafting
    # step's shape, whose rows the rounds rewrite)
    rounds = forwards[[first for first, _ in forwards].index(0):]
    assert max(stats.round_widths) == 8 and len(rounds) > 20 and not any(unseen for _, unseen in rounds)
    assert all(kept == width for kept, width in zip(stats.acceptance_lengths[:-1], stats.round_widths)), stats


def test_the_confident_width_weighs_expected_tokens_against_the_verify_at_the_calls_rate():
    """Once a chain has drafted, the round verifies the width whose expected tokens (1 + the running products of the
    drafts' probabilities, per row) beat what its verify's time would commit at the call's rate by the most; here
    one token a second."""
    policy = WidthPolicy((1, 2, 4, 8), CostTable({1: 1.0, 2: 1.8, 4: 1.85, 8: 2.1}, draft=0.35),
                         AcceptanceEstimate(8), draft_share=lambda w: (w - 1) / 7)
    assert policy.confident_width(8, [[0.97] * 7], 1.0) == 8  # likely drafts: the whole chain
    assert policy.confident_width(4, [[0.97] * 3], 1.0) == 4  # never wider than the policy chose
    assert policy.confident_width(8, [[0.9, 0.9, 0.1, 0.5]], 1.0) == 4  # worth 2.8 tokens, all within 3 drafts
    assert policy.confident_width(8, [[0.3]], 1.0) == 1  # 1.3 tokens do not buy a verify of 1.8 plain steps
    # a batch: all its rows' tokens against one verify, at the batch's rate
    assert policy.confident_width(8, [[0.95], [0.9]], 2.0) == 2
    assert policy.confident_width(8, [[0.95], [0.2]], 2.0) == 1


def test_drafts_probabilities_are_computed_only_where_a_chain_stops_when_unsure():
    """A drafter step's softmax over its vocabulary is work on the hot path: only the default call on a CPU reads
    it (not a fixed chain, FLy, a tree, nor a GPU's call)."""
    from hf_specgen.config import SpeculativeConfig
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer
    from hf_specgen.mixin import _build_proposer, stops_when_unsure
    from test_eagle3 import make_eagle3

    target = make_target("llama", seed=4)
    eagle, small = make_eagle3(target), make_target("llama", seed=5, num_hidden_layers=1)

    def built(drafter, **config):
        return _build_proposer(target, drafter, SpeculativeConfig(**config), False)

    assert built(eagle, mode="eagle3").stops_when_unsure and built(small, mode="classic").stops_when_unsure
    for drafter, config in ((eagle, dict(mode="eagle3", num_draft_tokens=4)), (eagle, dict(mode="fly")),
                            (eagle, dict(mode="eagle3", eagle_top_k=3, eagle_depth=3)),
                            (small, dict(mode="classic", num_draft_tokens=4)), (small, dict(mode="fly"))):
        assert not getattr(built(drafter, **config), "stops_when_unsure", False), config
    on_gpu = types.SimpleNamespace(device=torch.device("cuda"))  # the rule reads the target's device only
    assert not stops_when_unsure(on_gpu, SpeculativeConfig(mode="classic"))
    assert stops_when_unsure(types.SimpleNamespace(device=torch.device("cpu")), SpeculativeConfig(mode="classic"))
    chain = Eagle3ChainProposer(eagle, target, 4, False)  # built without it: its steps return no probability
    assert chain.stops_when_unsure is False
    with pytest.raises(ValueError, match="stops_when_unsure"):
        chain.propose(4, stop_below=0.5)


def test_eagle3_default_call_drafts_an_adaptive_chain_on_a_cpu_and_a_tree_on_a_gpu():
    """The default call's shape follows the device (a CPU verify costs about in proportion to its rows); any shape
    or width the call names is kept."""
    from hf_specgen.config import SpeculativeConfig
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer, Eagle3TreeProposer
    from hf_specgen.mixin import _eagle3_proposer
    from test_eagle3 import make_eagle3

    default = SpeculativeConfig(mode="eagle3")
    assert default.eagle_shape("cpu") == 1 and default.eagle_shape("cuda") == 10 and default.adapts_width
    assert SpeculativeConfig(mode="eagle3", eagle_total_tokens=16).eagle_shape("cpu") == 10  # a tree was asked for
    assert not SpeculativeConfig(mode="eagle3", eagle_total_tokens=16).adapts_width
    assert SpeculativeConfig(mode="eagle3", num_draft_tokens=4).eagle_shape("cuda") == 1
    assert not SpeculativeConfig(mode="eagle3", num_draft_tokens=4).adapts_width
    assert SpeculativeConfig(mode="eagle3", eagle_top_k=4).adapts_width  # a tree, its budget adaptive
    assert SpeculativeConfig(mode="whiflash").eagle_shape("cpu") == 1  # its router was trained with chain proxies
    assert SpeculativeConfig(mode="whiflash").adapts_width and not SpeculativeConfig(mode="whiflash",
                                                                                     block_size=8).adapts_width
    target = make_target("llama", seed=4)
    drafter = make_eagle3(target)
    assert type(_eagle3_proposer(drafter, target, default, False)) is Eagle3ChainProposer
    assert type(_eagle3_proposer(drafter, target, SpeculativeConfig(mode="eagle3", eagle_top_k=3, eagle_depth=3),
                                 False)) is Eagle3TreeProposer
    prompt = random_prompt(random.Random(3), 11)
    ref = target.generate(prompt, max_new_tokens=20, do_sample=False, eos_token_id=None)
    out = target.generate(prompt, assistant_model=drafter, speculative_mode="eagle3", max_new_tokens=20,
                          do_sample=False, eos_token_id=None, return_dict_in_generate=True)
    assert out.sequences.tolist() == ref.tolist() and out.speculative_stats.round_widths


def test_whiflash_default_call_is_exact_under_any_widths_and_plain_steps_reach_both_drafters(random_widths):
    """speculative_mode='whiflash' with no width takes the policy: a plain step drafts nothing and its committed row
    joins both drafters' backlogs (caught up like any round a drafter sat out); a drafting round verifies the
    router's drafter's block or a prefix of it. With a random router and random widths the tokens are stock
    greedy's (batches too), and every EAGLE-3 chain drafted after plain steps and switches equals the one drafted
    from scratch over the whole committed sequence."""
    from hf_specgen.drafters.eagle3 import Eagle3ChainProposer
    from test_eagle3 import _reference_chain, make_eagle3

    target = make_target("llama", seed=4)
    eagle = make_eagle3(target, draft_vocab=128)
    bundle = hf_specgen.WhiFlash(ar=eagle, parallel=make_dflash(target, block_size=8), router="random")
    rng = random.Random(8)
    one_row = set()  # the drafters of the rounds that verified one row
    with pytest.MonkeyPatch.context() as patch:
        seen = _record_single_row_proposals(patch, Eagle3ChainProposer)
        for lengths, new in (([17], 40), ([6, 13, 2], 30)):
            out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=bundle,
                                         speculative_mode="whiflash", prompt_lookup=False)  # drafters, plain steps
            stats = out.speculative_stats
            assert set(stats.drafter_per_round) == {"eagle3", "dflash", "plain"}
            assert all(w == 1 for w, d in zip(stats.round_widths, stats.drafter_per_round) if d == "plain")
            one_row |= {d for w, d in zip(stats.round_widths, stats.drafter_per_round) if w == 1}
    # besides plain steps, EAGLE-3 rounds whose chain stopped unsure and then verified its root alone (DFlash's block
    # is one forward: it never stops unsure)
    assert one_row == {"plain", "eagle3"}
    assert len(seen) > 3
    for committed, drafts in seen:
        assert drafts[0, 1:].tolist() == _reference_chain(target, eagle, committed, drafts.shape[1] - 1)


def test_a_recurrent_target_charges_each_width_its_expected_refeed():
    """On a target with recurrent layers a round that commits c < w of its w rows re-feeds those c rows in one more
    forward. With every slot's rate at the even prior (1/2), a round of 4 rows commits 1, 2 or 3 rows with
    probabilities 1/2, 1/4, 1/8 (and re-feeds them at the cost of the narrowest width holding them); a round that
    commits all 4 re-feeds nothing. An attention-only target pays none of it, and a recurrent one, facing the same
    costs and acceptance, verifies a narrower width."""
    verify = {1: 1.0, 2: 1.2, 4: 1.5, 8: 2.2}
    hybrid = WidthPolicy((1, 2, 4, 8), CostTable(dict(verify), draft=0.1), AcceptanceEstimate(8), refeeds=True)
    attention = WidthPolicy((1, 2, 4, 8), CostTable(dict(verify), draft=0.1), AcceptanceEstimate(8))
    assert hybrid.expected_refeed(1) == 0.0 and attention.expected_refeed(4) == 0.0
    assert hybrid.expected_refeed(4) == pytest.approx(0.5 * 1.0 + 0.25 * 1.2 + 0.125 * 1.5)
    assert hybrid.model_seconds(4) == pytest.approx(1.5 + 0.1 + hybrid.expected_refeed(4))
    for policy in (hybrid, attention):  # evidence: the first drafts accepted, later ones less and less
        policy.acceptance.widest = 8
        for _ in range(20):
            policy.acceptance.observe(8, [7, 1, 2, 3])
    assert hybrid.expected_refeed(8) > 0
    chosen = {name: max(policy.widths, key=policy.rate) for name, policy in (("hybrid", hybrid),
                                                                                ("attention", attention))}
    assert chosen["hybrid"] < chosen["attention"], chosen


def test_a_recurrent_targets_policy_learns_verify_costs_from_rounds_without_a_refeed(monkeypatch):
    """The default DFlash call on a hybrid target (linear attention, then full attention): the policy knows the target
    re-feeds, every round that committed fewer rows than it verified is marked as re-fed, and the verify costs the
    call teaches the table come from the other rounds only (a re-fed round's clock holds two forwards)."""
    from test_hybrid import hybrid_target
    from hf_specgen.architectures import _assistant
    from hf_specgen.engine.loop import SpeculativeDecoder

    target = hybrid_target("qwen3_5_text", seed=3)
    policies, learned = [], []
    real_policy = SpeculativeDecoder._width_policy

    def keep_policy(self, session, show, copying):
        policies.append(real_policy(self, session, show, copying))
        return policies[-1]

    real_learn = width_policy.CostTable.learn_verify
    monkeypatch.setattr(SpeculativeDecoder, "_width_policy", keep_policy)
    monkeypatch.setattr(width_policy.CostTable, "learn_verify",
                        lambda table, w, s: (learned.append((w, s)), real_learn(table, w, s)))
    prompt = torch.tensor([[5, 9, 17, 33, 4, 8, 21, 40, 2, 11, 7]])
    out = target.generate(prompt, assistant_model=_assistant("dflash", target), speculative_mode="dflash",
                          max_new_tokens=40, do_sample=False, eos_token_id=None, return_dict_in_generate=True,
                          prompt_lookup=False)  # the drafter's rounds alone
    policy, stats = policies[0], out.speculative_stats
    assert policy.refeeds
    refed = {i for i, (w, c) in enumerate(zip(stats.round_widths, stats.acceptance_lengths)) if c < w}
    assert refed and policy.refed_rounds == refed
    clean = {}
    for i, width in enumerate(stats.round_widths):
        if i not in refed:
            clean.setdefault(width, []).append(stats.round_seconds[i] - stats.round_draft_seconds[i])
    assert {w for w, _ in learned} == set(clean)
    for width, seconds in learned:
        assert seconds == pytest.approx(statistics.median(clean[width]))


def test_adaptive_dflash_trees_are_exact_and_each_budget_is_the_best_prefixes_of_the_whole_context(random_widths):
    """dflash_tree_nodes=N with adaptive_width=True: each round verifies a tree of the width policy's node budget (or
    a plain step). Under any sequence of budgets the tokens are stock greedy's (batches too), and every tree is the
    budget's most probable prefixes under the drafter's distributions recomputed from scratch over the whole
    committed sequence (a budget cut from the wrong candidates, or a context that missed a plain step's features,
    would give other trees)."""
    from hf_specgen.drafters.dflash import DFlashTreeProposer

    target = make_target("llama", seed=9)
    drafter = make_dflash(target, block_size=4)
    rng = random.Random(4)
    with pytest.MonkeyPatch.context() as patch:
        seen = _record_single_row_proposals(patch, DFlashTreeProposer)
        for lengths, new in (([16], 36), ([5, 12, 3], 24)):
            out = _exact_on_padded_batch(target, rng, lengths, new, assistant_model=drafter, speculative_mode="dflash",
                                         dflash_tree_nodes=10, dflash_tree_top_k=3, adaptive_width=True)
            assert {1, 2, 4, 8, 10} <= set(out.speculative_stats.round_widths)
    assert len({len(tree) for _, tree in seen}) >= 3
    embed, width = target.get_input_embeddings(), drafter.block_size
    for committed, tree in seen:
        start = committed.shape[1] - 1  # the root: the last committed token
        with torch.no_grad():
            hidden = target(committed[:, :start], output_hidden_states=True).hidden_states
            context = torch.cat([hidden[i + 1] for i in drafter.target_layer_ids], dim=-1)
            block = torch.tensor([[int(committed[0, start])] + [drafter.mask_token_id] * (width - 1)])
            h = drafter(embed(block), context, torch.arange(start + width)[None])
            values, indices = torch.log_softmax(target.lm_head(h[0, 1:]).float(), dim=-1).topk(3, dim=-1)
        assert int(tree.tokens[0, 0]) == int(committed[0, start])
        assert sorted(tree_paths(tree)) == sorted(most_probable_prefixes(values, indices, len(tree) - 1))


def _routed_policy(dflash_draft: float, fixed=None, vote="dflash"):
    """A RoutedWidthPolicy over an EAGLE-3 chain (blocks of up to 4 rows, drafting token by token) and a DFlash
    block (8 rows, one forward), with equal verify costs and the given DFlash drafting cost; rounds drafted by
    whichever drafter the round names, the router voting ``vote``."""
    verify = {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.4}
    chain = WidthPolicy((1, 2, 4), CostTable(dict(verify), draft=0.3), AcceptanceEstimate(4),
                        draft_share=lambda w: (w - 1) / 3)
    block = WidthPolicy((1, 2, 4, 8), CostTable(dict(verify), draft=dflash_draft), AcceptanceEstimate(8))
    estimates = {name: {v: AcceptanceEstimate(size) for v in ("eagle3", "dflash")}
                 for name, size in (("eagle3", 4), ("dflash", 8))}
    pooled = {"eagle3": AcceptanceEstimate(4), "dflash": AcceptanceEstimate(8)}
    used = []
    policy = width_policy.RoutedWidthPolicy({"eagle3": chain, "dflash": block}, estimates, pooled, lambda: vote,
                                            used.append, fixed)
    return policy, used


def _run_routed(policy, used, rounds: int, kept: dict) -> list[tuple[str, int]]:
    """``rounds`` rounds; the drafter named ``d`` keeps ``kept[d](width)`` drafts of a round of ``width`` rows."""
    chosen = []
    for _ in range(rounds):
        width = policy.choose()
        chosen.append((used[-1], width))
        policy.observe(width, [kept[used[-1]](width) if width > 1 else 0], seconds=None)
    return chosen


def test_whiflash_default_call_drafts_with_the_drafter_whose_rounds_pay_whatever_the_router_votes():
    """The router votes DFlash every round. Both drafters keep every draft; DFlash's drafting costs four plain steps,
    the chain's a fraction of one: the rounds go to the EAGLE-3 chain, but for one round in OTHER_DRAFTER_EVERY in
    which DFlash drafts at its best width (its estimate keeps up). With DFlash drafting cheaply and keeping its 8-row
    blocks, the same vote gets DFlash rounds. A router fixed to DFlash keeps it however it pays."""
    every = lambda w: w - 1  # noqa: E731
    policy, used = _routed_policy(dflash_draft=4.0)
    chosen = _run_routed(policy, used, 64, {"eagle3": every, "dflash": every})
    drafters = [d for d, w in chosen if w > 1]
    assert drafters.count("dflash") <= 64 // width_policy.OTHER_DRAFTER_EVERY + 1
    assert drafters.count("eagle3") >= 56 and [w for d, w in chosen if d == "eagle3"].count(4) >= 50
    assert policy.estimates["dflash"]["dflash"].reached[1] > 0  # explored, so its estimate follows the text

    policy, used = _routed_policy(dflash_draft=0.2)
    chosen = _run_routed(policy, used, 64, {"eagle3": every, "dflash": every})
    assert [d for d, w in chosen[-32:]].count("dflash") >= 28 and chosen[-2] == ("dflash", 8)

    policy, used = _routed_policy(dflash_draft=4.0, fixed="dflash")
    chosen = _run_routed(policy, used, 32, {"eagle3": every, "dflash": every})
    assert {d for d, _ in chosen} == {"dflash"}


def test_whiflash_default_call_explores_less_often_while_the_other_drafter_stays_behind():
    """The chain keeps every draft of its 4 rows; DFlash, drafting at half a plain step, keeps 2 drafts a round, which
    leaves its rounds behind. Each round in which DFlash drafts once and stays behind doubles its gap under that vote
    (16, 32, 64, then 128 rounds, the last carried into the next call); each drafts 8 rows, the widest whose round
    costs at most EXPLORE_WIDENING times one at its best width (2 or 4 rows). Before, it drafted once every 16 rounds
    however far behind (on the real target, whose EAGLE-3 drafter keeps about twice DFlash's drafts, those rounds cost
    WhiFlash a percent or so of EAGLE-3 alone's speed). Then the text turns for DFlash: it keeps every draft. Its next
    exploring round, a whole 8-row block kept, beats the chain's rate: its stale evidence goes, its gap is the first
    again, and it leads from the next round on."""
    every = lambda w: w - 1  # noqa: E731
    policy, used = _routed_policy(dflash_draft=0.5)
    chosen = _run_routed(policy, used, 400, {"eagle3": every, "dflash": lambda w: min(w - 1, 2)})
    explored = [i for i, (d, w) in enumerate(chosen) if d == "dflash"]
    first, last = width_policy.OTHER_DRAFTER_EVERY, width_policy.LAST_OTHER_DRAFTER_EVERY
    assert (first, last) == (16, 128)
    assert explored[0] == first - 1 and [b - a for a, b in zip(explored, explored[1:])] == [32, 64, 128, 128]
    assert policy.policies["dflash"].best_drafting_width() < 8
    assert [chosen[i][1] for i in explored] == [8] * 5  # wider than its best width: it costs little more
    estimate = policy.estimates["dflash"]["dflash"]
    assert estimate.explore_after == last and estimate.carried().explore_after == last
    assert policy.estimates["dflash"]["eagle3"].explore_after == first  # a vote whose rounds never explored

    since = len(chosen) - 1 - explored[-1]
    chosen = _run_routed(policy, used, 200, {"eagle3": every, "dflash": every})
    explored = [i for i, (d, w) in enumerate(chosen) if d == "dflash"]
    assert chosen[: explored[0]] == [("eagle3", 4)] * (last - since - 1)
    after = chosen[explored[0]:]  # DFlash leads at 8 rows; the chain explores once per gap
    assert all(w == 8 for d, w in after if d == "dflash")
    assert [d for d, _ in after].count("eagle3") <= len(after) // first + 1 and after[:first] == [("dflash", 8)] * first
    assert estimate.explore_after == first


def test_whiflash_default_call_counts_the_rounds_towards_the_other_drafters_turn_across_calls():
    """Calls of 10 rounds, each carrying the estimates into the next (as a bundle's calls do); EAGLE-3's chains keep
    every draft, DFlash's blocks keep none and cost four plain steps to draft. DFlash's exploring rounds come where
    the rounds since it last drafted reach its gap (16, then 32, 64: it stays behind), counted across the calls. Counted
    per call, no call reached 16 rounds and it never drafted again: on the tiny world, a fresh bundle whose first DFlash
    round kept nothing rated DFlash below EAGLE-3 for good, and math ran on EAGLE-3's chains at 1.6x stock where
    DFlash's blocks run at 3.4x."""
    every = lambda w: w - 1  # noqa: E731
    policy, used = _routed_policy(dflash_draft=4.0)
    rounds, policy = _carried_calls(policy, used, 12, 10, {"eagle3": every, "dflash": lambda w: 0})
    assert [i for i, (drafter, _) in enumerate(rounds) if drafter == "dflash"] == [15, 47, 111]
    assert policy.estimates["dflash"]["dflash"].rounds_without == 120 - 112


def _carried_calls(policy, used, calls: int, rounds: int, kept: dict):
    """``calls`` calls of ``rounds`` rounds, each carrying the estimates into the next (as a bundle's calls do): the
    rounds' (drafter, width), and the policy of the call after the last."""
    chosen = []
    for _ in range(calls):
        chosen += _run_routed(policy, used, rounds, kept)
        estimates = {name: {vote: estimate.carried() for vote, estimate in by_vote.items()}
                     for name, by_vote in policy.estimates.items()}
        pooled = {name: estimate.carried() for name, estimate in policy.pooled.items()}
        policy = width_policy.RoutedWidthPolicy(policy.policies, estimates, pooled, policy.vote, used.append)
    return chosen, policy


def test_whiflash_default_call_explores_where_a_call_opens_if_exploring_is_cheap():
    """A call is new text. Calls of 10 rounds, carried into each other; EAGLE-3's chains keep every draft, DFlash's
    blocks keep none. Where DFlash's 8-row round costs about the chain's (drafting at 0.3 plain steps: 1.13 times the
    chain's 4-row round), a call's first drafting round explores with it every ``opening_explore_every``-th call,
    whatever its gap, and each such round that leaves it behind doubles that count up to LAST_OPENING_EXPLORE_EVERY:
    after its gap's round (the 16th), the calls opening at rounds 20, 40 and 80. Where it costs more than
    OPENING_EXPLORE_COST times the chain's round (drafting at 4 plain steps), only its gap calls it
    (``test_whiflash_default_call_counts_the_rounds_towards_the_other_drafters_turn_across_calls``).

    Then DFlash leads for three calls, keeps nothing for one (the chains take over within it) and keeps every draft
    again: the next call opens with a DFlash round, which beats the chain, and DFlash leads from there. Before, a
    call opened with an exploring round under each router vote only where the vote had gone 16 rounds without it:
    here the whole next call ran on the chains; on the tiny world (AVX2 fp32 costs), whose math answers take about 11
    rounds, the first three math prompts of one pass of three ran on EAGLE-3's chains at tau 3-4, where DFlash's
    blocks keep 6-7 drafts (and before any opening round, with a gap of 64 carried from code, 130 rounds did)."""
    every = lambda w: w - 1  # noqa: E731
    for draft, opening_rounds in ((0.3, [20, 40, 80]), (4.0, [])):
        policy, used = _routed_policy(dflash_draft=draft)
        chosen, policy = _carried_calls(policy, used, 12, 10, {"eagle3": every, "dflash": lambda w: 0})
        explored = [i for i, (drafter, _) in enumerate(chosen) if drafter == "dflash"]
        assert [i for i in explored if i % 10 == 0] == opening_rounds and all(chosen[i][1] == 8 for i in explored)
        assert policy.estimates["dflash"]["dflash"].opening_explore_every == (8 if opening_rounds else 1)
    assert width_policy.LAST_OPENING_EXPLORE_EVERY == 8 and width_policy.OPENING_EXPLORE_COST == 1.25

    policy, used = _routed_policy(dflash_draft=0.3)
    chosen, policy = _carried_calls(policy, used, 3, 10, {"eagle3": every, "dflash": every})
    assert chosen[-9:] == [("dflash", 8)] * 9
    chosen, policy = _carried_calls(policy, used, 1, 10, {"eagle3": every, "dflash": lambda w: 0})
    assert chosen[-5:] == [("eagle3", 4)] * 5
    chosen, policy = _carried_calls(policy, used, 1, 10, {"eagle3": every, "dflash": every})
    assert chosen == [("dflash", 8)] * 10
    assert policy.estimates["dflash"]["dflash"].opening_explore_every == 1


@pytest.mark.parametrize("kept", [5, 7])
def test_whiflash_default_call_drops_stale_evidence_where_an_exploring_round_beats_the_leader(kept):
    """DFlash's evidence is stale: under both votes and over all, 4 rounds' worth of drafts kept a fifth of the time.
    The chain keeps every draft of its 4 rows; DFlash, drafting at half a plain step, now keeps ``kept`` of the 7
    drafts of its 8-row blocks. Its first exploring round (the 16th) drafts the whole block, wider than its stale best
    width, as it costs little more. Its tokens over its cost beat the chain's rate: its evidence under every vote and
    over all goes, and as that one round still rates it below the chain, the vote's next round explores again,
    building on it. DFlash leads from there; the chain explores once per gap. Before, an exploring round drafted at
    the drafter's best width and kept its stale evidence (on the tiny world, a bundle whose DFlash evidence had gone
    bad on code ran math on EAGLE-3's chains for 130 rounds at 1.6x stock, where DFlash's blocks run at 3.4x; with
    its exploring rounds at 2 and 4 rows exploring again, at 1.1-2.1x). Where the exploring drafter keeps every draft
    but its rounds cost too much to lead, no round explores again at once
    (``test_whiflash_default_call_drafts_with_the_drafter_whose_rounds_pay_whatever_the_router_votes``)."""
    policy, used = _routed_policy(dflash_draft=0.5)
    for estimate in (policy.pooled["dflash"], *policy.estimates["dflash"].values()):
        estimate.reached = [0.0] + [4.0] * 7
        estimate.accepted = [0.0] + [0.8] * 7
        estimate.widest = 2
    block = policy.policies["dflash"]
    assert block.best_drafting_width() == 2 and block.exploring_width() == 8
    block.costs.verify[8] = 3.0  # a round of 8 rows at twice a round of 2's cost: not worth exploring at
    assert block.exploring_width() == 4
    block.costs.verify[8] = 1.4
    keeps = {"eagle3": lambda w: w - 1, "dflash": lambda w: min(w - 1, kept)}
    assert _run_routed(policy, used, 16, keeps) == [("eagle3", 2)] + [("eagle3", 4)] * 14 + [("dflash", 8)]
    assert policy.estimates["dflash"]["eagle3"].reached[1] == 0.0  # the other vote's stale evidence went too
    assert policy.estimates["dflash"]["dflash"].reached[1] == 1.0  # this round's alone
    assert policy.estimates["dflash"]["dflash"].explore_width == 8  # still rated below: the next round explores
    chosen = _run_routed(policy, used, 48, keeps)
    assert chosen[:15] == [("dflash", 8)] * 15 and all(w == 8 for d, w in chosen if d == "dflash")
    assert [d for d, _ in chosen].count("eagle3") <= 48 // width_policy.OTHER_DRAFTER_EVERY + 1
    assert policy.estimates["dflash"]["dflash"].explore_width == 0  # leading, it has no exploring round due


def test_whiflash_default_call_probes_with_each_drafter_in_turn_while_plain_steps_pay():
    """Plain steps pay: EAGLE-3's drafts have failed for 20 rounds, DFlash's kept about a third for 200, which rates
    its drafting the more promising, still below a plain step. Then the text turns predictable for EAGLE-3 alone.
    Probes take turns between the drafters, so EAGLE-3's comes after DFlash's has failed; it passes, which drops
    EAGLE-3's evidence under every vote and over all, and its chains widen to the whole 4 rows. Before, the more
    promising drafter ran every probe (DFlash's failed, each moving its long evidence little, and EAGLE-3 never
    drafted again), and a passing probe dropped only the vote's estimate, whose prior (the drafter's estimate over all
    its rounds) then held its chains to 2 rows."""
    policy, used = _routed_policy(dflash_draft=0.5)
    for name, rate, rounds in (("eagle3", 0.0, 20.0), ("dflash", 0.35, 200.0)):
        for estimate in (policy.pooled[name], *policy.estimates[name].values()):
            estimate.reached = [rounds] * len(estimate.reached)
            estimate.accepted = [rate * rounds] * len(estimate.accepted)
            estimate.widest = len(estimate.reached)
    for drafter_policy in policy.policies.values():
        drafter_policy.opening_probe = False  # the middle of a call
    chosen = _run_routed(policy, used, 96, {"eagle3": lambda w: w - 1, "dflash": lambda w: 0})
    assert [w for _, w in chosen[:8]] == [1] * 8  # plain steps pay at first
    probes = [d for d, w in chosen[:40] if w > 1]
    assert probes[:2] == ["dflash", "eagle3"]  # DFlash, the more promising, probes first; then EAGLE-3
    assert chosen[-48:].count(("eagle3", 4)) >= 40


def test_whiflash_default_call_probes_under_each_router_vote_on_that_votes_plain_rounds():
    """The router votes DFlash every third round and EAGLE-3 otherwise; DFlash's drafting costs 100 plain steps, so
    no width of its could ever pay. EAGLE-3's chain keeps every draft in the rounds of the DFlash vote; in those of
    its own vote it keeps none for 60 rounds (its estimate there starts from 20 failed rounds), then every draft.
    Under its own vote plain steps win, and its probes there count that vote's plain rounds: one comes within a dozen
    rounds of the text turning, passes, and its chains there widen to the whole 4 rows. Before, one plain streak per
    drafter counted every vote's rounds, and each drafting round of the DFlash vote reset it, so no probe ever ran
    under the EAGLE-3 vote (on the real target's GSM8K with an AVX2 CPU's costs, a vote's estimate that two failed
    rounds had left under plain steps' rate held it to plain steps for the rest of the call); and after its probe the
    turn went to DFlash, which never probes, for good."""
    policy, used = _routed_policy(dflash_draft=100.0)
    vote_of = lambda i: "dflash" if i % 3 == 2 else "eagle3"  # noqa: E731
    policy.vote = lambda: vote_of(len(used))
    estimate = policy.estimates["eagle3"]["eagle3"]
    estimate.reached, estimate.accepted, estimate.widest = [20.0] * 4, [0.0] * 4, 4
    for drafter_policy in policy.policies.values():
        drafter_policy.opening_probe = False  # the middle of a call
    turned = []
    chain = lambda w: w - 1 if vote_of(len(used) - 1) == "dflash" or turned else 0  # noqa: E731
    kept = {"eagle3": chain, "dflash": lambda w: 0}
    chosen = _run_routed(policy, used, 60, kept)
    own_vote = [(d, w) for i, (d, w) in enumerate(chosen) if vote_of(i) == "eagle3"]
    assert ("eagle3", 2) in own_vote[:12]  # a probe under its own vote, which fails
    assert [(d, w) for i, (d, w) in enumerate(chosen) if vote_of(i) == "dflash"][-10:] == [("eagle3", 4)] * 10
    assert all(d == "eagle3" for d, _ in chosen)  # DFlash never drafts: no probe, no exploring round

    turned.append(True)
    start = len(used)
    chosen = _run_routed(policy, used, 90, kept)
    own_vote = [(d, w) for i, (d, w) in enumerate(chosen) if vote_of(start + i) == "eagle3"]
    first = next(i for i, (d, w) in enumerate(own_vote) if w > 1)
    assert first <= 12 and own_vote[first + 1:] == [("eagle3", 4)] * (len(own_vote) - first - 1)


def test_whiflash_default_call_keeps_the_drafters_acceptance_apart_under_each_router_vote():
    """The router's vote alternates. At equal costs, each drafter keeps every draft in the rounds the router votes
    for it and none in the others: each vote has its own estimate (whose prior is the drafter's estimate over all
    its rounds), so the drafting rounds come to follow the vote."""
    policy, used = _routed_policy(dflash_draft=0.3)
    vote_of = lambda i: ("eagle3", "dflash")[i % 2]  # noqa: E731
    policy.vote = lambda: vote_of(len(used))
    own = lambda name: lambda w: w - 1 if vote_of(len(used) - 1) == name else 0  # noqa: E731
    chosen = _run_routed(policy, used, 160, {"eagle3": own("eagle3"), "dflash": own("dflash")})
    late = [(i, d) for i, (d, w) in enumerate(chosen) if i >= 80 and w > 1]
    assert len(late) >= 60 and sum(d == vote_of(i) for i, d in late) >= 0.85 * len(late)
    assert policy.estimates["eagle3"]["eagle3"].pooled is policy.pooled["eagle3"]
    assert policy.pooled["eagle3"].reached[1] > 0 and policy.pooled["dflash"].reached[1] > 0


def test_a_vote_new_to_a_drafter_drafts_as_wide_as_its_rounds_under_the_other_vote_showed():
    """DFlash drafts cheaply and keeps its whole 8-row blocks through 40 rounds of the DFlash vote; then the router
    votes EAGLE-3, under which DFlash has not drafted yet and EAGLE-3's chain keeps one draft of each round. Under the
    new vote DFlash's estimate is its rounds' so far (its prior), verified up to 8 rows: its first round there drafts
    its whole block, and the vote's rounds stay DFlash's. Before, a vote's reach was twice the widest round of its
    own evidence, so DFlash's best width under the new vote was 2, rated below EAGLE-3's 4-row chain (the tiny world's
    neural router gave its EAGLE-3 votes on math to chains keeping 2-3 tokens where DFlash's blocks kept 8+)."""
    policy, used = _routed_policy(dflash_draft=0.2)
    kept = {"eagle3": lambda w: 1, "dflash": lambda w: w - 1}
    assert _run_routed(policy, used, 40, kept)[-8:] == [("dflash", 8)] * 8
    policy.vote = lambda: "eagle3"
    assert policy.estimates["dflash"]["eagle3"].reached[1] == 0  # no evidence of its own under this vote
    chosen = _run_routed(policy, used, 24, kept)
    assert chosen[0] == ("dflash", 8) and chosen.count(("dflash", 8)) >= 22


def test_the_policy_replay_scores_the_engines_policy_against_fixed_widths_without_a_clock():
    """scripts/policy_replay.py on made-up acceptance (no model): a drafter whose every draft is right on one kind of
    text and wrong on another, with AVX2-like costs. A fixed width's ratio is exact arithmetic; the policy drafts wide
    where drafts are right and, once its evidence is the text's own, costs little more than plain steps where no draft
    is right; calls in turns alternate the kinds."""
    replay = load_repo_module("scripts/policy_replay.py", "policy_replay")
    costs = {"verify": {"1": 1.0, "2": 1.6, "4": 1.65, "8": 1.7}, "draft": 0.2, "draft_head": None}
    calls = [{"category": kind, "answer_tokens": 97, "dflash": [7 if kind == "easy" else 0] * 97}
             for kind in ("easy", "easy", "hard", "hard")]
    data = {"calls": calls, "costs": {"dflash": costs}}
    fixed = replay.fixed_width(data, "dflash", 8)
    assert fixed["easy"] == pytest.approx([96 / (12 * 1.9)] * 2)  # 12 rounds of 8 tokens, each 1.7 + 0.2
    assert fixed["hard"] == pytest.approx([96 / (96 * 1.9)] * 2)
    ratios = replay.replay(data, "dflash", passes=1, noise=0.0, seed=0, order="blocks")
    assert all(r > 0.9 * fixed["easy"][0] for r in ratios["easy"])
    # the first call on the hard text drafts on the hope carried from the easy ones for a while (still far ahead of
    # the fixed width); the second starts from its evidence and loses only its probes
    assert fixed["hard"][0] < ratios["hard"][0] < ratios["hard"][1] and 0.9 < ratios["hard"][1] < 1.0
    assert [c["category"] for c in replay.call_order(calls, "round-robin")] == ["easy", "hard", "easy", "hard"]
    # an EAGLE-3 chain whose drafts carry their probabilities: sure and right on the easy text, unsure and wrong on
    # the hard one. Stopping when unsure, the rounds that the hope carried from the easy text drafts on the hard one
    # verify one row after a single draft, and the estimate still learns that such drafts are rarely kept
    for call in calls:
        easy = call["category"] == "easy"
        call["eagle3"], call["eagle3_confidences"] = call.pop("dflash"), [[0.95 if easy else 0.05] * 7] * 97
    data = {"calls": calls, "costs": {"eagle3": costs}}
    plain = replay.replay(data, "eagle3", passes=1, noise=0.0, seed=0, order="blocks")
    unsure = replay.replay(data, "eagle3", passes=1, noise=0.0, seed=0, order="blocks", unsure=True)
    assert unsure["easy"] == pytest.approx(plain["easy"], rel=0.05)
    assert unsure["hard"][0] > plain["hard"][0] + 0.1 and unsure["hard"][1] == pytest.approx(plain["hard"][1])


def test_the_policy_replay_replays_whiflash_with_a_router_that_tells_the_drafters_texts_apart():
    """scripts/policy_replay.py's WhiFlash replay on made-up data: stretches of 12 answer tokens where EAGLE-3's chain
    is right (and sure) and DFlash's block wrong, then the other way round, and a router that votes for the right
    drafter. Alone, each drafter drafts on half the text at most; WhiFlash's default call (RoutedWidthPolicy, the
    estimates kept per vote) commits about 8 tokens a round on all of it, and more than with the vote ignored."""
    replay = load_repo_module("scripts/policy_replay.py", "policy_replay")
    costs = {"verify": {"1": 1.0, "2": 1.6, "4": 1.65, "8": 1.7}, "draft": 0.2, "draft_head": None}
    votes = [("eagle3", "dflash")[i // 12 % 2] for i in range(97)]
    calls = [{"category": "mixed", "answer_tokens": 97, "whiflash_votes": votes,
              "eagle3": [7 if v == "eagle3" else 0 for v in votes],
              "dflash": [7 if v == "dflash" else 0 for v in votes],
              "eagle3_confidences": [[0.95 if v == "eagle3" else 0.05] * 7 for v in votes]} for _ in range(4)]
    data = {"calls": calls, "costs": {"eagle3": costs, "dflash": dict(costs)}}
    alone = [max(replay.replay(data, mode, 1, 0.0, 0, "blocks", unsure=mode == "eagle3")["mixed"])
             for mode in ("eagle3", "dflash")]
    routed = replay.replay_routed(data, 1, 0.0, 0, "blocks", "router")["mixed"]
    one_context = replay.replay_routed(data, 1, 0.0, 0, "blocks", "one")["mixed"]
    # 8 tokens a round at 1.9 plain steps: 4.2x; the third call 3.9x, for one exploring round of the drafter the
    # router did not vote for (the rounds towards it counted across calls: counted per call, none came, as each
    # call's 12 rounds are fewer than OTHER_DRAFTER_EVERY)
    assert max(alone) < 1.3 and min(routed[1:]) > 3.8 and max(routed[1:]) > 4.0
    assert max(one_context) < min(routed[1:]) - 1.0


def test_the_policy_replay_knows_both_worlds_and_shares_one_verify_table_across_their_widths():
    """scripts/policy_replay.py's worlds name folders of this repository (``--world tiny``: the tiny world's target,
    drafters and WhiFlash bundle), and WhiFlash's replay puts both drafters on EAGLE-3's verify table, DFlash's wider
    widths scaled by the two tables' ratio at EAGLE-3's widest, whichever widths either table has (the tiny world's
    EAGLE-3 table holds 3, 5, 6 and 7, which DFlash's does not)."""
    replay = load_repo_module("scripts/policy_replay.py", "policy_replay")
    root = Path(__file__).resolve().parents[1]
    for world in replay.WORLDS.values():
        folders = [*world["drafters"].values(), world["whiflash"]]
        folders += [world["target"]] if "/" in world["target"] else []  # (the real target is prepared, not here)
        assert all((root / folder / "config.json").exists() for folder in folders), folders
    data = {"costs": {"eagle3": {"verify": {"1": 1.0, "2": 1.2, "3": 1.3, "4": 1.4, "8": 2.0}},
                      "dflash": {"verify": {"1": 1.1, "2": 1.3, "4": 1.5, "8": 2.5, "16": 3.0}}}}
    assert replay.shared_verify(data) == pytest.approx(
        {"1": 1.0, "2": 1.2, "3": 1.3, "4": 1.4, "8": 2.0, "16": 3.0 * 2.0 / 2.5})


def test_a_call_whose_drafts_fail_soon_outweighs_the_hope_carried_from_one_whose_drafts_were_right():
    """Where a round of 8 rows and its drafting cost 1.9 plain steps: after a call whose every draft was right, a call
    whose every draft fails drafts in at most half of its first 40 rounds (the carried evidence is worth a few rounds;
    carrying 16 rounds' worth, it drafted 8 rows in 38 of them), and then plain steps with the odd probe."""
    costs = CostTable({1: 1.0, 2: 1.6, 4: 1.65, 8: 1.7}, draft=0.2)
    first = WidthPolicy((1, 2, 4, 8), costs, AcceptanceEstimate(8))
    for _ in range(40):
        width = first.choose()
        first.observe(width, [width - 1])
    second = WidthPolicy((1, 2, 4, 8), costs, first.acceptance.carried())
    choices = []
    for _ in range(60):
        choices.append(second.choose())
        second.observe(choices[-1], [0])
    assert choices[0] == 8  # it opens at the width the last call paid at
    assert sum(w > 1 for w in choices[:40]) <= 20 and sum(w > 1 for w in choices[40:]) <= 2


def test_the_routed_policy_rates_a_batch_until_its_slowest_row_is_done():
    """WhiFlash's default call in a batch: each drafter's policy takes the batch's rows (WidthPolicy.set_rows), so a
    width's rate is the batch's until its slowest row is done, not the mean row's (rating the mean row, the tiny
    world's WhiFlash kept drafting at batch 8 and 16 and lost to stock batched generate)."""
    policy, used = _routed_policy(0.1)
    policy.set_rows([0, 1, 2, 3], [40, 40, 40, 40], False)
    assert all(p.rows == [(0, 40), (1, 40), (2, 40), (3, 40)] and not p.rows_leave for p in policy.policies.values())
    batch_rates = {name: p.rate(4) for name, p in policy.policies.items()}
    policy.set_rows([0], [40], False)  # one row: the mean row's rate
    assert all(p.rows is None for p in policy.policies.values())
    assert batch_rates != {name: p.rate(4) for name, p in policy.policies.items()}


def test_a_single_miss_at_a_deep_slot_does_not_set_the_rate_of_every_slot_past_it():
    """A block's deep slots are reached in few rounds. After four rounds of 8 rows that kept all their drafts and one
    of 16 that missed at slot 9, slots 9-15 lean on the slots before them (SLOT_PRIOR_WEIGHT: two rounds' worth)
    rather than on that one miss (at one round's worth, all were rated 0.5), so where a round of 16 rows costs 1.3
    rounds of 8 the policy still verifies 16 (at one round's worth, 8: 1.25 times the tokens)."""
    estimate = AcceptanceEstimate(16)
    for _ in range(4):
        estimate.observe(8, [7])
    estimate.observe(16, [8])
    rates = estimate.rates(16)
    assert min(rates[:8]) > 0.8 and min(rates[8:]) > 0.6
    costs = CostTable({1: 1.0, 2: 1.2, 4: 1.38, 8: 1.5, 16: 1.5 + 0.3 * (1.5 + 0.77)}, draft=0.77)
    assert WidthPolicy((1, 2, 4, 8, 16), costs, estimate).choose() == 16
