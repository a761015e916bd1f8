"""DDTree-style draft trees from one DFlash pass (speculative_mode="dflash", dflash_tree_nodes=N): lossless for any
budget, the same as the block's own chain when the tree is that chain, and built as the N most probable prefixes."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from conftest import make_dflash, make_target, random_prompt
from test_batch import padded_batch


def most_probable_prefixes(values: torch.Tensor, indices: torch.Tensor, count: int) -> list[tuple[int, ...]]:
    """Brute force: every prefix of drafted tokens (at block position d, one of the K candidates ``indices[d]``, with
    log-probabilities ``values[d]``; [D, K] each), scored by the sum along it; the ``count`` best, shallower first at
    a tie."""
    scored = {}
    for depth in range(1, values.shape[0] + 1):
        for picks in itertools.product(range(values.shape[1]), repeat=depth):
            prefix = tuple(int(indices[d, k]) for d, k in enumerate(picks))
            scored[prefix] = float(sum(values[d, k] for d, k in enumerate(picks)))
    return sorted(scored, key=lambda p: (-scored[p], len(p)))[:count]


def tree_paths(tree) -> list[tuple[int, ...]]:
    """Batch row 0 of a tree proposal as the token path from the root's child down to each node."""
    tokens, parents = tree.tokens[0].tolist(), tree.parents[0].tolist()
    paths = {}
    for node in range(1, len(tokens)):
        paths[node] = (paths[parents[node]] if parents[node] > 0 else ()) + (tokens[node],)
    return list(paths.values())

@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen2", "mistral"])
def test_trees_of_every_budget_equal_stock_greedy(family):
    target = make_target(family)
    drafter = make_dflash(target, block_size=8)
    rng = random.Random(3)
    prompts = [random_prompt(rng, n) for n in (9, 31)]
    for prompt, budget in itertools.product(prompts, (2, 5, 16, 64)):
        expected = target.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None)
        got = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", dflash_tree_nodes=budget,
                              max_new_tokens=24, do_sample=False, eos_token_id=None)
        assert got.tolist() == expected.tolist(), (family, budget)
    ids, mask = padded_batch(rng, [12, 3, 25])  # each row its own tree
    expected = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=None)
    got = target.generate(ids, attention_mask=mask, assistant_model=drafter, speculative_mode="dflash",
                          dflash_tree_nodes=16, max_new_tokens=20, do_sample=False, eos_token_id=None)
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("drafts", ["drafter", "oracle"])
def test_a_top1_tree_of_block_size_nodes_is_the_block_chain_round_for_round(drafts):
    """dflash_tree_nodes = block size with dflash_tree_top_k=1 is the block's own chain: the same tokens and the same
    accepted length every round. With the random drafter (rarely accepted), and with drafts replaced by the target's
    own greedy continuation (an oracle: whole blocks accepted, so deep paths and multi-token commits are compared)."""
    from hf_specgen.drafters.dflash import DFlashProposer, DFlashTreeProposer

    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=8)
    prompt = random_prompt(random.Random(5), 20)
    reference = target.generate(prompt, max_new_tokens=60, do_sample=False, eos_token_id=None)[0].tolist()

    def oracle_ids(self):  # [1, W-1]: the reference tokens after the last committed one
        start = self.session.host_lengths[0] - 1
        return torch.tensor([[reference[s] if s < len(reference) else 3 for s in range(start + 1, start + 8)]])

    patches = {}
    if drafts == "oracle":
        patches = {(DFlashProposer, "_draft_step"): lambda self, *args: oracle_ids(self),
                   (DFlashTreeProposer, "_draft_top_step"): lambda self, *args: (
                       torch.zeros(1, 7, 1), oracle_ids(self)[:, :, None])}
    originals = {key: getattr(*key) for key in patches}
    for (cls, name), fn in patches.items():
        setattr(cls, name, fn)
    try:
        settings = dict(assistant_model=drafter, speculative_mode="dflash", max_new_tokens=40, do_sample=False,
                        eos_token_id=None, return_dict_in_generate=True)
        chain = target.generate(prompt, adaptive_width=False, **settings)  # the block every round, as a tree's
        tree = target.generate(prompt, dflash_tree_nodes=8, dflash_tree_top_k=1, **settings)
    finally:
        for (cls, name), fn in originals.items():
            setattr(cls, name, fn)
    assert tree.sequences.tolist() == chain.sequences.tolist() == [reference[: 20 + 40]]
    assert tree.speculative_stats.acceptance_lengths == chain.speculative_stats.acceptance_lengths
    if drafts == "oracle":
        assert chain.speculative_stats.acceptance_lengths[:-1] == [8] * (len(chain.speculative_stats.acceptance_lengths) - 1)


@pytest.mark.parametrize("draft_vocab", [False, True])
def test_the_tree_is_the_most_probable_prefixes(draft_vocab):
    """Brute force over every prefix of a small block: the proposal's nodes are exactly the N-1 most probable
    prefixes under the drafter's per-position log-probabilities (a node's probability is the product along its
    path), each node's parent is its prefix minus the last token, and the root is the last committed token. With a
    draft vocabulary the candidates are its tokens, and the decode is still stock greedy's."""
    from hf_specgen.drafters.dflash import DFlashTreeProposer

    target = make_target("llama")
    drafter = make_dflash(target, block_size=4)
    vocab = torch.arange(3, 256, 5)
    if draft_vocab:
        drafter.set_draft_vocab(vocab)
    seen = []
    original = DFlashTreeProposer._draft_top_step

    def recording(self, *args):
        values, indices = original(self, *args)
        seen.append((values.clone(), indices.clone()))
        return values, indices

    trees = []
    propose = DFlashTreeProposer.propose

    def record_tree(self):
        tree = propose(self)
        trees.append(tree)
        return tree

    DFlashTreeProposer._draft_top_step, DFlashTreeProposer.propose = recording, record_tree
    prompt = random_prompt(random.Random(6), 15)
    try:
        out = target.generate(prompt, assistant_model=drafter, speculative_mode="dflash", dflash_tree_nodes=7,
                              dflash_tree_top_k=3, max_new_tokens=12, do_sample=False)
    finally:
        DFlashTreeProposer._draft_top_step, DFlashTreeProposer.propose = original, propose
    assert len(trees) >= 2
    for (values, indices), tree in zip(seen, trees):
        assert sorted(tree_paths(tree)) == sorted(most_probable_prefixes(values[0], indices[0], 6))
        assert bool(torch.isin(indices, vocab).all()) == draft_vocab
    assert out.tolist() == target.generate(prompt, max_new_tokens=12, do_sample=False).tolist()


def test_tree_settings_that_cannot_work_say_so():
    target = make_target("qwen3")
    drafter = make_dflash(target, block_size=4)
    prompt = random_prompt(random.Random(1), 6)
    cases = [(dict(speculative_mode="fly", dflash_tree_nodes=8), "apply to speculative_mode='dflash'"),
             (dict(speculative_mode="dflash", dflash_tree_nodes=1), "dflash_tree_nodes must be 0"),
             (dict(speculative_mode="dflash", dflash_tree_top_k=2), "also pass dflash_tree_nodes"),
             (dict(speculative_mode="dflash", dflash_tree_nodes=8, dflash_tree_top_k=1), "can reach \\(4 nodes\\)")]
    for settings, message in cases:
        with pytest.raises(ValueError, match=message):
            target.generate(prompt, assistant_model=drafter, max_new_tokens=4, **settings)
