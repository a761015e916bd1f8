"""Batches of prompts: every batchable mode equals stock batched generate on the same left-padded batch (fp32), rows
that finish early are padded as stock pads them, sampling keeps the target's distribution in every row, a round
reads the device once, and what cannot batch says so before decoding."""

from __future__ import annotations

import collections
import random
import traceback
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare
from torch.overrides import TorchFunctionMode
from transformers import LogitsProcessorList, TemperatureLogitsWarper

import hf_specgen
from conftest import MASK_TOKEN, make_dflash, make_gemma3n, make_target
from hf_specgen.engine.prefill import set_forward_overhead
from test_eagle3 import make_eagle3
from test_sampling import SAMPLES, STEPS, VOCAB, exact_joint


def padded_batch(rng: random.Random, lengths: list[int], pad: int = 0):
    """Left-padded prompts of the given lengths: (input_ids [B, max], attention_mask [B, max])."""
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.tensor([rng.randrange(3, MASK_TOKEN) for _ in range(n)])
        mask[b, width - n:] = 1
    return ids, mask


def _assistants(target, family: str = "qwen3"):
    eagle = make_eagle3(target)
    return {
        "autoregressive": (None, {}),
        "dflash": (make_dflash(target, block_size=8), {}),
        "classic": (make_target(family, seed=5, num_hidden_layers=1), {"num_draft_tokens": 4}),
        "eagle3": (eagle, {"eagle_top_k": 1, "num_draft_tokens": 4}),
        "eagle3-tree": (eagle, {"eagle_top_k": 3, "eagle_depth": 4, "eagle_total_tokens": 10}),
        # the width policy picks each round's node budget (or a plain step); its evidence rides the round's one read
        "eagle3-adaptive": (eagle, {"eagle_top_k": 3, "eagle_depth": 4}),
        # FLy with a gate no mismatch passes rescues nothing: it must equal the target's greedy tokens.
        "fly": (make_dflash(target, block_size=8, seed=2), {"fly_entropy_threshold": 1.0986}),
        # ... with a draft LM and prompt lookup (FLy's MLA, on by default for a draft LM): candidates per row.
        "fly-mla": (make_target(family, seed=5, num_hidden_layers=1), {"fly_entropy_threshold": 1.0986,
                                                                        "num_draft_tokens": 6}),
        # Rows stop drafting at their own step when the draft model is unsure.
        "classic-confident": (make_target(family, seed=5, num_hidden_layers=1),
                              {"num_draft_tokens": 5, "draft_confidence_threshold": 0.08}),
        # Every row votes at random: the batch switches drafters and catches up ragged backlogs.
        "whiflash": (hf_specgen.WhiFlash(ar=eagle, parallel=make_dflash(target, block_size=6), router="random"),
                     {"eagle_top_k": 2, "eagle_depth": 3, "eagle_total_tokens": 6}),
    }


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_every_batchable_mode_equals_stock_batched_greedy(family):
    target = make_target(family)
    rng = random.Random(11)
    cases = [([5, 17, 1, 30], 25), ([40, 40, 3], 41), ([12, 2], 7), ([9, 1, 22, 4, 30, 13, 2, 17], 12)]
    for mode, (assistant, extra) in _assistants(target, family).items():
        for lengths, max_new in cases:
            ids, mask = padded_batch(rng, lengths)
            # No stop token here (the next test has them): every row decodes max_new tokens.
            ref = target.generate(ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, eos_token_id=None)
            out = target.generate(ids, attention_mask=mask, assistant_model=assistant,
                                  speculative_mode=mode.split("-")[0], max_new_tokens=max_new, do_sample=False,
                                  eos_token_id=None,
                                  return_dict_in_generate=True, **extra)
            assert out.sequences.tolist() == ref.tolist(), (mode, lengths, max_new)
            stats = out.speculative_stats
            assert stats.batch_size == len(lengths) and stats.row_new_tokens == [max_new] * len(lengths)
            for row in stats.row_acceptance_lengths:  # each row's rounds commit exactly its tokens
                assert 1 + sum(row) >= max_new and 1 + sum(row[:-1]) < max_new
            if mode == "autoregressive":  # tau is per row and round: one token each
                assert stats.mean_acceptance_length == 1.0


