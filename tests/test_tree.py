"""Tree verification: mask and depth positions reproduce sequential logits; compaction leaves a sequential cache."""

from __future__ import annotations

import random

import pytest
import torch

from hf_specgen.engine.cache import set_cache_length, static_cache
from hf_specgen.engine.session import DecodingSession
from hf_specgen.engine.support import cache_keyword
from hf_specgen.engine.tree import TreeProposal, accept_greedy, accept_sampling, compact_path

from conftest import make_target, random_prompt

PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3, 5, 6]  # 10 nodes, depth up to 4


def _tree(rng) -> TreeProposal:
    return TreeProposal(torch.tensor([rng.randrange(3, 250) for _ in PARENTS]), list(PARENTS))


@pytest.mark.parametrize("family", ["qwen3", "llama"])
@torch.no_grad()
def test_tree_forward_equals_sequential_forwards_and_compaction_equals_sequential_cache(family):
    target = make_target(family)
    rng = random.Random(1)
    prompt = random_prompt(rng, 17)
    tree = _tree(rng)
    n = len(tree)
    committed = torch.cat([prompt, tree.tokens[:, :1]], dim=1)  # the root is the last committed token
    start = committed.shape[1] - 1
    session = DecodingSession(committed, None, 64, n, torch.float32)
    cache = static_cache(64, target.config.num_hidden_layers)
    key = cache_keyword(target)  # "cache" where transformers renamed it (the old name warns there)
    target(input_ids=committed[:, :start], position_ids=session.positions[:, :start],
           attention_mask=session.causal_mask(0, start), **{key: cache}, use_cache=True)
    starts = torch.tensor([start])
    positions = session.positions[:, start: start + 1] + tree.depths
    logits = target(input_ids=tree.tokens, position_ids=positions, attention_mask=session.tree_mask(starts, tree.ancestors, tree.depths),
                    **{key: cache}, use_cache=True).logits[0]
    for node in range(n):
        seq = torch.cat([committed, tree.path_tokens(0, node)], dim=1)
        expect = target(seq).logits[0, -1]
        torch.testing.assert_close(logits[node], expect, atol=1e-4, rtol=1e-4)

    path = [0, 1, 4]  # an accepted path through non-contiguous slots
    compact_path(cache, starts, torch.tensor([path]))
    set_cache_length(cache, start + len(path))
    reference = static_cache(64, target.config.num_hidden_layers)
    seq = torch.cat([committed, tree.tokens[:, [1, 4]]], dim=1)
    target(input_ids=seq, position_ids=torch.arange(seq.shape[1])[None], **{key: reference}, use_cache=True)
    for got, ref in zip(cache.layers, reference.layers):
        length = start + len(path)
        torch.testing.assert_close(got.keys[:, :, :length], ref.keys[:, :, :length], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got.values[:, :, :length], ref.values[:, :, :length], atol=1e-5, rtol=1e-4)


def test_greedy_acceptance_takes_the_matching_path():
    tokens = torch.tensor([9, 5, 6, 7, 8, 1, 2, 3, 4, 0])
    tree = TreeProposal(tokens, list(PARENTS))
    choices = torch.full((1, 10), 99)
    choices[0, 0], choices[0, 1], choices[0, 4] = 5, 8, 42  # root -> node 1 (token 5) -> node 4 (token 8); bonus 42
    path, n_accepted = accept_greedy(tree, choices)
    assert path[0, : int(n_accepted) + 1].tolist() == [0, 1, 4]
    choices[0, 0] = 6  # root -> node 2 (token 6) -> node 5 needs token 1 after node 2
    choices[0, 2] = 1
    path, n_accepted = accept_greedy(tree, choices)
    assert path[0, : int(n_accepted) + 1].tolist() == [0, 2, 5]
    choices[0, 0] = 77  # no child matches: the root alone
    assert accept_greedy(tree, choices)[1].tolist() == [0]


def test_batched_trees_accept_each_row_on_its_own():
    """Two rows with different trees and choices: each row's path is its own (one call, no host loop)."""
    tokens = torch.tensor([[9, 5, 6, 7, 8, 1, 2, 3, 4, 0], [9, 6, 5, 7, 8, 1, 2, 3, 4, 0]])
    other = [-1, 0, 0, 2, 2, 1, 3, 3, 5, 6]
    tree = TreeProposal(tokens, torch.tensor([PARENTS, other]))
    assert tree.depths.tolist() == [[0, 1, 1, 2, 2, 2, 3, 3, 3, 4], [0, 1, 1, 2, 2, 2, 3, 3, 3, 4]]
    choices = torch.full((2, 10), 99)
    choices[0, 0], choices[0, 1], choices[0, 4] = 5, 8, 42  # row 0: 0 -> 1 -> 4
    choices[1, 0], choices[1, 2], choices[1, 3], choices[1, 6] = 5, 7, 2, 0  # row 1: 0 -> 2 -> 3 -> 6 -> 9
    path, n_accepted = accept_greedy(tree, choices)
    assert n_accepted.tolist() == [2, 4]
    assert path[0, :3].tolist() == [0, 1, 4] and path[1].tolist() == [0, 2, 3, 6, 9]


def test_sampling_acceptance_keeps_the_target_distribution():
    """Two sibling drafts at the root: the first emitted token must still follow p exactly (chi-square)."""
    from scipy.stats import chisquare

    p = torch.tensor([0.1, 0.4, 0.2, 0.3])
    tree = TreeProposal(torch.tensor([0, 1, 3]), [-1, 0, 0])
    probs = torch.stack([p, p, p])
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(4000):
        path, nxt = accept_sampling(tree, probs, gen)
        first = int(tree.tokens[0, path[1]]) if len(path) > 1 else nxt
        counts[first] += 1
    assert chisquare(counts.numpy(), (p * 4000).numpy()).pvalue > 1e-3


