"""Tree verification: the target checks a whole tree of drafts per row in one forward, then keeps the longest path
that agrees with its own choices.

A tree proposal is N nodes per batch row in topological order: node 0 is the row's last committed token (the root),
``parents[b, i] < i`` for every other node. The target runs all N nodes at slots start_b..start_b+N-1 with positions
start + depth and a mask letting each node see the committed context and its own ancestors only. Greedy acceptance
is a handful of fixed-shape tensor ops (no host read): node i is on the accepted path when every node from the root
down to it carries the token the target chose at its parent. The K/V of the accepted path are then moved to
contiguous slots start_b..start_b+m (in place: no reallocation) and the cache length is set after them.
"""

from __future__ import annotations

import torch

from .cache import write_slots


class TreeProposal:
    """Draft trees for a batch: ``tokens`` [B, N] (or [N] for one row), ``parents`` [B, N] (or a list) with -1 at the
    root. ``max_depth`` bounds every node's depth (the builder knows it; given parents on the host it is computed).

    Derived on the device: ``ancestors`` [B, N, N] (j is an ancestor of i, or i itself) and ``depths`` [B, N].
    """

    def __init__(self, tokens: torch.Tensor, parents, max_depth: int | None = None, ranks: torch.Tensor | None = None):
        if tokens.dim() == 1:
            tokens = tokens[None]
        if not isinstance(parents, torch.Tensor):  # given on the host (scripted trees): checked here
            for i, parent in enumerate(parents[1:], start=1):
                if not 0 <= parent < i:
                    raise ValueError(f"tree node {i} has parent {parent}: nodes must come after their parents")
            parents = torch.tensor(parents, dtype=torch.long, device=tokens.device)
        if parents.dim() == 1:
            parents = parents[None].expand(tokens.shape[0], -1)
        self.tokens, self.parents = tokens, parents  # [B, N], [B, N]
        batch, n = tokens.shape
        # ancestors = reflexive-transitive closure of the parent relation: squaring doubles the reach each time.
        nodes = torch.arange(n, device=tokens.device)
        reach = (parents[:, :, None] == nodes) | torch.eye(n, dtype=torch.bool, device=tokens.device)  # [B, N, N]
        for _ in range(max(1, (n - 1).bit_length())):
            reach = (reach.float() @ reach.float()) > 0
        self.ancestors = reach
        self.depths = reach.sum(-1) - 1  # [B, N]
        self.max_depth = max_depth if max_depth is not None else int(self.depths.max())
        # [B, N] or None: each node's rank among the drafter's candidates, best first (-1 at the root): the tree of
        # the best n - 1 candidates holds exactly the nodes of rank < n - 1 (``best_nodes_tree``)
        self.ranks = ranks
        self._host_parents = None

    def __len__(self) -> int:
        return self.tokens.shape[1]

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def path_tokens(self, b: int, node: int) -> torch.Tensor:
        """[1, d] tokens from the root's child down to ``node`` in row b (what a logits processor sees as generated
        after the root). Reads the tree to the host: only processors that read the sequence call it."""
        if self._host_parents is None:
            self._host_parents = self.parents.tolist()
        path = []
        while node > 0:
            path.append(node)
            node = self._host_parents[b][node]
        return self.tokens[b: b + 1, list(reversed(path))]


def best_nodes_tree(scores: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, roots: torch.Tensor,
                    total_nodes: int, max_depth: int) -> TreeProposal:
    """A proposal from a table of candidate nodes laid out level by level (parents before children): the root, then
    the best total_nodes-1 entries by score, ties going to the earlier (hence shallower) entry, in table order.
    Scores are cumulative log-probabilities, so a child never outscores its parent and every chosen entry's parent is
    chosen too. scores / tokens / parents [B, M] (parents: the parent's entry, -1 under the root); roots [B, 1]."""
    by_rank = scores.sort(dim=1, descending=True, stable=True).indices[:, : total_nodes - 1]  # [B, N-1] best first
    rank_of_entry = torch.zeros_like(parents)
    rank_of_entry.scatter_(1, by_rank, torch.arange(total_nodes - 1, device=by_rank.device).expand_as(by_rank))
    chosen = by_rank.sort(dim=1).values  # [B, N-1] table order
    node_of_entry = torch.zeros_like(parents)  # entry -> its node index in the proposal (1..N-1)
    node_of_entry.scatter_(1, chosen, torch.arange(1, total_nodes, device=chosen.device).expand_as(chosen))
    chosen_parents = parents.gather(1, chosen)
    node_parents = torch.where(chosen_parents < 0, 0, node_of_entry.gather(1, chosen_parents.clamp(min=0)))
    root_column = torch.full_like(roots, -1)
    return TreeProposal(torch.cat([roots, tokens.gather(1, chosen)], dim=1),
                        torch.cat([root_column, node_parents], dim=1), max_depth=max_depth,
                        ranks=torch.cat([root_column, rank_of_entry.gather(1, chosen)], dim=1))