def test_rows_that_stop_early_are_padded_like_stock():
    """Stop tokens end rows at different rounds: finished rows stay put and get pad_token_id, the rest go on."""
    target = make_target("qwen3", seed=5)
    drafter = make_dflash(target, block_size=8)
    rng = random.Random(3)
    ids, mask = padded_batch(rng, [9, 20, 14])
    free = target.generate(ids, attention_mask=mask, max_new_tokens=40, do_sample=False, eos_token_id=None)
    new = free[:, ids.shape[1]:]
    # Stop tokens that row 0 meets early, row 1 later, row 2 (perhaps) never: three different finishing rounds.
    stops = [int(new[0, 3]), int(new[1, 20])]
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=40, do_sample=False, eos_token_id=stops,
                          pad_token_id=0)
    lengths = [int(row.ne(0).sum()) for row in ref[:, ids.shape[1]:]]
    assert len(set(lengths)) > 1  # the rows really do stop at different lengths
    small = make_target("qwen3", seed=6, num_hidden_layers=1)
    whiflash = hf_specgen.WhiFlash(ar=make_eagle3(target), parallel=drafter, router="random")
    for mode, assistant, extra in (("dflash", drafter, {}), ("autoregressive", None, {}),
                                   ("eagle3", make_eagle3(target), {"eagle_top_k": 1}),
                                   ("eagle3", make_eagle3(target), {"eagle_top_k": 3, "eagle_total_tokens": 12}),
                                   # finished rows stop voting and add nothing to the backlogs
                                   ("whiflash", whiflash, {"eagle_top_k": 1, "num_draft_tokens": 4}),
                                   ("fly", small, {"fly_entropy_threshold": 1.0986, "num_draft_tokens": 6}),
                                   ("classic", small, {"num_draft_tokens": 5, "draft_confidence_threshold": 0.08})):
        out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_mode=mode,
                              max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0, **extra)
        assert out.tolist() == ref.tolist(), (mode, extra)


def _stops_at_different_rounds(target, ids, mask, new_tokens: int, **common):
    """Stop tokens that end most rows of the batch early, each at its own length: (stops, stock's output)."""
    free = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                           **common)
    new = free[:, ids.shape[1]:]
    stops = sorted({int(new[b, 2 + 3 * b]) for b in range(len(ids) - 2)})
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, eos_token_id=stops,
                          pad_token_id=0, **common)
    return stops, ref


