"""EAGLE-3 proposers: chain drafting (K autoregressive drafter steps) and dynamic tree drafting (EAGLE-2 style).

Alignment (``start`` = slot of the last committed token, the bonus b):
  * the drafter row at slot t pairs the target feature f_t with the token at slot t+1 and predicts the token at t+2;
  * its cache holds committed rows only: slots < start, each built from a REAL target feature;
  * a round first appends the rows whose features arrived with the last verify (the prompt's in round 1, else the W
    verify rows: fixed shape, rows past the committed ones are masked out and overwritten later); the row at slot
    start-1 pairs f_{start-1} with b and predicts d1;
  * then K-1 one-row steps: row at slot start+j-1 pairs the token d_j with the drafter's own previous output
    (standing in for the target feature it does not have yet) and predicts d_{j+1}.
After drafting, the cache length goes back to ``start``: rows built from the drafter's own outputs are not kept.

Tree drafting (top_k, depth, total_tokens): level 1 = the top_k tokens after the bonus, scored by log-prob; each
further level runs the drafter once on the top_k frontier nodes (siblings share a position; in the drafter's cache
each frontier row sees the committed context and the rows of its own ancestors), takes top_k children per node with
score = parent score + log-prob, and keeps the best top_k as the next frontier. The proposal is the root plus the
total_tokens-1 best-scored nodes (parents always before children), verified by the target in one forward.
"""

from __future__ import annotations

import torch

from ..engine.cache import CachePool, set_cache_length
from ..engine.graphs import StepRunner
from ..engine.proposer import PendingContextRows, keep_batch_rows
from ..engine.tree import TreeProposal, best_nodes_tree
from ..models.eagle3 import Eagle3DraftModel, default_eagle3_layer_ids


def check_eagle3_fits_target(drafter: Eagle3DraftModel, target, layer_ids: list[int]) -> None:
    cfg = target.config.get_text_config(decoder=True)
    if drafter.config.hidden_size != cfg.hidden_size:
        raise ValueError(f"EAGLE-3 drafter hidden size {drafter.config.hidden_size} != target hidden size "
                         f"{cfg.hidden_size}: use the drafter trained for this target model.")
    if drafter.vocab_size != target.get_input_embeddings().num_embeddings:
        raise ValueError(f"EAGLE-3 drafter maps to a {drafter.vocab_size}-token vocabulary, the target has "
                         f"{target.get_input_embeddings().num_embeddings}: use the drafter trained for this target.")
    bad = [i for i in layer_ids if not 0 <= i < cfg.num_hidden_layers]
    if bad or len(layer_ids) * cfg.hidden_size != drafter.fc.in_features:
        raise ValueError(f"EAGLE-3 drafter taps {layer_ids} do not fit this {cfg.num_hidden_layers}-layer target (fc "
                         f"reads {drafter.fc.in_features // cfg.hidden_size} taps): use the drafter trained for it.")


