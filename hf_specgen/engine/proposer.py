"""The interface every drafter implements (``drafters/``): what the loop calls, in the order it calls it.

    start(session, prompt_features)   once, after the prefill: the committed prompt (+ first token) and the target's
                                      tapped hidden states over the prompt, [B, P, n_taps*H] (None without taps)
    propose()                         each round: [B, W] blocks whose column 0 is each row's last committed token
                                      (a [W] block is read as batch 1), or a TreeProposal
                                      (a tree per row)
    commit(verify_features, counts)   after the verify: the target's taps over the verified rows [B, W, n_taps*H]
                                      and how many of them each row committed, [B] on the device (0 for done rows)

A proposer keeps its own caches, indexed by the session's slots, and never reaches into another's state.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from .tree import TreeProposal


def keep_batch_rows(owner, names: tuple[str, ...], kept: list[int]) -> None:
    """A proposer's ``keep_rows``: its per-row state ``names`` (tensors with the batch first, or per-row lists; None
    stays None) keeps rows ``kept`` only. Its caches are attached to the session, which drops their rows itself."""
    index: dict[torch.device, torch.Tensor] = {}  # ``kept`` as a tensor, made once per device
    for name in names:
        value = getattr(owner, name, None)
        if isinstance(value, torch.Tensor):
            rows = index.setdefault(value.device, torch.tensor(kept, dtype=torch.long, device=value.device))
            setattr(owner, name, value.index_select(0, rows))
        elif isinstance(value, list):
            setattr(owner, name, [value[b] for b in kept])


class PendingContextRows:
    """``pending`` [B, C, F]: the target features a drafter has not run over yet (the prompt's, a verify's, and one row
    per plain step since). A plain step adds a row; joining the whole context again at every step (a copy of O(C)
    rows) cost 4.7 / 11 ms a step at batch 16 with 100 / 250 context rows (5 taps of 576, bf16, one thread), 4-9% of
    the real target's plain step there. So the rows are kept as parts and joined once, when the drafter reads them."""

    @property
    def pending(self) -> torch.Tensor:
        parts = self._pending_parts  # (an AttributeError before ``start``: getattr(proposer, "pending", None) is None)
        if len(parts) > 1:
            self._pending_parts = parts = [torch.cat(parts, dim=1)]
        return parts[0]

    @pending.setter
    def pending(self, rows: torch.Tensor) -> None:
        self._pending_parts = [rows]

    def append_pending(self, rows: torch.Tensor) -> None:
        """``rows`` [B, r, F] follow the pending ones (joined when next read)."""
        self._pending_parts.append(rows)

    @property
    def unread_rows(self) -> int:
        """Pending rows that no verify of this drafter's own drafts handed over: the prompt's, then plain steps' (0
        while ``pending_counts`` says the rows came from its last drafted verify, which every drafting round reads).
        A probe after plain steps runs the drafter over all of them before it drafts: at the real target's batch of
        16 after a 245-token prompt (fp32, AVX2) a DFlash probe's round took 0.77 s where a plain step took 0.23 s.
        The width policy charges that read to a probe as it does a draft LM's (``CostTable.read``)."""
        if self.pending_counts is not None:  # (an AttributeError before ``start``: the loop's getattr reads 0)
            return 0
        return sum(part.shape[1] for part in self._pending_parts)


@runtime_checkable
class Proposer(Protocol):
    block_size: int  # W: rows of a verify (nodes of a tree)
    tapped_layer_ids: list[int] | None  # target layers whose outputs the proposer reads (None / [] = none)

    def start(self, session, prompt_features: torch.Tensor | None) -> None: ...

    def propose(self) -> torch.Tensor | TreeProposal: ...

    def commit(self, verify_features: torch.Tensor | None, n_committed: torch.Tensor) -> None: ...

# Optional members the loop reads when present: ``cache_margin`` (extra cache slots the drafter writes past the
# verified ones), ``forward_calls`` (drafter forwards, for the statistics), ``round_records()`` (per-round lists
# copied into the statistics, e.g. WhiFlash's drafter per round), ``observe(logits_rows, features_rows, rows)``
# (routers: the target at each batch row's newest committed token, [B, V] and [B, n_taps*H], and the unfinished
# rows), ``takes_any_context_rows`` (True: in eager mode ``commit`` may get the verify's features cut after the
# longest row's committed ones, fewer rows for the drafter to project). For the width policy (width_policy.py):
# ``drafts_any_width`` (``propose(width, whole_block=False)`` drafts for a round of ``width`` rows, or a tree of that
# many nodes; ``whole_block`` drafts the whole block while the policy times it), ``drafts_token_by_token`` /
# ``drafts_head_by_width`` (how a narrower round's drafting costs less), and ``commit_plain(features, counts, rows=1)``
# (a round the proposer did not draft committed ``rows`` tokens per row: a plain step's one, or a batch-1 verify of
# copied tokens; ``features`` [B, rows, n_taps*H] are the target's taps at those rows). ``keep_rows(rows)``: keep the
# per-row state of batch rows ``rows`` (a host list) only (``keep_batch_rows``); an eager batch drops its finished
# rows only with a proposer that has it. ``unread_rows``: committed rows the proposer reads before it next drafts,
# beyond its last drafted verify's (the prompt's, plain steps'), which a probe's round pays for (``CostTable.read``).