def test_an_eager_batch_drops_its_finished_rows_and_keeps_stock_tokens():
    """Once half the rows or more are done, later rounds compute only the others (session, caches and each
    proposer's per-row state keep those rows): every mode's tokens stay stock greedy's, per row, with a prefix
    constraint that reads each row's index in the caller's batch and a repetition penalty that reads its padding.
    FLy and compiled steps keep the whole batch."""
    target = make_target("qwen3", seed=5)
    vocab = target.config.vocab_size
    rng = random.Random(12)
    ids, mask = padded_batch(rng, [9, 20, 14, 3, 30, 7, 11, 25])

    def same_parity(batch_id, tokens):  # row b emits tokens of b's parity: a row handed another's index shows it
        return list(range(batch_id % 2, vocab, 2))

    common = dict(repetition_penalty=1.2, prefix_allowed_tokens_fn=same_parity)
    stops, ref = _stops_at_different_rounds(target, ids, mask, 40, **common)
    lengths = [int(row.ne(0).sum()) for row in ref[:, ids.shape[1]:]]
    assert sum(length < max(lengths) for length in lengths) >= 4, lengths  # half the rows end before the last
    small = make_target("qwen3", seed=6, num_hidden_layers=1)
    dflash, eagle = make_dflash(target, block_size=8), make_eagle3(target)
    calls = {
        "autoregressive": (None, {}),
        "dflash": (dflash, {}),  # the width policy: a smaller batch gets its own costs
        "dflash-b8": (dflash, {"block_size": 8}),
        "dflash-tree": (dflash, {"dflash_tree_nodes": 8}),
        "classic": (small, {"num_draft_tokens": 4}),
        "eagle3": (eagle, {"eagle_top_k": 1}),
        "eagle3-tree": (eagle, {"eagle_top_k": 3, "eagle_depth": 4, "eagle_total_tokens": 10}),
        # a router: each drafter's policy gets a smaller batch's costs, each drafter and its backlog keep the rows
        "whiflash": (hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="random"), {"eagle_top_k": 1}),
        "whiflash-b8": (hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="random"),
                        {"eagle_top_k": 1, "block_size": 8}),
    }
    for call, (assistant, extra) in calls.items():
        out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_mode=call.split("-")[0],
                              max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0,
                              return_dict_in_generate=True, **common, **extra)
        assert out.sequences.tolist() == ref.tolist(), call
        stats = out.speculative_stats
        sizes = stats.round_batch_sizes
        assert sizes[0] == 8 and sizes[-1] <= 2 and sizes == sorted(sizes, reverse=True), (call, sizes)
        assert stats.row_new_tokens == lengths, call
        for row, new in zip(stats.row_acceptance_lengths, lengths):  # each row's rounds, at its place in the batch
            assert 1 + sum(row) == new, call
    out = target.generate(ids, attention_mask=mask, assistant_model=small, speculative_mode="fly",
                          max_new_tokens=40, do_sample=False, eos_token_id=stops, pad_token_id=0,
                          return_dict_in_generate=True, fly_entropy_threshold=1.0986, num_draft_tokens=4, **common)
    assert out.sequences.tolist() == ref.tolist()
    assert set(out.speculative_stats.round_batch_sizes) == {8}