class Eagle3ChainProposer(PendingContextRows):
    """K draft tokens per round, one drafter step each (a tree with top_k = 1)."""

    drafts_any_width = True  # propose(width): w - 1 drafts (the width policy)
    drafts_token_by_token = True  # one drafter forward per draft: a round of w rows costs (w - 1) / K of K drafts

    def __init__(self, drafter: Eagle3DraftModel, target, num_draft_tokens: int, compile_steps: bool | str,
                 stops_when_unsure: bool = False):
        layers = target.config.get_text_config(decoder=True).num_hidden_layers
        self.tapped_layer_ids = drafter.target_layer_ids or default_eagle3_layer_ids(layers)
        check_eagle3_fits_target(drafter, target, self.tapped_layer_ids)
        self.drafter = drafter
        self.embed = target.get_input_embeddings()
        # propose(stop_below=...) and self.confidences: each step also returns its draft's probability (a softmax
        # over the draft vocabulary), for the width policy's UNSURE_STOP; fixed here because a compiled step's
        # outputs are, and left off where nothing reads them (trees, fixed chains, GPUs)
        self.stops_when_unsure = stops_when_unsure
        self.num_draft_tokens = num_draft_tokens
        self.block_size = num_draft_tokens + 1
        self.context_rows = self.block_size  # rows of features a verify hands back (see _context)
        self.forward_calls = 0
        device = next(drafter.parameters()).device
        self._context_step = StepRunner(self._step, compile_steps, device)
        self._chain_step = StepRunner(self._step, compile_steps, device)
        self._caches = CachePool(keep=compile_steps)
        self.verify_widths = {self.block_size}  # the adaptive loop widens this to its width buckets

    def _step(self, token_ids, features, positions, mask):
        # token_ids [B, T]; features [B, T, n*H] or [B, T, H]; positions [B, T]; mask [B, 1, T, K]
        hidden = self.drafter(self.embed(token_ids), features, positions, self.cache, mask)  # [B, T, H]
        logits = self.drafter.draft_logits(hidden)  # [B, T, draft_vocab]
        draft_ids = logits.argmax(dim=-1)  # [B, T]
        confidence = (logits.float().softmax(dim=-1).amax(dim=-1)  # [B, T] the drafter's probability of its draft
                      if self.stops_when_unsure else None)
        return self.drafter.to_target_ids(draft_ids), hidden, confidence

    def start(self, session, prompt_features: torch.Tensor) -> None:
        self.session = session
        self.cache = self._caches.get(session.capacity, 1, session.batch_size, session.device)
        session.attach(self.cache)
        self.pending = prompt_features  # [B, P, n*H]: features of slots 0..P-1
        self.pending_counts = None  # [B] committed pending rows when they came from a drafted verify (ragged)
        self.context_start = torch.zeros_like(session.lengths)  # [B] feature slot of the first pending row
        self.forward_calls = 0
        self.drafts = torch.zeros((session.batch_size, self.block_size), dtype=torch.long, device=session.device)

    def _context(self, starts: torch.Tensor):
        """Bring each row's cache up to slot start-1 from the pending feature rows; returns (prediction after the
        bonus [B], the drafter's output at slot start-1 [B, 1, H], the drafter's probability of that prediction [B],
        or None unless ``stops_when_unsure``).

        Rows of feature slot t pair with the committed token at t+1. The rows of the last verify (its first rows
        committed; a tree's come along the accepted path), a width the verify has, run as one step; any other count
        (the prompt, the rows of plain steps, the last row of a catch-up) gets KV-only prefill for its rows but the
        last, and the full layer for each row's last committed one.
        """
        session, first, rows = self.session, self.context_start, self.pending.shape[1]
        set_cache_length(self.cache, first)
        token_ids = session.token_block(first + 1, rows)  # [B, rows]
        last = (starts - 1 - first).clamp(0, rows - 1)[:, None]  # [B, 1] each row's last committed pending row
        if rows in self._context_widths():
            predicted, hidden, confidence = self._context_step(
                token_ids, self.pending, session.position_block(first, rows), session.causal_mask(first, rows))
            predicted = predicted.gather(1, last)[:, 0]  # [B] (a finished row's is never read)
            if confidence is not None:
                confidence = confidence.gather(1, last)[:, 0]  # [B]
            hidden = hidden.gather(1, last[:, :, None].expand(-1, -1, hidden.shape[-1]))
        else:
            if rows > 1:
                self.drafter.prefill_kv(self.embed(token_ids[:, :-1]), self.pending[:, :-1],
                                        session.position_block(first, rows - 1), self.cache)
            last_slots = first + last[:, 0]  # == starts - 1
            set_cache_length(self.cache, last_slots)
            features = self.pending.gather(1, last[:, :, None].expand(-1, -1, self.pending.shape[-1]))
            predicted, hidden, confidence = self._context_step.eager(
                token_ids.gather(1, last), features, session.position_block(last_slots, 1),
                session.causal_mask(last_slots, 1))
            predicted = predicted[:, 0]
            confidence = confidence[:, 0] if confidence is not None else None
        set_cache_length(self.cache, starts)  # rows from slot start on were built from uncommitted tokens
        return predicted, hidden, confidence

    def absorb(self, features: torch.Tensor, counts: torch.Tensor) -> None:
        """Catch-up (WhiFlash): features [B, T, n*H] of each row's slots from its context start on, of which the
        first counts[b] are committed. KV-only prefill of them all (rows past them land on hidden slots); each row's
        last committed one stays pending, for the next ``propose`` to run in full and seed its drafts."""
        session, first, rows = self.session, self.context_start, features.shape[1]
        set_cache_length(self.cache, first)
        self.drafter.prefill_kv(self.embed(session.token_block(first + 1, rows)), features,
                                session.position_block(first, rows), self.cache)
        last = (counts - 1).clamp(min=0)  # [B] (a row done before this catch-up has none: its rows are never read)
        self.pending = features.gather(1, last[:, None, None].expand(-1, 1, features.shape[-1]))  # [B, 1, n*H]
        self.context_start = first + last

    def _context_widths(self) -> set[int]:
        """Pending row counts that run as one (compiled) step: the widths a verify of this proposer has."""
        return self.verify_widths

    def propose(self, width: int | None = None, whole_block: bool = False,
                stop_below: float | None = None) -> torch.Tensor:
        """[B, w]: each row's last committed token, then w - 1 draft tokens (``width`` None or ``whole_block``:
        K + 1, the width policy timing the whole block's drafting; the caller keeps the first w).

        ``stop_below``: drafting stops early, once every row's chance that all its drafts so far are right (the
        product of the drafter's probabilities of them) is below it: the drafts past that point are unlikely to be
        kept, and each costs a drafter forward. It reads each draft's probability on the host, so it is for CPUs,
        where that costs nothing. ``self.confidences`` [B, n] holds the probabilities of the n drafts returned (with
        ``stops_when_unsure`` only)."""
        if stop_below is not None and not self.stops_when_unsure:
            raise ValueError("stop_below needs a chain built with stops_when_unsure=True (its steps then return their "
                             "drafts' probabilities).")
        session, starts = self.session, self.session.last_slots
        n_drafts = self.num_draft_tokens if width is None or whole_block else min(width - 1, self.num_draft_tokens)
        predicted, hidden, confidence = self._context(starts)
        self.drafts[:, 0] = session.token_block(starts, 1)[:, 0]
        self.drafts[:, 1] = predicted
        confidences, all_right = [confidence], confidence  # [B] each
        for j in range(1, n_drafts):
            if stop_below is not None and float(all_right.max()) < stop_below:
                n_drafts = j
                break
            slots = starts + j - 1
            predicted, hidden, confidence = self._chain_step(
                self.drafts[:, j: j + 1], hidden, session.position_block(slots, 1), session.causal_mask(slots, 1))
            self.drafts[:, j + 1] = predicted[:, 0]
            hidden = hidden.clone()  # a CUDA-graph replay would overwrite it before the next step reads it
            if self.stops_when_unsure:
                confidences.append(confidence[:, 0])
                all_right = all_right * confidence[:, 0]
        self.confidences = torch.stack(confidences, dim=1) if self.stops_when_unsure else None  # [B, n_drafts]
        self.forward_calls += n_drafts
        set_cache_length(self.cache, starts)  # keep rows built from real target features only
        self.context_start = starts.clone()
        return self.drafts[:, : n_drafts + 1].clone()

    def commit(self, verify_features: torch.Tensor, n_committed: torch.Tensor) -> None:
        self.pending = verify_features  # [B, W, n*H]: slots start..start+W-1; the first n_committed are valid
        self.pending_counts = n_committed

    def commit_plain(self, verify_features: torch.Tensor, n_committed: torch.Tensor, rows: int = 1) -> None:
        """A round this drafter did not draft (a plain step, or a verify of copied tokens) committed ``rows`` tokens
        per row; verify_features [B, rows, n*H] are the target's taps at those slots. They join the pending rows,
        which stay one run of committed rows: the rows of an earlier drafted verify, of which only some were
        committed, go into the drafter cache first (``absorb`` keeps each row's last committed one pending)."""
        if self.pending_counts is not None:
            self.absorb(self.pending, self.pending_counts)
            self.pending_counts = None
        self.append_pending(verify_features)  # [B, C+rows, n*H] once read

    def keep_rows(self, rows: list[int]) -> None:
        keep_batch_rows(self, ("pending", "pending_counts", "context_start", "drafts"), rows)