class ScriptedTreeProposer:
    """Trees whose one branch follows each row's greedy continuation (known in advance) among decoys: the correct
    child sits at a random sibling position, and decoys have children too, so accepted paths run through
    non-contiguous slots and exercise the K/V compaction inside the real decoding loop. Each batch row gets its own
    tree shape (its own parents)."""

    tapped_layer_ids = None

    def __init__(self, reference: torch.Tensor, depth: int, width: int, seed: int, corrupt: float = 0.0):
        self.reference, self.depth, self.width = reference.tolist(), depth, width
        self.rng, self.corrupt = random.Random(seed), corrupt
        self.block_size = 1 + depth * width

    def start(self, session, prompt_features):
        self.session = session

    def propose(self) -> TreeProposal:
        rows_tokens, rows_parents = [], []
        for b, reference in enumerate(self.reference):
            start = self.session.host_lengths[b] - 1
            tokens, parents = [int(self.session.tokens[b, start])], [-1]
            parent = 0
            for level in range(1, self.depth + 1):
                slot = start + level
                good = reference[slot] if slot < len(reference) else 3
                if self.rng.random() < self.corrupt:
                    good = (good + 7) % 250 + 3
                children = [good] + [(good + 1 + j) % 250 + 3 for j in range(self.width - 1)]
                self.rng.shuffle(children)
                first_child = len(tokens)
                for tok in children:
                    tokens.append(tok)
                    parents.append(parent)
                parent = first_child + children.index(good)
            rows_tokens.append(tokens)
            rows_parents.append(parents)
        return TreeProposal(torch.tensor(rows_tokens), torch.tensor(rows_parents))

    def commit(self, features, n_committed):
        pass


@pytest.mark.parametrize("corrupt", [0.0, 0.3])
@pytest.mark.parametrize("lengths", [[13], [13, 4, 22]])
def test_tree_rounds_in_the_loop_are_lossless_and_accept_deep_paths(corrupt, lengths):
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

    from hf_specgen.engine.loop import SpeculativeDecoder
    from test_batch import padded_batch

    target = make_target("qwen3")
    prompt, mask = padded_batch(random.Random(2), lengths)
    ref = target.generate(prompt, attention_mask=mask, max_new_tokens=50, do_sample=False, eos_token_id=None)
    proposer = ScriptedTreeProposer(ref, depth=4, width=3, seed=1, corrupt=corrupt)
    decoder = SpeculativeDecoder(target, proposer, "test", compile_steps=False)
    config = GenerationConfig(max_length=prompt.shape[1] + 50, do_sample=False, return_dict_in_generate=True)
    out = decoder.generate(prompt, mask, config, LogitsProcessorList(), StoppingCriteriaList())
    assert out.sequences.tolist() == ref.tolist()
    for row in out.speculative_stats.row_acceptance_lengths:
        if corrupt == 0:
            assert row[:-1] == [5] * (len(row) - 1)  # the whole correct branch every round
        else:
            assert len(set(row)) > 2


def test_one_verify_tells_what_every_smaller_budget_would_have_kept():
    """accepted_within_budgets: from one verify of a tree of the best N - 1 candidates, the drafts a tree of only the
    best n - 1 would have kept, for every n <= N, equal to verifying each smaller tree on its own (random candidate
    tables laid out level by level, scores falling along every path, a target that follows some children)."""
    from hf_specgen.engine.tree import accepted_within_budgets, best_nodes_tree

    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        batch, top_k, depth = 3, 3, 4
        parents, scores = [], []
        for level in range(depth):  # entries of level l: children of every entry of level l - 1 (or the root)
            above = [i for i, p in enumerate(parents) if sum(1 for _ in _ancestry(parents, i)) == level - 1]
            for parent in (above if level else [-1]):
                for _ in range(top_k):
                    parents.append(parent)
        m = len(parents)
        parents_t = torch.tensor(parents).expand(batch, m)
        logp = torch.rand((batch, m), generator=gen).log()
        scores = torch.zeros((batch, m))
        for i, p in enumerate(parents):  # cumulative: a child never outscores its parent
            scores[:, i] = logp[:, i] + (scores[:, p] if p >= 0 else 0)
        tokens = torch.arange(1, m + 1).expand(batch, m)  # entry e carries token e + 1 (root: token 0)
        # the target's choice after each entry (index 0: the root, e + 1: entry e): one of its children, or nothing
        truth = torch.randint(0, m + 1, (batch, m + 1), generator=gen)
        for b in range(batch):
            for e in range(-1, m):
                kids = [c for c in range(m) if parents[c] == e]
                if kids and torch.rand((), generator=gen) < 0.7:
                    truth[b, e + 1] = kids[int(torch.randint(len(kids), (), generator=gen))] + 1
        roots = torch.zeros((batch, 1), dtype=torch.long)
        budgets = [2, 3, 5, 8, 13]
        full = best_nodes_tree(scores, tokens, parents_t, roots, budgets[-1], depth)
        choices = truth.gather(1, full.tokens)  # [B, N]: node with token t stands for entry t - 1
        path, n_accepted = accept_greedy(full, choices)
        within = accepted_within_budgets(full, path, n_accepted, budgets)
        for j, n in enumerate(budgets):
            small = best_nodes_tree(scores, tokens, parents_t, roots, n, depth)
            _, kept = accept_greedy(small, truth.gather(1, small.tokens))
            assert within[:, j].tolist() == kept.tolist()
        assert within[:, -1].tolist() == n_accepted.tolist()


def _ancestry(parents, i):
    while i >= 0:
        yield i
        i = parents[i]