def test_a_routers_batch_that_drops_its_finished_rows_drafts_each_row_as_the_whole_batch_did(monkeypatch):
    """WhiFlash drops a batch's finished rows with each drafter's state and the backlog of rounds it sat out (lazy
    catch-up): on the shipped tiny world (fp32, drafters that keep several tokens a round, a router reading each
    unfinished row's logits), every row's rounds commit what they did where the batch kept its finished
    rows, round by round, with the same drafter each round, and the tokens stay stock greedy's. A backlog or vote
    left with the finished rows' places would hand a row another's context, and its rounds would keep less."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_specgen.bench.batch_curve import left_padded
    from hf_specgen.bench.prompt_sets import chat_ids, load_prompt_set
    from hf_specgen.drafters.whiflash import WhiFlashProposer

    hub = Path(__file__).resolve().parents[1] / "hub_models"
    target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hub / "specgen-tiny", dtype=torch.float32))
    tokenizer = AutoTokenizer.from_pretrained(hub / "specgen-tiny")
    records = load_prompt_set("tinyworld")
    prompts = [chat_ids(tokenizer, r["prompt"]) for c in ("code", "math", "prose")
               for r in [r for r in records if r["category"] == c][:3]]
    ids, mask = left_padded(prompts, tokenizer.pad_token_id)
    call = dict(attention_mask=mask, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    ref = target.generate(ids, **call)
    whiflash = hf_specgen.load_drafter(str(hub / "specgen-tiny-whiflash"), dtype=torch.float32)
    # votes read each unfinished row's own logits, and split: either drafter sits out rounds
    whiflash.router = lambda signal: "eagle3" if int(signal["logits"].argmax()) % 3 == 0 else "dflash"
    call.update(assistant_model=whiflash, speculative_mode="whiflash", block_size=8, return_dict_in_generate=True)
    dropped = target.generate(ids, **call)
    monkeypatch.delattr(WhiFlashProposer, "keep_rows")  # the batch keeps its finished rows
    kept = target.generate(ids, **call).speculative_stats
    assert dropped.sequences.tolist() == ref.tolist()
    stats = dropped.speculative_stats
    assert set(kept.round_batch_sizes) == {9} and stats.round_batch_sizes[-1] < 9
    assert {"eagle3", "dflash"} <= set(stats.drafter_per_round)  # each drafter sat out rounds: a backlog to keep
    assert stats.mean_acceptance_length > 2
    assert stats.drafter_per_round == kept.drafter_per_round
    assert stats.row_acceptance_lengths == kept.row_acceptance_lengths


def test_a_hybrid_batch_drops_its_finished_rows_with_their_recurrent_states():
    """A target with linear-attention layers: the rows kept take their conv / recurrent states along."""
    from test_hybrid import assistant_for, hybrid_target

    target = hybrid_target("qwen3_5_text", seed=2)
    rng = random.Random(5)
    ids, mask = padded_batch(rng, [4, 13, 9, 6])
    stops, ref = _stops_at_different_rounds(target, ids, mask, 24)
    for call, extra in (("autoregressive", {}), ("dflash", {}), ("eagle3", {"eagle_top_k": 1})):
        out = target.generate(ids, attention_mask=mask, assistant_model=assistant_for(call, target),
                              speculative_mode=call, max_new_tokens=24, do_sample=False, eos_token_id=stops,
                              pad_token_id=0, return_dict_in_generate=True, **extra)
        assert out.sequences.tolist() == ref.tolist(), call
        assert out.speculative_stats.round_batch_sizes[-1] <= 2, call


def test_row_dependent_processors_see_each_rows_own_sequence_and_index():
    """Repetition penalty, min length and a prefix constraint that reads the batch row (``prefix_allowed_tokens_fn``
    gets stock generate's batch_id: row b may only emit tokens of b's parity) in a padded batch whose rows commit
    different numbers of tokens per round: the engine hands processors rows of equal length together, and each
    row its own index."""
    target = make_target("qwen3", seed=5)
    twin = make_target("qwen3", seed=5)  # drafts the target's unconstrained choices: some rounds keep several
    rng = random.Random(4)
    ids, mask = padded_batch(rng, [9, 20, 14, 3])
    vocab = target.config.vocab_size

    def same_parity(batch_id, tokens):
        return list(range(batch_id % 2, vocab, 2))

    common = dict(attention_mask=mask, max_new_tokens=24, do_sample=False, repetition_penalty=1.3,
                  min_new_tokens=12, eos_token_id=[2, 5], pad_token_id=0, prefix_allowed_tokens_fn=same_parity)
    ref = target.generate(ids, **common)
    for b, row in enumerate(ref[:, ids.shape[1]:].tolist()):
        assert all(token % 2 == b % 2 for token in row if token != 0)
    out = target.generate(ids, assistant_model=twin, speculative_mode="classic", num_draft_tokens=4,
                          return_dict_in_generate=True, **common)
    assert out.sequences.tolist() == ref.tolist()
    rounds = list(zip(*[row for row in out.speculative_stats.row_acceptance_lengths]))
    assert any(len(set(committed)) > 1 for committed in rounds)  # rows of one round at different lengths


def test_sampling_follows_the_target_distribution_in_every_row():
    """Three prompts of different lengths (three paddings) in one batch: each row's first two tokens follow its own
    warped target distribution."""
    target = make_target("qwen3", vocab_size=VOCAB, pad_token_id=None, bos_token_id=None, eos_token_id=None, seed=4)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.25)
    drafter = make_dflash(target, block_size=4)
    drafter.config.dflash_config["mask_token_id"] = VOCAB - 1
    drafter.mask_token_id = VOCAB - 1
    prompts = [[1, 3, 5, 2, 4], [2, 6, 1], [4, 4, 0, 3, 1, 5, 2]]  # three lengths: three paddings in one batch
    width = max(map(len, prompts))
    ids = torch.tensor([[6] * (width - len(p)) + p for p in prompts])  # padding content must not matter
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7)])
    # The joint of the first two of the STEPS tokens (64 cells): populated enough for ~500 samples per row.
    expected = []
    for p in prompts:
        pairs = collections.defaultdict(float)
        for cell, prob in exact_joint(target, torch.tensor([p]), warpers).items():
            pairs[cell[:2]] += prob
        expected.append(dict(pairs))
    torch.manual_seed(99)
    counts = [collections.Counter() for _ in range(3)]
    calls = SAMPLES // 3
    accepted = 0
    for _ in range(calls):
        out = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                              max_new_tokens=STEPS, do_sample=True, temperature=0.7, return_dict_in_generate=True,
                              adaptive_width=False)  # the full block every round: every slot's acceptance tested
        for b in range(3):
            counts[b][tuple(out.sequences[b, width: width + 2].tolist())] += 1
        accepted += sum(a - 1 for a in out.speculative_stats.acceptance_lengths)
    assert accepted > 40  # drafts are accepted, so acceptance is under test

    def pvalue(counter, expected):
        n = sum(counter.values())
        observed, predicted, rest_o, rest_p = [], [], 0, 0.0
        for cell in sorted(expected, key=expected.get, reverse=True):
            if expected[cell] * n >= 5:
                observed.append(counter[cell]); predicted.append(expected[cell] * n)
            else:
                rest_o += counter[cell]; rest_p += expected[cell] * n
        observed.append(rest_o); predicted.append(rest_p)
        predicted = [p * n / sum(predicted) for p in predicted]
        assert len(observed) > 10
        return chisquare(observed, predicted).pvalue

    for counter, row_expected in zip(counts, expected):
        assert set(counter) <= set(row_expected), "a row sampled a sequence its target gives probability 0"
        assert pvalue(counter, row_expected) > 1e-3


class HostReads(TorchFunctionMode):
    """Counts the device-to-host reads (tolist, item, bool, int, float, index) made by hf_specgen's engine code."""

    READS = {torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__,
             torch.Tensor.__float__, torch.Tensor.__index__}

    def __init__(self):
        super().__init__()
        self.reads = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            # The innermost caller outside torch made the read: count it when that is our code (transformers'
            # own generate preparation reads a few flags before the engine starts).
            caller = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename][-1]
            if "/hf_specgen/" in caller.filename:
                self.reads[f"{caller.filename.rsplit('/', 1)[-1]}:{caller.lineno}"] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", ["dflash", "autoregressive", "classic", "eagle3", "eagle3-tree", "eagle3-adaptive",
                                  "fly"])