class Eagle3TreeProposer(Eagle3ChainProposer):
    """Dynamic draft trees: ``depth`` drafter forwards of ``top_k`` rows, ``total_tokens`` nodes verified.

    Built on the device with fixed shapes per level (no host read, no Python loop over nodes), for every batch row
    at once. Candidate nodes live in a table of M = top_k + (depth-1) * top_k^2 entries, level by level: level 1 is
    entries [0, k), level l >= 2 is k + (l-2)k^2 + parent_row * k + j (child j of frontier row parent_row). Tree rows
    in the drafter's cache: level l's frontier row r sits at slot start + (l-1)k + r.
    """

    drafts_trees = True  # a target with recurrent layers refuses trees (one state per branch)
    # propose(width): the width policy's node budget for the round, drafted with min(depth, width - 1) levels (the
    # deepest node a tree of that many nodes can hold): a round's drafting costs its levels' share of the whole
    drafts_token_by_token = False

    def __init__(self, drafter: Eagle3DraftModel, target, top_k: int, depth: int, total_tokens: int,
                 compile_steps: bool | str):
        super().__init__(drafter, target, depth, compile_steps)
        if total_tokens < 2 or total_tokens > 1 + top_k * depth:
            raise ValueError(f"eagle_total_tokens must be in [2, 1 + top_k * depth = {1 + top_k * depth}], "
                             f"got {total_tokens}")
        self.top_k, self.depth, self.total_tokens = top_k, depth, total_tokens
        self.block_size = total_tokens  # verified nodes per round
        self.context_rows = depth + 1  # the verify's features come back along the accepted path: depth + 1 rows
        self.cache_margin = top_k * depth  # drafter tree rows live past the verified slots
        device = next(drafter.parameters()).device
        self._level = StepRunner(self._level_step, compile_steps, device)
        self.verify_widths = {total_tokens}

    def _context_widths(self) -> set[int]:
        return {self.context_rows}  # the verify hands back its accepted path: depth + 1 rows at any budget

    def _level_step(self, token_ids, features, positions, mask, frontier_scores):
        """One level for every batch row: run the k frontier nodes, score their top-k children, pick the next
        frontier. token_ids [B, k]; features [B, k, H] (each node's parent output); positions [B, k];
        mask [B, 1, k, K]; frontier_scores [B, k] cumulative log-probs.
        Returns child tokens [B, k*k] (target ids), child scores [B, k*k], the chosen children [B, k] (indices into
        k*k) and the outputs of their parents [B, k, H]."""
        k = self.top_k
        hidden = self.drafter(self.embed(token_ids), features, positions, self.cache, mask)  # [B, k, H]
        logprobs = torch.log_softmax(self.drafter.draft_logits(hidden).float(), dim=-1)  # [B, k, draft_vocab]
        child_logprobs, child_ids = logprobs.topk(k, dim=-1)  # [B, k, k]
        totals = (frontier_scores[:, :, None] + child_logprobs).flatten(1)  # [B, k*k]
        best = totals.topk(k, dim=-1).indices  # [B, k]
        parent_rows = best // k
        next_hidden = hidden.gather(1, parent_rows[:, :, None].expand(-1, -1, hidden.shape[-1]))  # [B, k, H]
        return self.drafter.to_target_ids(child_ids).flatten(1), totals, best, next_hidden

    def levels(self, width: int) -> int:
        """Drafter levels a tree of ``width`` nodes needs: its best width - 1 candidates are the same in a table of
        that many levels as in the whole one (a candidate scores no higher than its parent, so a chosen node's
        ancestors are all chosen: it lies at most width - 1 deep; each level's frontier does not depend on the
        levels after it)."""
        return min(self.depth, width - 1)

    def propose(self, width: int | None = None, whole_block: bool = False) -> TreeProposal:
        """Each row's tree of ``width`` nodes (None: total_tokens), the root included; ``whole_block``: drafted with
        every level (the width policy timing the whole tree's drafting)."""
        session, k, batch = self.session, self.top_k, self.session.batch_size
        levels = self.depth if width is None or whole_block else self.levels(width)
        starts = session.last_slots  # [B]
        _, hidden, _ = self._context(starts)  # [B, 1, H]: the drafter's output at slot start-1
        logprobs = torch.log_softmax(self.drafter.draft_logits(hidden[:, 0]).float(), dim=-1)  # [B, draft_vocab]
        first_scores, first_ids = logprobs.topk(k, dim=-1)  # [B, k]
        # The candidate table (see the class docstring): score, target token and parent entry (-1 = the root).
        entries = k + (self.depth - 1) * k * k
        scores = logprobs.new_full((batch, entries), float("-inf"))  # levels not drafted stay out of the tree
        tokens = torch.empty((batch, entries), dtype=torch.long, device=session.device)
        parents = torch.full((batch, entries), -1, dtype=torch.long, device=session.device)
        scores[:, :k], tokens[:, :k] = first_scores, self.drafter.to_target_ids(first_ids)
        frontier = torch.arange(k, device=session.device).expand(batch, k)  # [B, k] table entries
        # contiguous like the later levels' (a compiled step guards on strides: one graph for every level)
        frontier_scores, frontier_hidden = first_scores, hidden.expand(-1, k, -1).contiguous()  # [B, k], [B, k, H]
        # Which tree rows of the drafter's cache each frontier row may see: its ancestors' rows and its own.
        tree_rows = (self.depth - 1) * k
        sees = torch.zeros((batch, k, tree_rows), dtype=torch.bool, device=session.device)  # [B, k, R]
        rows = torch.arange(k, device=session.device)
        root_positions = session.position_block(starts, 1)  # [B, 1]
        for level in range(1, levels):
            sees[:, rows, (level - 1) * k + rows] = True
            mask = session.mask_from(session.context_and_region(starts, sees))  # [B, 1, k, K]
            child_tokens, totals, best, frontier_hidden = self._level(
                tokens.gather(1, frontier), frontier_hidden, (root_positions + level - 1).expand(-1, k), mask,
                frontier_scores)
            first = k + (level - 1) * k * k  # this level's children in the table
            scores[:, first: first + k * k] = totals
            tokens[:, first: first + k * k] = child_tokens
            parents[:, first: first + k * k] = frontier.repeat_interleave(k, dim=1)
            frontier_hidden = frontier_hidden.clone()  # a CUDA-graph replay would overwrite it
            sees = sees.gather(1, (best // k)[:, :, None].expand(-1, -1, tree_rows))  # inherit the parent's view
            frontier, frontier_scores = first + best, totals.gather(1, best)
        self.forward_calls += levels
        set_cache_length(self.cache, starts)
        self.context_start = starts.clone()
        # The root + the best budget-1 candidates (see best_nodes_tree: parents come with their children).
        return best_nodes_tree(scores, tokens, parents, session.token_block(starts, 1), width or self.total_tokens,
                               self.depth)

