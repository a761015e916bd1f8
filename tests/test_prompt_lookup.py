"""Copied tokens (``prompt_lookup``, on in the default calls): rows copying their own text verify the copy instead of
the drafter's tokens. The lookup matches a host reference on padded batches, every block and chain mode stays stock
greedy's (fp32, alone and in batches), copied tokens raise the tokens per round on text that repeats itself, a drafter
that is right where the copy is wrong keeps its blocks, and what cannot take it is refused."""

from __future__ import annotations

import random

import pytest
import torch

import hf_specgen
from conftest import make_dflash, make_target
from hf_specgen.engine.lookup import lookup_drafts
from test_batch import padded_batch
from test_eagle3 import make_eagle3


def reference_lookup(sequence: list[int], count: int) -> tuple[int, list[int]]:
    """(matched n-gram size, the count tokens after the latest earlier occurrence of the last 3, else 2, tokens)."""
    for n in (3, 2):
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
    rng = random.Random(0)
    for _ in range(50):
        batch, capacity = rng.randint(1, 5), rng.randint(6, 40)
        tokens = torch.tensor([[rng.randrange(4) for _ in range(capacity)] for _ in range(batch)])  # stale tail too
        padding = torch.tensor([rng.randint(0, 3) for _ in range(batch)])
        lengths = torch.tensor([rng.randint(int(pad) + 1, capacity) for pad in padding])
        found, size, drafts = lookup_drafts(tokens, lengths, padding, 5)
        for b in range(batch):
            n, follow = reference_lookup(tokens[b, int(padding[b]): int(lengths[b])].tolist(), 5)
            assert int(size[b]) == n and bool(found[b]) == (n > 0)
            if n:
                assert drafts[b].tolist() == follow


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