def test_one_host_read_per_round(mode):
    """Greedy rounds read the device once (each row's accepted / committed counts and done flag), plus once for the
    prefill's first tokens, once for the output's padding, once for the prompt's id range (hf_specgen/inputs.py) and,
    a padded batch on a CPU, once for its rows' lengths (a prefill in groups of like length, engine/prefill.py);
    nothing inside drafting, verifying or stopping."""
    target = make_target("qwen3")
    assistant, extra = _assistants(target)[mode]
    ids, mask = padded_batch(random.Random(2), [10, 25, 4])
    with HostReads() as counter:
        out = target.generate(ids, attention_mask=mask, assistant_model=assistant, speculative_mode=mode.split("-")[0],
                              max_new_tokens=30, do_sample=False, return_dict_in_generate=True, **extra)
    rounds = out.speculative_stats.num_rounds
    assert rounds > 5
    assert sum(counter.reads.values()) <= rounds + 4, counter.reads


def test_rows_stop_drafting_at_their_own_confidence():
    """With draft_confidence_threshold, each row of a batch drafts what it drafts alone (transformers' heuristic per
    row): its first proposal is its batch-1 proposal, padded by repeating its last draft where it stopped first."""
    from hf_specgen.drafters.draft_lm import DraftModelProposer

    target = make_target("qwen3")
    small = make_target("qwen3", seed=5, num_hidden_layers=1)
    ids, mask = padded_batch(random.Random(12), [6, 19, 11, 3, 25, 8])
    seen, original = [], DraftModelProposer.propose

    def recording(self):
        draft = original(self)
        seen.append(draft.tolist())
        return draft

    DraftModelProposer.propose = recording
    try:
        def first_proposal(prompt, prompt_mask):
            seen.clear()
            target.generate(prompt, attention_mask=prompt_mask, assistant_model=small, speculative_mode="classic",
                            num_draft_tokens=6, draft_confidence_threshold=0.08, max_new_tokens=3, do_sample=False)
            return seen[0]

        batched = first_proposal(ids, mask)
        alone = [first_proposal(ids[b: b + 1, mask[b].argmax():], None)[0] for b in range(len(ids))]
    finally:
        DraftModelProposer.propose = original
    assert len({len(row) for row in alone}) > 1  # the rows stop after different numbers of drafts
    for row, own in zip(batched, alone):
        assert row == own + [own[-1]] * (len(row) - len(own))