def accepted_within_budgets(tree: TreeProposal, path: torch.Tensor, n_accepted: torch.Tensor,
                            budgets: list[int]) -> torch.Tensor:
    """How many drafts each row would have kept had its tree been only the best n - 1 candidates, for each budget n:
    [B, len(budgets)] (exact for n up to the tree's size, from this one verify).

    The smaller tree is part of this one, and every path it holds that agrees with the target is a prefix of the
    one accepted path here (siblings carry distinct tokens); a candidate scores no higher than its parent, so ranks
    grow along the path, and the smaller tree keeps the path's nodes up to the first of rank >= n - 1.
    path [B, D+1] (``accept_greedy``); n_accepted [B]."""
    path_ranks = tree.ranks.gather(1, path[:, 1:])  # [B, D] ranks of the path's drafts
    on_path = torch.arange(path_ranks.shape[1], device=path.device) < n_accepted[:, None]  # [B, D]
    limits = torch.tensor([n - 1 for n in budgets], device=path.device)  # [n]
    return ((path_ranks[:, :, None] < limits) & on_path[:, :, None]).sum(dim=1)  # [B, n]


def accept_greedy(tree: TreeProposal, choices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The longest root-to-node path whose every token equals the target's argmax at its parent, for every row.

    choices: [B, N] the target's choice after each node.
    Returns path [B, max_depth + 1] (node at each depth of the accepted path; columns past n_accepted hold 0) and
    n_accepted [B]. Siblings carry distinct tokens, so at most one child of a node matches: the nodes whose whole
    ancestry matches form a single chain.
    """
    parent_choice = choices.gather(1, tree.parents.clamp(min=0))  # [B, N]
    matches = (tree.tokens == parent_choice) | (tree.parents < 0)  # the root always "matches"
    on_path = ~(tree.ancestors & ~matches[:, None, :]).any(-1)  # [B, N]
    n_accepted = torch.where(on_path, tree.depths, 0).max(-1).values  # [B]
    width = tree.max_depth + 1
    column = torch.where(on_path, tree.depths, width)  # off-path nodes land in a spare column, dropped below
    nodes = torch.arange(len(tree), device=choices.device).expand_as(column)
    path = torch.zeros((tree.batch_size, width + 1), dtype=torch.long, device=choices.device)
    path.scatter_(1, column, nodes)
    return path[:, :width], n_accepted


def accept_sampling(tree: TreeProposal, probs: torch.Tensor, generator=None, row: int = 0) -> tuple[list[int], int]:
    """Recursive rejection over siblings for deterministic (one-hot) drafts, in batch row ``row`` of the tree;
    probs [N, V] its nodes' target distributions. Returns (path, next token), on the host.

    At a node with target distribution p: try its children in order; child token x is accepted with probability
    p(x) / (mass left); on rejection p(x) is zeroed. If every child fails, the next token is sampled from what is
    left. Each step therefore emits exactly a sample of p: the output distribution is the target's.
    """
    tokens, parents = tree.tokens[row].tolist(), tree.parents[row].tolist()
    children = [[c for c in range(len(parents)) if parents[c] == node] for node in range(len(parents))]
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].clone()
        accepted = None
        for child in children[node]:
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


def compact_path(cache, starts: torch.Tensor, path: torch.Tensor) -> None:
    """Move the K/V of each row's path nodes (slots start_b + path[b, d]) to slots start_b + d, in every layer, in
    place. starts [B]; path [B, D]. Columns past a row's accepted length move stale rows to slots past its new cache
    length: harmless, they are masked and overwritten."""
    src = starts[:, None] + path  # [B, D]
    dst = starts[:, None] + torch.arange(path.shape[1], device=path.device)  # [B, D]
    for layer in cache.layers:
        if layer.is_initialized:
            for buffer in (layer.keys, layer.values):  # [B, heads, S, head_dim]
                shape = (-1, buffer.shape[1], -1, buffer.shape[3])
                moved = buffer.gather(2, src[:, None, :, None].expand(shape))  # read every source before writing
                write_slots(buffer, dst, moved)
