"""DFlash proposer: drafts a whole block in one drafter forward, conditioned on the target's hidden states.

Round r, with ``start`` = slot of the last committed token and W = block size:
  1. context rows not yet in the drafter cache (the prompt in round 1, else the W rows of the previous
     verify, of which the committed ones are valid) are projected and appended to the drafter cache;
  2. the block [token at start, mask x (W-1)] (positions of slots start..start+W-1) is denoised in the same forward;
     its K/V are written into the cache right after the context rows, so attention reads the static cache buffer
     in place (no per-layer concatenation) with a mask that places the block;
  3. slot k>=1 proposes argmax(lm_head(h_k)) for the token at start+k (over the drafter's draft vocabulary when it
     has one: ``DraftHead``).
The drafter cache length then goes back to start: it keeps exactly the context slots < start.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engine.cache import CachePool, set_cache_length
from ..engine.graphs import StepRunner
from ..engine.proposer import PendingContextRows, keep_batch_rows
from ..engine.tree import TreeProposal, best_nodes_tree
from ..models.dflash import DFlashDraftModel


def check_dflash_fits_target(drafter: DFlashDraftModel, target, block_size: int) -> None:
    """Raise a ValueError naming the mismatch if this drafter was not made for this target."""
    t_cfg = target.config.get_text_config(decoder=True)
    n_layers = t_cfg.num_hidden_layers
    if drafter.config.hidden_size != t_cfg.hidden_size:
        raise ValueError(
            f"DFlash drafter hidden size {drafter.config.hidden_size} != target hidden size {t_cfg.hidden_size}: "
            "this drafter was trained for another target. Use the drafter published for this target model."
        )
    vocab = target.get_input_embeddings().num_embeddings
    trained_vocab = getattr(drafter.config, "vocab_size", None)
    if trained_vocab is not None and trained_vocab != vocab:
        # The drafter borrows the target's embedding and lm_head, so another vocabulary would not crash: it would
        # draft tokens of the wrong tokenizer and accept almost nothing.
        raise ValueError(
            f"DFlash drafter was trained for a {trained_vocab}-token vocabulary, the target has {vocab} tokens: "
            "use the drafter published for this target model (same tokenizer)."
        )
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < n_layers]
    if bad:
        raise ValueError(
            f"DFlash drafter taps target layers {drafter.target_layer_ids}, but the target has {n_layers} layers "
            f"(ids {bad} do not exist): use the drafter trained for this target, or fix "
            "`dflash_config.target_layer_ids` in the drafter's config.json."
        )
    trained_for = getattr(drafter.config, "num_target_layers", None)
    if trained_for is not None and trained_for != n_layers:
        raise ValueError(
            f"DFlash drafter was trained for a {trained_for}-layer target, this target has {n_layers} layers: "
            "use the drafter published for this target model."
        )
    mask_id = drafter.mask_token_id
    if mask_id is None or not 0 <= int(mask_id) < vocab:
        raise ValueError(
            f"DFlash drafter mask_token_id={mask_id} is not a row of the target's embedding table (size {vocab}): "
            "set `dflash_config.mask_token_id` to a reserved token of the target's tokenizer."
        )
    if block_size > drafter.block_size:
        raise ValueError(
            f"block_size={block_size} is larger than the drafter's trained block size {drafter.block_size}; "
            "DFlash drafters serve blocks up to the size they were trained with. Pass block_size<="
            f"{drafter.block_size}."
        )


class DraftHead:
    """The drafter's logits from its hidden states: the target's lm_head, or only its rows for the drafter's draft
    vocabulary (``DFlashDraftModel.draft_vocab``, [N] token ids): hidden [..., H] -> logits [..., N] (N = V without
    one), and ``token_ids`` maps their columns back to token ids. The restriction changes which tokens are proposed,
    never what is committed: the target verifies every one."""

    def __init__(self, lm_head, draft_vocab: torch.Tensor | None):
        if draft_vocab is not None:
            draft_vocab = draft_vocab.to(lm_head.weight.device)
        self.lm_head, self.draft_vocab = lm_head, draft_vocab
        self.weight, self.bias = lm_head.weight, None  # [N, H] (N = V without a draft vocabulary)
        # the width policy's cost tables key the drafting cost by the head's size
        self.cost_kind = "" if draft_vocab is None else f"draft vocab {draft_vocab.numel()}"
        if draft_vocab is not None:
            self.weight = lm_head.weight.index_select(0, draft_vocab)  # made once per call
            bias = getattr(lm_head, "bias", None)
            self.bias = bias.index_select(0, draft_vocab) if bias is not None else None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden) if self.draft_vocab is None else F.linear(hidden, self.weight, self.bias)

    def token_ids(self, columns: torch.Tensor) -> torch.Tensor:
        return columns if self.draft_vocab is None else self.draft_vocab[columns]


class DFlashProposer(PendingContextRows):
    takes_any_context_rows = True  # its mask hides the uncommitted rows, however many come
    drafts_any_width = True  # propose(width): the lm_head runs over the verified prefix only
    drafts_head_by_width = True  # so a narrower round drafts for less (the width policy times that lm_head once)

    def __init__(self, drafter: DFlashDraftModel, target, block_size: int | None, compile_steps: bool | str):
        self.draft_width = block_size or drafter.block_size  # W: rows of the drafted block
        self.block_size = self.draft_width  # rows of a verify (a tree proposer verifies more)
        check_dflash_fits_target(drafter, target, self.draft_width)
        self.drafter = drafter
        self.tapped_layer_ids = list(drafter.target_layer_ids)
        self.embed = target.get_input_embeddings()
        vocab = drafter.draft_vocab
        if vocab is not None and int(vocab.max()) >= self.embed.num_embeddings:
            raise ValueError(f"the DFlash drafter's draft vocabulary holds token id {int(vocab.max())}, past the "
                             f"target's {self.embed.num_embeddings} tokens: it was made for another target")
        self.head = DraftHead(target.get_output_embeddings(), vocab)
        self.mask_token_id = int(drafter.mask_token_id)
        # The block's K/V are written right after the pending context rows, up to W slots past the verified ones.
        self.cache_margin = self.draft_width
        self._step = StepRunner(self._draft_step, compile_steps, drafter.device)
        self._caches = CachePool(keep=compile_steps)
        self.verify_widths = {self.draft_width}  # the adaptive loop widens this to its width buckets

    def _draft_step(self, block_ids, context_features, positions, mask, rows=None):
        # block_ids [B, W]; context_features [B, C, n_taps*H]; positions [B, C+W]; mask [B, 1, W, K]
        hidden = self.drafter(self.embed(block_ids), context_features, positions, self.cache, mask,
                              cache_block=True)  # [B, W, H]
        # rows: the round verifies only its first rows (adaptive width), so only their drafts go through the
        # lm_head, which on a large vocabulary costs more than the drafter's layers (the block itself stays whole:
        # its rows attend each other both ways)
        return self.head.token_ids(self.head(hidden[:, 1:rows]).argmax(dim=-1))  # [B, rows-1] (rows None: [B, W-1])

    def start(self, session, prompt_features: torch.Tensor) -> None:
        self.session = session
        self.cache = self._caches.get(session.capacity, self.drafter.config.num_hidden_layers, session.batch_size,
                                      session.device)
        session.attach(self.cache)
        self.pending = prompt_features  # [B, P, n_taps*H], cached from slot 0
        self.pending_counts = None  # [B] committed pending rows when they came from a drafted verify (ragged)
        self.context_start = torch.zeros_like(session.lengths)  # [B] first slot of the pending context rows
        self.forward_calls = 0
        self.block_ids = torch.full((session.batch_size, self.draft_width), self.mask_token_id, dtype=torch.long,
                                    device=session.device)

    def _run_drafter(self, step: StepRunner, *step_args):
        """One drafter forward over each row's block [last committed token, mask, ...] after its pending context
        rows (``step_args`` follow the mask); returns what ``step`` returns."""
        session, width = self.session, self.draft_width
        starts, n_ctx = session.last_slots, self.pending.shape[1]  # [B]
        self.block_ids[:, :1] = session.token_block(starts, 1)
        positions = torch.cat([session.position_block(self.context_start, n_ctx), session.position_block(starts, width)],
                              dim=1)  # [B, C+W]
        # Round 1 has the prompt (any length) as context, a round after plain steps their rows: run those eagerly;
        # other rounds have the rows of the last verify, W or (adaptive width) a width bucket: one graph each.
        runner = step if n_ctx in self._context_widths() else step.eager
        set_cache_length(self.cache, self.context_start)  # the pending rows, then the block, are written from here
        mask = session.block_mask(starts, self.context_start + n_ctx, width)
        out = runner(self.block_ids, self.pending, positions, mask, *step_args)
        set_cache_length(self.cache, starts)  # valid context: the slots < start (block rows and uncommitted context
        self.context_start = starts.clone()  # rows past it are hidden and overwritten next round)
        self.forward_calls += 1
        return out

    def _context_widths(self) -> set[int]:
        """Context rows a drafted round hands the next one: the rows it verified (the graphs kept compiled)."""
        return self.verify_widths

    def propose(self, width: int | None = None, whole_block: bool = False) -> torch.Tensor:
        """[B, w] blocks to verify: each row's last committed token, then w-1 drafted tokens (w = ``width``, at
        most W; None: W). Compiled steps always draft W (one graph), and the caller keeps the first w; so does
        ``whole_block`` (the width policy timing the whole block's drafting)."""
        rows = None if width is None or whole_block or self._step.compiled else width
        drafted = self._run_drafter(self._step, rows)
        return torch.cat([self.block_ids[:, :1], drafted], dim=1)

    def absorb(self, features: torch.Tensor, counts: torch.Tensor) -> None:
        """Catch-up (WhiFlash): features [B, T, n_taps*H] of each row's slots from its context start on, of which the
        first counts[b] are committed; their K/V go into the cache now (rows past them land on hidden slots), so the
        next round's drafter forward has no pending context rows."""
        rows = features.shape[1]
        set_cache_length(self.cache, self.context_start)
        self.drafter.prefill_context(features, self.session.position_block(self.context_start, rows), self.cache)
        self.context_start = self.context_start + counts
        self.pending = features[:, :0]

    def commit(self, verify_features: torch.Tensor, n_committed: torch.Tensor) -> None:
        # All W rows go in next round (fixed shape); rows past the committed ones are masked and overwritten.
        self.pending = verify_features
        self.pending_counts = n_committed

    def commit_plain(self, verify_features: torch.Tensor, n_committed: torch.Tensor, rows: int = 1) -> None:
        """A round this drafter did not draft (a plain step, or a verify of copied tokens) committed ``rows`` tokens
        per row; verify_features [B, rows, n_taps*H] are the target's taps at those slots. They join the pending
        context, which then stays one run of committed rows: the rows of an earlier drafted verify, of which only
        some were committed, are written into the drafter cache first (``absorb``)."""
        if self.pending_counts is not None:
            self.absorb(self.pending, self.pending_counts)
            self.pending_counts = None
        self.append_pending(verify_features)  # [B, C+rows, n_taps*H] once read

    def keep_rows(self, rows: list[int]) -> None:
        keep_batch_rows(self, ("pending", "pending_counts", "context_start", "block_ids"), rows)


class DFlashTreeProposer(DFlashProposer):
    """DDTree-style trees from one DFlash pass (Ringel and Romano): the drafter's block gives a distribution per
    position; a prefix's score is the sum of its tokens' log-probabilities there (the positions are treated as
    independent), and the tree is the ``tree_nodes`` most probable prefixes, root included, verified in one target
    forward. Built on the device level by level with fixed shapes: level d keeps its F = tree_nodes - 1 best prefixes
    (any prefix among the overall best has its parent among its level's best, so nothing chosen is lost), each
    expanded by the top_k tokens of position d + 1; ``best_nodes_tree`` then takes the overall best.
    """

    drafts_trees = True  # a target with recurrent layers refuses trees (one state per branch)
    # propose(width): with adaptive_width=True the width policy picks each round's node budget, the tree of the best
    # width - 1 candidates of the same table; one pass drafts every level, so any budget costs the same drafting
    drafts_any_width = True
    drafts_head_by_width = False

    def __init__(self, drafter: DFlashDraftModel, target, block_size: int | None, compile_steps: bool | str,
                 tree_nodes: int, top_k: int | None):
        super().__init__(drafter, target, block_size, compile_steps)
        self.depth = self.draft_width - 1  # draft positions of a block
        self.frontier = tree_nodes - 1
        self.top_k = min(top_k or self.frontier, self.frontier)
        reachable = sum(min(self.frontier, self.top_k ** d) for d in range(1, self.depth + 1))
        if tree_nodes - 1 > reachable:
            raise ValueError(f"dflash_tree_nodes={tree_nodes} is more than block size {self.draft_width} and "
                             f"dflash_tree_top_k={self.top_k} can reach ({reachable + 1} nodes): lower it, or raise "
                             "dflash_tree_top_k.")
        self.tree_nodes = self.block_size = tree_nodes  # verified rows per round
        self._top_step = StepRunner(self._draft_top_step, compile_steps, drafter.device)

    def _draft_top_step(self, block_ids, context_features, positions, mask):
        # block_ids [B, W]; context_features [B, C, n_taps*H]; positions [B, C+W]; mask [B, 1, W, K]
        hidden = self.drafter(self.embed(block_ids), context_features, positions, self.cache, mask,
                              cache_block=True)  # [B, W, H]
        logprobs = torch.log_softmax(self.head(hidden[:, 1:]).float(), dim=-1)  # [B, D, N], D = W - 1
        values, columns = logprobs.topk(self.top_k, dim=-1)  # [B, D, K]
        return values, self.head.token_ids(columns)

    def _context_widths(self) -> set[int]:
        return {self.draft_width}  # the verify hands back its accepted path: depth + 1 rows at any budget

    def levels(self, width: int) -> int:
        """Drafter levels a tree of ``width`` nodes needs: all of them (one forward drafts the whole block)."""
        return self.depth

    def propose(self, width: int | None = None, whole_block: bool = False) -> TreeProposal:
        """Each row's tree of ``width`` nodes (None: tree_nodes), the root included: the best width - 1 entries of
        the candidate table built for tree_nodes (a candidate never outscores its parent, so the smaller tree is part
        of the larger one, which the width policy's per-budget evidence needs; ``whole_block`` changes nothing)."""
        top_logprobs, top_ids = self._run_drafter(self._top_step)  # [B, D, K]
        batch, frontier, k = top_logprobs.shape[0], self.frontier, self.top_k
        levels = torch.full((batch, self.depth, frontier), float("-inf"), device=top_logprobs.device)  # scores
        tokens = torch.zeros((batch, self.depth, frontier), dtype=torch.long, device=top_logprobs.device)
        parents = torch.full((batch, self.depth, frontier), -1, dtype=torch.long, device=top_logprobs.device)
        kept = min(k, frontier)  # level 1: the best tokens of position 1 (a missing entry keeps -inf)
        levels[:, 0, :kept], tokens[:, 0, :kept] = top_logprobs[:, 0, :kept], top_ids[:, 0, :kept]
        for d in range(1, self.depth):
            totals = (levels[:, d - 1, :, None] + top_logprobs[:, d, None, :]).flatten(1)  # [B, F*K]
            best_scores, best = totals.topk(frontier, dim=-1)  # [B, F]
            levels[:, d], tokens[:, d] = best_scores, top_ids[:, d].gather(1, best % k)
            parents[:, d] = (d - 1) * frontier + best // k  # the parent's entry in the flattened table
        roots = self.block_ids[:, :1]
        return best_nodes_tree(levels.flatten(1), tokens.flatten(1), parents.flatten(1), roots.clone(),
                               width or self.tree_nodes, self.depth)