def test_batches_refuse_per_prompt_scores_before_decoding():
    """Every mode decodes batches; what stays per prompt (scores of each step) says so before any forward."""
    target = make_target("qwen3")
    ids, mask = padded_batch(random.Random(0), [4, 6])
    with pytest.raises(ValueError, match="output_scores"):
        target.generate(ids, attention_mask=mask, assistant_model=make_dflash(target), speculative_mode="dflash",
                        max_new_tokens=5, return_dict_in_generate=True, output_scores=True)


# ---------------------------------------------------------------- a padded batch's prefill in groups (engine/prefill.py)
class _Forwards:
    """Records the [batch, tokens] shape of every forward of ``target`` while open."""

    def __init__(self, target):
        self.target, self.shapes = target, []

    def __enter__(self):
        forward = self.target.forward

        def recorded(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.shapes.append(tuple(ids.shape))
            return forward(*args, **kwargs)

        self.target.forward = recorded
        return self

    def __exit__(self, *exc):
        del self.target.forward  # the class's forward again


def test_prefill_groups_cost_least_and_keep_one_forward_where_groups_save_little():
    """Rows sorted by length and cut where ``overhead + rows * longest`` summed over the groups is least (checked
    against every cut of the sorted rows); one group, the whole batch, unless that saves over a tenth (never with an
    infinite overhead)."""
    import itertools

    from hf_specgen.engine.prefill import MIN_SAVING, prefill_groups

    def cost(groups, lengths, overhead):
        return sum(overhead + len(g) * max(lengths[b] for b in g) for g in groups)

    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randrange(1, 300) for _ in range(rng.randrange(2, 8))]
        overhead = rng.choice([0.0, 10.0, 40.0, 200.0, float("inf")])
        groups = prefill_groups(lengths, overhead)
        assert sorted(b for g in groups for b in g) == list(range(len(lengths)))  # every row once
        order = sorted(range(len(lengths)), key=lambda b: -lengths[b])
        padded = overhead + len(lengths) * max(lengths)
        best = min(cost([order[i:j] for i, j in zip((0, *cuts), (*cuts, len(order)))], lengths, overhead)
                   for k in range(len(order)) for cuts in itertools.combinations(range(1, len(order)), k))
        if overhead != float("inf") and best <= MIN_SAVING * padded:
            assert cost(groups, lengths, overhead) == pytest.approx(best), (lengths, overhead, groups)
        else:
            assert groups == [list(range(len(lengths)))], (lengths, overhead, groups)
    assert prefill_groups([245, 40, 42, 44, 39, 100], 40.0) == [[0], [5], [3, 2, 1, 4]]
    assert prefill_groups([50, 48, 47], 40.0) == [[0, 1, 2]]  # a few pad tokens: the one padded forward


