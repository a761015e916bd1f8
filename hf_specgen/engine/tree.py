"""Tree verification: the target checks a whole tree of drafts in one forward, then keeps its longest accepted path.

A tree proposal is N nodes in topological order: node 0 is the last committed token (the root), ``parents[i] < i``
for every other node. The target runs all N nodes at slots start..start+N-1 with positions start + depth and a float
mask letting each node see the committed context and its own ancestors only. Acceptance walks from the root to the
child whose token equals the target's choice. The K/V of the accepted path are then moved to contiguous slots
start..start+m (in place: no reallocation) and the cache length is set after them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TreeProposal:
    tokens: torch.Tensor  # [N] node tokens, tokens[0] = last committed token
    parents: list[int]  # [N] parent index per node, -1 for the root

    def __post_init__(self):
        n = len(self.parents)
        self.depths = [0] * n
        ancestors = torch.zeros((n, n), dtype=torch.bool)
        ancestors[0, 0] = True
        self.children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            parent = self.parents[i]
            if not 0 <= parent < i:
                raise ValueError(f"tree node {i} has parent {parent}: nodes must come after their parents")
            self.depths[i] = self.depths[parent] + 1
            ancestors[i] = ancestors[parent]
            ancestors[i, i] = True
            self.children[parent].append(i)
        self.ancestors = ancestors.to(self.tokens.device)  # [N, N]: j is an ancestor of i, or i itself

    def __len__(self) -> int:
        return len(self.parents)

    def path_tokens(self, node: int) -> list[int]:
        """Tokens from the root's child down to ``node`` (what a processor sees as generated after the root)."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parents[node]
        return [int(self.tokens[i]) for i in reversed(path)]


def accept_greedy(tree: TreeProposal, choices: torch.Tensor) -> list[int]:
    """Longest root-to-node path whose every token equals the target's argmax at its parent. choices: [N]."""
    tokens, picks = tree.tokens.tolist(), choices.tolist()
    path = [0]
    while True:
        node = path[-1]
        nxt = next((c for c in tree.children[node] if tokens[c] == picks[node]), None)
        if nxt is None:
            return path
        path.append(nxt)


def accept_sampling(tree: TreeProposal, probs: torch.Tensor, generator=None) -> tuple[list[int], int]:
    """Recursive rejection over siblings for deterministic (one-hot) drafts; returns (path, next token).

    At a node with target distribution p: try its children in order; child token x is accepted with probability
    p(x) / (mass left); on rejection p(x) is zeroed. If every child fails, the next token is sampled from what is
    left. Each step therefore emits exactly a sample of p: the output distribution is the target's.
    """
    tokens = tree.tokens.tolist()
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].clone()
        accepted = None
        for child in tree.children[node]:
            x = tokens[child]
            mass = float(p.sum())
            if mass <= 0:
                break
            if float(torch.rand((), generator=generator)) * mass < float(p[x]):
                accepted = child
                break
            p[x] = 0.0
        if accepted is None:
            return path, int(torch.multinomial(p / p.sum(), 1, generator=generator))
        path.append(accepted)


def compact_path(cache, start: int, path: list[int]) -> None:
    """Move the K/V of the accepted nodes (slots start + path[k]) to slots start + k, in every layer, in place."""
    if path == list(range(len(path))):
        return  # already contiguous
    device = cache.layers[0].keys.device
    src = torch.tensor([start + node for node in path], device=device)
    dst = torch.arange(start, start + len(path), device=device)
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys.index_copy_(2, dst, layer.keys.index_select(2, src))
            layer.values.index_copy_(2, dst, layer.values.index_select(2, src))