@pytest.mark.parametrize("family,extra", [("qwen3", {}), ("mistral", {"sliding_window": 8})])
def test_a_padded_cpu_batch_prefills_its_rows_in_groups_and_keeps_stock_tokens(family, extra):
    """Rows of a left-padded batch prefilled in groups of like length (each row alone here: no fixed cost per forward)
    write their K/V where the padded forward would: every mode decodes stock batched greedy's tokens, past a sliding
    window too, and each drafter accepts in every round what it accepts after the padded prefill (the taps' padding
    slots are zeros there, which nothing attends)."""
    target = make_target(family, seed=3, **extra)
    ids, mask = padded_batch(random.Random(9), [6, 31, 12, 30, 2, 17])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=None)
    target.generate(ids[:1], speculative_mode="autoregressive", max_new_tokens=1)  # (the engine probe's forwards)
    dflash, eagle = make_dflash(target, block_size=8), make_eagle3(target)
    calls = {
        "autoregressive": (None, {}),
        "dflash": (dflash, {"block_size": 8}),
        "dflash-default": (dflash, {}),
        "eagle3": (eagle, {"eagle_top_k": 1, "num_draft_tokens": 4}),
        "eagle3-tree": (eagle, {"eagle_top_k": 3, "eagle_depth": 4, "eagle_total_tokens": 10}),
        "classic": (make_target(family, seed=5, num_hidden_layers=1, **extra), {"num_draft_tokens": 4}),
        "whiflash": (hf_specgen.WhiFlash(ar=eagle, parallel=dflash, router="random"), {"eagle_top_k": 1}),
    }
    for call, (assistant, options) in calls.items():
        accepted = {}
        for overhead in (0.0, float("inf")):  # each row alone; one padded forward
            set_forward_overhead(target, overhead)
            with _Forwards(target) as forwards:
                out = target.generate(ids, attention_mask=mask, assistant_model=assistant,
                                      speculative_mode=call.split("-")[0], max_new_tokens=20, do_sample=False,
                                      eos_token_id=None, return_dict_in_generate=True, **options)
            assert out.sequences.tolist() == ref.tolist(), (call, overhead)
            prefills = [shape for shape in forwards.shapes if shape[1] > 1 and shape[0] in (1, 6)][:6]
            if overhead == 0.0:  # the longest rows first, each alone and unpadded
                assert prefills == [(1, 31), (1, 30), (1, 17), (1, 12), (1, 6), (1, 2)], (call, forwards.shapes)
            else:
                assert prefills[0] == (6, 31), (call, forwards.shapes)
            accepted[overhead] = out.speculative_stats.row_acceptance_lengths
        if call != "whiflash" and call != "dflash-default":  # (a random router; a policy reading the clock)
            assert accepted[0.0] == accepted[float("inf")], call


def test_the_prefills_forward_cost_is_measured_once_and_saved_with_the_costs(tmp_path):
    """The first padded batch on a CPU times two batch-1 forwards (4 and 68 tokens, twice each after one untimed)
    and keeps them in the target's cost model; later calls, and a target given the saved costs, time nothing."""
    from hf_specgen.engine.width_policy import costs_of

    ids, mask = padded_batch(random.Random(4), [20, 3, 9])
    # wide enough that a forward of 68 tokens costs clearly more than one of 4 (on the tests' 64-wide targets both are
    # mostly per-call overhead, and a loaded CPU once timed them the other way round)
    wide = dict(hidden_size=512, intermediate_size=2048, head_dim=64)
    target = make_target("llama", seed=2, **wide)
    target.generate(ids[:1], speculative_mode="autoregressive", max_new_tokens=1)  # (the engine probe's forwards)
    probes = [(1, 4)] * 3 + [(1, 68)] * 3
    with _Forwards(target) as forwards:
        target.generate(ids, attention_mask=mask, speculative_mode="autoregressive", max_new_tokens=4)
        first = [shape for shape in forwards.shapes if shape in ((1, 4), (1, 68))]
        target.generate(ids, attention_mask=mask, speculative_mode="autoregressive", max_new_tokens=4)
    assert sorted(first) == sorted(probes) and forwards.shapes.count((1, 68)) == 3
    saved = costs_of(target).to_dict()["cpu|float32|prefill"]["verify"]
    assert set(saved) == {"4", "68"} and 0 < saved["4"] < saved["68"]
    hf_specgen.save_costs(target, tmp_path / "costs.json")
    fresh = make_target("llama", seed=2, **wide)
    fresh.generate(ids[:1], speculative_mode="autoregressive", max_new_tokens=1)
    hf_specgen.load_costs(fresh, tmp_path / "costs.json")
    with _Forwards(fresh) as forwards:
        fresh.generate(ids, attention_mask=mask, speculative_mode="autoregressive", max_new_tokens=4)
    assert (1, 68) not in forwards.shapes


def test_a_target_whose_layers_share_kv_prefills_its_batches_padded():
    """Gemma 3n's last layers read K/V that earlier layers wrote (no cache of their own): a group's cache then lacks
    those layers, so the call prefills the padded batch instead, with stock tokens, and the target's later calls
    prefill padded from the start."""
    target = make_gemma3n()
    set_forward_overhead(target, 0.0)
    ids, mask = padded_batch(random.Random(5), [4, 15, 9])
    target.generate(ids[:1], speculative_mode="autoregressive", max_new_tokens=1)  # (the engine probe's forwards)
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    for attempt in ("first", "later"):
        with _Forwards(target) as forwards:
            out = target.generate(ids, attention_mask=mask, speculative_mode="autoregressive", max_new_tokens=10,
                                  do_sample=False, pad_token_id=0)
        assert out.tolist() == ref.tolist(), attempt
        prefills = [shape for shape in forwards.shapes if shape[1] > 1 and shape[0] in (1, 3)]
        assert prefills[-1] == (3, 15), (attempt, forwards.shapes)
        assert ((1, 15) in prefills) == (attempt == "first"), (attempt, forwards.shapes)


def test_each_groups_kv_taps_and_last_logits_are_the_padded_forwards_at_the_rows_real_slots():
    """What the grouped prefill hands the engine, against one padded forward of the whole batch: each row's K/V in
    every layer and the tapped hidden states at the row's real slots, and the last prompt token's logits."""
    from transformers import DynamicCache

    from hf_specgen.engine.cache import static_cache
    from hf_specgen.engine.prefill import prefill_groups, prefill_in_groups
    from hf_specgen.engine.support import cache_keyword
    from hf_specgen.engine.taps import tapped

    target = make_target("qwen3", seed=3)
    lengths = [6, 31, 12, 30, 2, 17]
    ids, mask = padded_batch(random.Random(9), lengths)
    batch, prompt_len = ids.shape
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    key = cache_keyword(target)
    with torch.no_grad(), tapped(target, [1, 3]) as tap:
        padded_cache = DynamicCache()
        out = target(input_ids=ids, attention_mask=mask, position_ids=positions, **{key: padded_cache}, use_cache=True)
        padded_features = tap.features()
        cache = static_cache(prompt_len + 8, target.config.num_hidden_layers, batch)
        groups = prefill_groups(lengths, 0.0)
        assert len(groups) == batch
        logits, features = prefill_in_groups(target, groups, lengths, ids, mask, positions, cache, tap, key, {})
    torch.testing.assert_close(logits, out.logits[:, -1:], rtol=1e-5, atol=1e-5)
    for b, n in enumerate(lengths):
        real = slice(prompt_len - n, prompt_len)
        torch.testing.assert_close(features[b, real], padded_features[b, real], rtol=1e-5, atol=1e-5)
        assert not features[b, : prompt_len - n].any()  # the padding's taps: zeros
        for mine, theirs in zip(cache.layers, padded_cache.layers):
            torch.testing.assert_close(mine.keys[b, :, real], theirs.keys[b, :, real], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(mine.values[b, :, real], theirs.values[b, :, real], rtol=1e-5, atol=1e-5)
