"""The one decoding loop every speculative mode shares.

    prefill -> repeat [propose -> verify -> accept -> commit / roll back] -> stop

A *proposer* (drafters/, the interface is ``proposer.Proposer``) turns each row's committed sequence into a block of
W tokens whose first token is the row's last committed one (or a tree per row); the target verifies every row's
block in one forward; ``verify.py`` decides how many drafts each row keeps; caches are rolled back by moving each
row's write position. Rows that are done stop changing and are padded with ``pad_token_id`` in the output, as stock
generate does; compiled steps keep computing them (and ignore them), so every step keeps its shape, while an eager
batch drops them (``_drop_finished_rows``). With ``prompt_lookup``, rows that repeat their own text verify the copy
instead of the drafter's tokens (``lookup.py``); for one prompt, such a round may verify the copy alone, without a
drafter forward (``width_policy.CopyingWidthPolicy``).

Host round trips: everything a round decides stays on the device; the loop reads ONE small tensor per round (each
row's accepted count, committed count and done flag) to know when to stop and to keep the statistics. Extra reads
happen only for features that need the tokens on the host: a streamer, user stopping criteria, logits processors
that read the sequence (repetition penalty, ...), trees and routers.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .cache import CachePool, restore_states, set_cache_length, snapshot_states
from .graphs import BUILDING_CALLS, CACHE_BUCKET, StepRunner, build_drafting_graphs, built_widths
from .lookup import PromptLookup
from .narrow_rows import RoutedLinears, drop_packed, kinds_for, pack_linears, routable_linears, route_pays
from .prefill import forward_overhead_tokens, prefill_groups, prefill_in_groups, prefills_in_groups
from .session import DecodingSession
from .stats import RoundClock, SpeculativeStats
from .support import (attention_layout, cache_keyword, check_target, hybrid_layer_indices, last_logits_only,
                      layer_masks, model_type, padded_prefill_reason, rollback_layer_indices, rollback_mode_reason,
                      states_per_recurrent_layer)
from .taps import decoder_layers, tapped
from .tree import TreeProposal, accept_greedy, accept_sampling, accepted_within_budgets, compact_path
from .verify import accept_block, check_processors, process_block_logits, target_choices
from .width_policy import (COPIED, COPY_WIDTH, MEASURE_BUDGET_SECONDS, SURE_PROBABILITY, UNSURE_STOP,
                           AcceptanceEstimate, CopyingWidthPolicy, RoutedWidthPolicy, TreeAcceptanceEstimate,
                           WidthPolicy, batch_bucket, call_acceptance, cost_key, costs_of, measure_verify_costs,
                           width_buckets)

LOG_SURE = math.log(SURE_PROBABILITY)
# a just-measured verify width that reads DEAR_MARGIN times dearer than a wider one is timed again, up to RETIMINGS
# times (within the margin, two widths that cost about the same read either way round at random)
RETIMINGS, DEAR_MARGIN = 2, 1.25


@dataclass
class SpeculativeGenerateOutput(GenerateDecoderOnlyOutput):
    """Stock ``GenerateDecoderOnlyOutput`` plus the run's ``speculative_stats``."""

    speculative_stats: SpeculativeStats | None = None


@dataclass
class RoundResult:
    """What the target decided for every row in one round (device tensors).

    n_accepted [B] drafts kept; new_tokens [B, n] (row b commits new_tokens[b, :n_accepted[b] + 1]); scores / logits
    [B, n, V] along the committed rows; features [B, n, F] or None (target taps along the committed rows);
    mismatches / rescued [B] for FLy, else None."""

    n_accepted: torch.Tensor
    new_tokens: torch.Tensor
    scores: torch.Tensor
    logits: torch.Tensor
    features: torch.Tensor | None
    mismatches: torch.Tensor | None = None
    rescued: torch.Tensor | None = None
    within_budgets: torch.Tensor | None = None  # [B, n] a tree's drafts kept within each smaller budget (policy)


def _stop_token_ids(generation_config) -> list[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return []
    return sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])})


def _pad_token_id(generation_config, stop_ids: list[int]) -> int:
    """The filler after a finished row, as stock generate picks it (pad, else the first eos)."""
    pad = generation_config.pad_token_id
    if pad is None:
        return stop_ids[0] if stop_ids else 0
    return int(pad[0] if isinstance(pad, (list, tuple)) else pad)


def _required_capacity(prompt_len: int, max_new_tokens: int, width: int, compiled: bool,
                       max_cache_len: int | None) -> int:
    """Cache slots for the call: the last verify starts at slot prompt_len + max_new_tokens - 2 and writes W rows.
    Compiled steps get a multiple of CACHE_BUCKET, and ``max_cache_len`` (stock generate's meaning: size the cache
    for the largest call) makes every call up to it share one size, hence one graph."""
    need = prompt_len + max_new_tokens + width
    if compiled:
        need = -(-need // CACHE_BUCKET) * CACHE_BUCKET
    return max(need, max_cache_len or 0)


class StopRule:
    """Stock generate's stopping, judged on the device for every row at once: max_new_tokens, stop tokens (the
    output ends after the stop token), plus the user's own criteria (judged on the host after each token)."""

    def __init__(self, generation_config, stopping_criteria, prompt_len: int, device, max_positions: int | None):
        self.prompt_len = prompt_len
        self.max_new_tokens = generation_config.max_length - prompt_len
        # Stock's max-length criterion warns (once per process) when a sequence goes on past the model's positions.
        self.max_length_criterion = MaxLengthCriteria(generation_config.max_length, max_positions)
        self.stop_token_ids = _stop_token_ids(generation_config)  # host list, for the output's pad choice
        self.stop_ids = torch.tensor(self.stop_token_ids, dtype=torch.long, device=device)
        self.extra = [c for c in stopping_criteria if not isinstance(c, (EosTokenCriteria, MaxLengthCriteria))]

    def judge(self, session: DecodingSession, new_tokens, counts, active):
        """new_tokens [B, n], counts [B] candidates per row, active [B] bool -> (kept [B], done [B])."""
        room = self.max_new_tokens - (session.lengths - self.prompt_len)  # [B]
        offsets = torch.arange(new_tokens.shape[1], device=new_tokens.device)
        candidate = offsets < counts[:, None]  # [B, n]
        if self.stop_ids.numel():
            is_stop = torch.isin(new_tokens, self.stop_ids) & candidate
            has_stop = is_stop.any(dim=1)
            through_stop = torch.where(has_stop, is_stop.int().argmax(dim=1) + 1, counts)
        else:
            has_stop = torch.zeros_like(active)
            through_stop = counts
        kept = torch.where(active, torch.minimum(through_stop, room), 0)
        done = active & (has_stop | (kept >= room))
        return kept, done

    def warn_past_positions(self, longest_before: int, longest_after: int) -> None:
        """Stock asks its max-length criterion after every token; the engine judges max_length itself, so it asks the
        criterion about the first length of this round past the model's positions (the criterion reads only the
        length, and warns unless that length ends the call): the same warning under the same condition."""
        max_positions = self.max_length_criterion.max_position_embeddings
        if max_positions is None:
            return
        first_past = max(longest_before + 1, max_positions + 1)
        if first_past <= longest_after:
            self.max_length_criterion(torch.empty(1, first_past, device="meta"), None)

    def judge_extra(self, session: DecodingSession, rows: list[int], first_new: list[int]) -> dict[int, int]:
        """User criteria (stop strings, max_time, ...) after every new token of ``rows``: {row: committed length
        to cut it at} for the rows they stop."""
        cut = {}
        for b in rows:
            sequence = session.row(b)
            for length in range(first_new[b] + 1, sequence.shape[1] + 1):
                if any(bool(c(sequence[:, :length], None).any()) for c in self.extra):
                    cut[b] = length
                    break
        return cut


class FinishedRows:
    """The tokens of the rows an eager batch has dropped (``SpeculativeDecoder._drop_finished_rows``), at their
    places in the caller's batch, for the output."""

    def __init__(self, session: DecodingSession):
        self.tokens, self.lengths = None, list(session.host_lengths)

    def keep(self, session: DecodingSession, rows: list[int]) -> None:
        """Record the session's ``rows`` (current row numbers) as they are now."""
        if self.tokens is None:
            self.tokens = torch.zeros((len(self.lengths), session.capacity), dtype=torch.long, device=session.device)
        places = [session.row_ids[b] for b in rows]
        self.tokens[places] = session.tokens[rows]
        for place, b in zip(places, rows):
            self.lengths[place] = session.host_lengths[b]

    def all_rows(self, session: DecodingSession) -> tuple[torch.Tensor, list[int]]:
        """(tokens [B, capacity], committed lengths [B]) of the caller's whole batch: the session's rows and the
        dropped ones."""
        if self.tokens is None:
            return session.tokens, list(session.host_lengths)
        self.keep(session, list(range(session.batch_size)))
        return self.tokens, self.lengths


def single_row_steps_as_stock(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a batch-1 eager call's prefill and plain steps run the attention as stock generate's do (no mask of
    ours, exactly the keys written so far: the same kernel path, so the same logits to the bit, in any dtype).
    Everywhere but on a CPU in a reduced-precision dtype, where SDPA's grouped-query path without a mask costs more
    than ours: in bf16 on a 2-core AMD EPYC with AVX512-BF16 the engine's plain decoding of SmolLM2-135M took 0.92x
    stock's time on its own path and 1.03x on stock's, so it keeps its own there, and its texts may part from stock's
    at a near-tie (docs/reliability.md). In fp32 stock's path is as fast or a little faster (1.00-1.01x against
    1.02x). Not measured on a GPU, where the unmasked path is flash attention's."""
    return device.type != "cpu" or dtype == torch.float32


def _timed_routes(linears: list[torch.nn.Linear], decided: dict, device: torch.device, dtype: torch.dtype, kinds,
                  ways) -> RoutedLinears | None:
    """The routes of ``linears`` (a target's, or a draft LM's) for a call's forwards: each of ``kinds`` that
    ``decided`` (that model's verdicts, by (device, kind name)) does not hold yet is timed both ways, where
    ``ways(kind, routed)`` gives them (run_plain, run_routed; None where no forward of the call is of that kind), and
    its verdict kept there. Packed kinds need packed copies: made where such a kind is untimed or taken (not where
    they would not fit in memory: such kinds stay untimed and off the call), and dropped where none is taken."""
    key = str(device)
    packs = (any(k.way == "packed" and decided.get((key, k.name), True) for k in kinds)
             and pack_linears(linears, dtype))
    kinds = tuple(k for k in kinds if k.way != "packed" or packs)
    for kind in kinds:
        if (key, kind.name) in decided:
            continue
        timed = ways(kind, RoutedLinears(linears, (kind,)))
        if timed is not None:
            decided[key, kind.name] = route_pays(*timed, device)
    taken = tuple(k for k in kinds if decided.get((key, k.name)))
    if packs and not any(k.way == "packed" for k in taken):
        drop_packed(linears)  # timed slower here: no copies kept for nothing
    return RoutedLinears(linears, taken) if taken else None


class SpeculativeDecoder:
    """Runs speculative generate calls for ``target`` with a proposer (see drafters/)."""

    # the drafter's forwards take narrow routes too (_drafting_linears): the target's kinds for a drafter on its
    # hidden states, a draft LM's own timed kinds; off only to measure them apart
    routes_drafting = True

    def __init__(self, target, proposer, mode: str, compile_steps: bool | str, verifier=None, adaptive: bool = False,
                 drafter=None, prompt_lookup: bool = False, lookup_in_batches: bool = True,
                 copy_width: int = COPY_WIDTH):
        self.target = target
        self.proposer = proposer
        # adaptive: each round's verify width from measured costs and acceptance (width_policy.py); the proposer
        # drafts its full block and the verify takes a prefix of it, or a plain step (no draft) at width 1.
        self.adaptive = adaptive
        self.drafter = drafter  # the acceptance estimate is carried across calls per (target, drafter)
        self.verifier = verifier  # None: lossless acceptance; a FlyVerifier: FLy's loose (lossy) rule
        self.prompt_lookup = prompt_lookup  # rows copying their own text verify the copy (lookup.py)
        # ... in a batch too (asked for): the default call copies for one prompt only, since a batch's rows share
        # one width and copies slowed batches of 4 in the benchmark (docs/methods.md)
        self.lookup_in_batches = lookup_in_batches
        self.copy_width = copy_width  # rows a verify of copied tokens alone may reach (at least the block's)
        self.mode = mode
        self.compile_steps = compile_steps
        self.width = proposer.block_size
        self.layer_ids = proposer.tapped_layer_ids
        self._verify = StepRunner(self._verify_step, compile_steps, target.device)
        # The prefill needs the logits of the last prompt token only (stock generate asks the same of models that
        # take logits_to_keep): the LM head over every prompt row is a large share of a long prompt's prefill.
        self._cache_key = cache_keyword(target)
        self._last_logits_only = last_logits_only(target)
        self._caches = CachePool(keep=compile_steps, compileable=compile_steps)  # (exact single-row steps: _generate)
        # Linear-attention / conv layers (Qwen3.5, Qwen3-Next, LFM2, ...): snapshotted before each verify and re-fed
        # the committed tokens after it (_roll_back_states); empty for attention-only targets
        self._state_layers = rollback_layer_indices(target)
        self._hybrid_layers = hybrid_layer_indices(target)  # of those, the ones that keep K/V as well
        self._states_per_layer = states_per_recurrent_layer(target)
        self._tree_budgets: list[int] = []  # the width policy's tree budgets (set per call; empty: no tree policy)
        # the target's eager decoding forwards (plain steps, verifies), and the drafter's in a round, run their linears
        # of the kinds narrow_rows.py times on a CPU (set per call by _decide_narrow_rows; None where no kind was
        # timed faster, and off a CPU or compiled)
        self._routes: RoutedLinears | None = None
        self._drafting_routes: RoutedLinears | None = None
        # A compiled decoder serves every later call on its target (graphs and caches reused): calls take turns.
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ target forwards
    def _copies_alone(self, copying: bool, batch: int) -> bool:
        """Whether the call's rounds may verify copied tokens without drafting (CopyingWidthPolicy): one prompt, the
        width policy on, a proposer that drafts blocks or chains (not trees) and catches up on rows it did not
        draft."""
        return (copying and batch == 1 and self.adaptive and not getattr(self.proposer, "drafts_trees", False)
                and hasattr(self.proposer, "commit_plain"))

    def _copy_width(self) -> int:
        """The widest verify of copied tokens alone: ``copy_width`` rows (COPY_WIDTH unless the call set its width:
        a quoted passage runs on past a young drafter's block), at least the block's."""
        return max(self.width, self.copy_width)

    def _verify_step(self, block_ids, positions, mask):
        # block_ids [B, W]; positions [B, W]; mask [B, 1, W, K] (K: the attended cache slots)
        if self._routes is not None:  # never in a compiled step: None there
            with self._routes:  # (each linear takes the library's way for rows no kind taken holds)
                return self._target_verify(block_ids, positions, mask)
        return self._target_verify(block_ids, positions, mask)

    def _drafting_linears(self):
        """The context of the drafter's forwards in a round (drafting, catching up on committed rows): a drafter on the
        target's hidden states (DFlash, EAGLE-3, WhiFlash) runs its linears, and the target's it borrows (DFlash's
        lm_head), by the kinds the target's forwards took (narrow_rows.py). Not timed apart: such a drafter has the
        target's hidden size and runs the machine's same kernels (a one-layer EAGLE-3 chain step is one row; a DFlash
        round's lm_head reads its drafted rows). A separate draft LM (classic, FLy) has sizes of its own, so its
        kinds are timed on its own forwards (_draft_model_routes)."""
        routes = self._drafting_routes if self.routes_drafting else None
        return routes if routes is not None else nullcontext()

    def _target_verify(self, block_ids, positions, mask):
        out = self.target(
            input_ids=block_ids, position_ids=positions, attention_mask=mask, **{self._cache_key: self.cache},
            use_cache=True)
        features = self.tap.features() if self.tap is not None else None  # [B, W, n_taps*H]
        return out.logits, features  # [B, W, V]

    def _verify_block(self, draft, session, logits_processor, do_sample: bool, exact: bool = False) -> RoundResult:
        """draft [B, W] -> every row's verdict; W may vary between rounds (a router switching block sizes). ``exact``:
        no mask of ours (an exact single-row step: ``_generate``)."""
        starts, rows = session.last_slots, draft.shape[1]
        mask = None if exact else session.verify_mask(starts, rows)
        logits, features = self._verify(draft, session.position_block(starts, rows), mask)
        scores = process_block_logits(logits, session, draft, logits_processor)  # [B, W, V]
        if self.verifier is not None:
            decision = self.verifier.decide(draft, logits, scores, do_sample)
            return RoundResult(decision.n_accepted, decision.new_tokens, scores, logits, features,
                               decision.mismatches, decision.rescued)
        n_accepted, new_tokens = accept_block(draft, target_choices(scores, do_sample))
        return RoundResult(n_accepted, new_tokens, scores, logits, features)

    def _verify_tree(self, tree: TreeProposal, session, logits_processor, do_sample: bool) -> RoundResult:
        """One target forward over every row's tree, each row's longest accepted path, its K/V moved to contiguous
        slots; the verify's rows are re-ordered along the path, so the caller handles a tree like a block of
        max_depth + 1 rows. Greedy stays on the device; sampling walks each row's tree on the host."""
        starts = session.last_slots
        logits, features = self._verify(tree.tokens, session.position_block(starts, 1) + tree.depths,
                                        session.tree_mask(starts, tree.ancestors, tree.depths))  # [B, N, V], [B, N, F]
        scores = process_block_logits(logits, session, tree.tokens, logits_processor, row_tokens=tree.path_tokens)
        if do_sample:
            path, n_accepted, new_tokens = self._sample_tree_paths(tree, scores)
        else:
            choices = scores.argmax(dim=-1)  # [B, N]
            path, n_accepted = accept_greedy(tree, choices)  # [B, D+1], [B]
            new_tokens = choices.gather(1, path)  # along the path, the target's choice is the next node's token
        compact_path(self.cache, starts, path)

        def along_path(x):  # [B, N, ...] -> [B, D+1, ...]
            return x.gather(1, path.view(*path.shape, *[1] * (x.dim() - 2)).expand(-1, -1, *x.shape[2:]))

        within = None
        if self._tree_budgets and tree.ranks is not None:  # the width policy's evidence for every budget up to this one
            within = accepted_within_budgets(tree, path, n_accepted, [n for n in self._tree_budgets if n <= len(tree)])
        return RoundResult(n_accepted, new_tokens, along_path(scores), along_path(logits),
                           along_path(features) if features is not None else None, within_budgets=within)

    @staticmethod
    def _sample_tree_paths(tree: TreeProposal, scores: torch.Tensor):
        """Recursive rejection sampling (``tree.accept_sampling``) row by row, on the host: path [B, D+1],
        n_accepted [B], new_tokens [B, D+1] (the path's drafts, then the sampled next token)."""
        batch, width = tree.batch_size, tree.max_depth + 1
        path = torch.zeros((batch, width), dtype=torch.long)
        new_tokens = torch.zeros((batch, width), dtype=torch.long)
        n_accepted = torch.zeros(batch, dtype=torch.long)
        probs = torch.softmax(scores, dim=-1)
        for b in range(batch):
            nodes, next_token = accept_sampling(tree, probs[b], row=b)
            path[b, : len(nodes)] = torch.tensor(nodes)
            drafts = tree.tokens[b, nodes[1:]].tolist()
            new_tokens[b, : len(nodes)] = torch.tensor(drafts + [next_token])
            n_accepted[b] = len(nodes) - 1
        device = tree.tokens.device
        return path.to(device), n_accepted.to(device), new_tokens.to(device)

    # ------------------------------------------------------------------ the call
    def generate(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, generation_config,
                 logits_processor, stopping_criteria, streamer=None, max_cache_len: int | None = None):
        with self._lock, torch.no_grad():
            return self._generate(input_ids, attention_mask, generation_config, logits_processor, stopping_criteria,
                                  streamer, max_cache_len)

    def _generate(self, input_ids, attention_mask, generation_config, logits_processor, stopping_criteria, streamer,
                  max_cache_len):
        target, width = self.target, self.width
        batch, prompt_len = input_ids.shape
        self._measuring_spent = 0.0  # seconds this call has spent timing verifies (_measure_verify_costs)
        stop = StopRule(generation_config, stopping_criteria, prompt_len, input_ids.device,
                        getattr(target.config, "max_position_embeddings", None))
        margin = getattr(self.proposer, "cache_margin", 0)
        copying = self.prompt_lookup and (batch == 1 or self.lookup_in_batches)
        widest = self._copy_width() if self._copies_alone(copying, batch) else width  # rows of the widest verify
        capacity = _required_capacity(prompt_len, stop.max_new_tokens, widest + margin, self.compile_steps,
                                      max_cache_len)
        check_target(target, capacity, reads_hidden_states=bool(self.layer_ids), prompt_len=prompt_len)
        reason = rollback_mode_reason(target, getattr(self.proposer, "drafts_trees", False))
        padded_prefill = bool(self._state_layers) and attention_mask is not None and not bool(attention_mask.all())
        reason = reason or (padded_prefill_reason(target) if padded_prefill else None)
        check_processors(logits_processor)
        if reason:
            raise ValueError(f"speculative_mode={self.mode!r} cannot decode model type {model_type(target)!r} "
                             f"({type(target).__name__}) exactly: {reason}.")
        do_sample = bool(generation_config.do_sample)
        want_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
        want_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
        scores_out, logits_out = [], []

        dtype = target.get_input_embeddings().weight.dtype
        session = DecodingSession(input_ids, attention_mask, capacity, width, dtype, attention_layout(target))
        # Exact single-row steps: at batch 1, eager, without padding, on an attention-only target whose layers share
        # one mask, the prefill and every one-row verify (a plain step) pass no mask of ours and attend exactly the
        # keys written so far, so transformers builds the mask as in stock generate (none where it is plain causal)
        # and the attention kernel takes stock's path, where ours (the KV heads repeated, a mask over a bucket of
        # slots) takes another and rounds differently (single_row_steps_as_stock)
        exact_steps = (not self.compile_steps and batch == 1 and session.target_layout is None
                       and not self._state_layers and (attention_mask is None or bool(attention_mask.all()))
                       and single_row_steps_as_stock(input_ids.device, dtype))
        self.cache = self._caches.get(capacity, len(decoder_layers(target)), batch, input_ids.device,
                                      self._state_layers, self._hybrid_layers, self._states_per_layer)
        session.attach(self.cache)
        # Eager steps attend only the slots in use: every slot a round may write is below the longest row's
        # last slot + the round's verified rows + the proposer's margin when it drafts (compiled steps keep the
        # capacity: one shape). A plain step of the width policy so attends no slot for a block it does not draft.
        show = (lambda rows=width: None) if self.compile_steps else (
            lambda rows=width: session.show(max(session.host_lengths) + rows + (margin if rows > 1 else 0)))
        stats = SpeculativeStats(mode=self.mode, block_size=width, lossy=self.verifier is not None, batch_size=batch)
        clock = RoundClock(target.device)
        if streamer is not None:
            streamer.put(input_ids.cpu())
        active = torch.ones(batch, dtype=torch.bool, device=input_ids.device)
        active_rows = list(range(batch))
        # prompt lookup, and whether every active row's next round has a copy at hand
        copy_next, copy_agreement = [False], [0]
        target_sure = [False]  # a plain round's: whether the target gave every active row's token SURE_PROBABILITY+
        lookup = PromptLookup.for_device(input_ids.device, max(widest, width) - 1) if copying else None

        def commit(result: RoundResult, counts: torch.Tensor, unused_copy: bool = False, reads_sure: bool = False):
            """Append each active row's kept tokens, judge stopping, and read the round's numbers to the host (the
            round's one transfer): returns them ([kept, done, n_accepted, (FLy: mismatches, rescued), (prompt
            lookup: each row's next round having a copy at hand, and with ``unused_copy`` how many of this round's
            tokens the copy it did not verify matched), (``reads_sure``, a plain round: whether the target gave the
            row's token SURE_PROBABILITY or more), (a tree's accepted drafts within each budget)], each per row) and
            the rows still active."""
            per_row = result.within_budgets
            agreement = [lookup.agreement_of_unused_copy(session, result.new_tokens)] if unused_copy else []
            kept, done = stop.judge(session, result.new_tokens, counts, active)
            first_new = list(session.host_lengths)
            extras = [x for x in (result.n_accepted, result.mismatches, result.rescued) if x is not None]
            session.append_on_device(result.new_tokens, kept)
            # each row's next round having a copy at hand (and the unused copy's agreement) ride the same read
            copies = [lookup.copies_next(session), *agreement] if lookup is not None else []
            sure = [result.scores[:, 0].float().log_softmax(-1).amax(-1) >= LOG_SURE] if reads_sure else []
            numbers = torch.cat([torch.stack([kept, done.long(), *extras, *copies, *(s.long() for s in sure)]),
                                 *([per_row.T] if per_row is not None else [])]).tolist()
            kept_host, done_host = numbers[0], numbers[1]
            session.advance_host_lengths(kept_host)
            stop.warn_past_positions(max(first_new), max(session.host_lengths))
            finished = {b for b in active_rows if done_host[b]}
            if stop.extra:
                for b, length in stop.judge_extra(session, active_rows, first_new).items():
                    session.lengths[b] = length
                    session.host_lengths[b] = length
                    kept_host[b] = length - first_new[b]
                    finished.add(b)
            for b in finished:
                active[b] = False
            if want_scores:
                scores_out.extend(result.scores[0, : kept_host[0]].unbind(0))
            if want_logits:
                logits_out.extend(result.logits[0, : kept_host[0]].float().unbind(0))
            if streamer is not None:
                streamer.put(result.new_tokens[0, : kept_host[0]].cpu())
            still_active = [b for b in active_rows if b not in finished]
            if copies:
                copy_next[0] = all(numbers[2 + len(extras)][b] for b in still_active)
                copy_agreement[0] = numbers[3 + len(extras)][0] if unused_copy else 0
            if sure:
                target_sure[0] = all(numbers[2 + len(extras) + len(copies)][b] for b in active_rows)
            return numbers, still_active

        try:
            with tapped(target, self.layer_ids) as tap:
                self.tap = tap
                # ---------------- prefill: the prompt, and the first new token of every row
                t0 = clock.mark()
                # the prefill writes the prompt's slots only: attending a block's slots past them costs keys, and in
                # bf16 another key count can round a near-tie apart from what a plain call (same keys) decodes
                if exact_steps:  # no mask of ours, the prompt's keys only
                    session.show_exactly(prompt_len)
                    prefill_mask = None
                else:
                    show(0)
                    prefill_mask = session.prefill_mask()
                    if padded_prefill:  # recurrent layers take the 2D padding mask (stock generate passes the same)
                        prefill_mask = layer_masks(target, prefill_mask, attention_mask)
                self._set_prefill_routes(session.device, dtype)
                with self._routes or nullcontext():
                    prefilled = self._prefill_without_padding(input_ids, attention_mask, session, tap)
                    if prefilled is None:
                        out = target(input_ids=input_ids, position_ids=session.positions[:, :prompt_len],
                                     attention_mask=prefill_mask, **{self._cache_key: self.cache}, use_cache=True,
                                     **self._last_logits_only)
                        prefilled = out.logits[:, -1:], tap.features() if tap is not None else None
                last_logits, prompt_features = prefilled  # [B, 1, V]; [B, P, n_taps*H] or None
                scores = process_block_logits(last_logits, session, input_ids[:, -1:], logits_processor)
                first = target_choices(scores, do_sample)  # [B, 1]
                zero = torch.zeros(batch, dtype=torch.long, device=input_ids.device)
                _, active_rows = commit(RoundResult(zero, first, scores, last_logits, None), zero + 1)
                observe = getattr(self.proposer, "observe", None)  # routers read the target at the newest token
                trims_context = getattr(self.proposer, "takes_any_context_rows", False)
                if active_rows:
                    self.proposer.start(session, prompt_features)
                    if observe is not None:
                        observe(last_logits[:, -1], prompt_features[:, -1], active_rows)
                if active_rows:
                    self._decide_narrow_rows(session, show, dtype)
                policy = self._width_policy(session, show, copying) if self.adaptive and active_rows else None
                segments = [(policy, 0)]  # each policy of the call and its first round (dropping rows changes it)
                # An eager batch drops its finished rows (below), with a proposer that keeps per-row state it can
                # drop (a router too: its votes are the unfinished rows'); not FLy (its verifier), nor where row 0
                # is streamed or scored
                drops_rows = (not self.compile_steps and hasattr(self.proposer, "keep_rows")
                              and self.verifier is None and batch > 1 and streamer is None
                              and not (want_scores or want_logits))
                finished_rows = FinishedRows(session)
                takes_width = getattr(self.proposer, "drafts_any_width", False)
                token_by_token = getattr(self.proposer, "drafts_token_by_token", False)
                # a token-by-token drafter on a CPU (an EAGLE-3 chain, a draft LM, WhiFlash's EAGLE-3 rounds) stops
                # drafting when unsure, and the round verifies what its drafts are worth (WidthPolicy.confident_width;
                # a host read per draft, which costs nothing on a CPU); not FLy, whose verifier keeps drafts exact
                # verification would refuse (mixin.stops_when_unsure decides when it builds the proposer)
                stops_unsure = policy is not None and getattr(self.proposer, "stops_when_unsure", False)
                call_tokens, decode_started = 0, time.perf_counter()  # the call's rate so far, for confident_width
                t1 = clock.mark()

                # ---------------- decode rounds
                rounds = []  # per round: its clock marks (read once, after the call)
                while active_rows:
                    r0 = clock.mark()
                    looked_up = False  # whether this round's block holds copied tokens (prompt lookup)
                    copied_in = False  # whether a row may verify copies in place of its drafter's drafts
                    round_started = time.perf_counter()  # after the last round's host sync: its whole clock
                    if policy is not None and batch > 1:  # a batch's width pays until its slowest row is done
                        policy.set_rows([session.row_ids[b] for b in active_rows],
                                        [stop.max_new_tokens - (session.host_lengths[b] - prompt_len)
                                         for b in active_rows], drops_rows)
                    # whether every row has a copy at hand is known from the last read: the policy may keep such
                    # rounds apart (CopyingWidthPolicy, RoutedWidthPolicy)
                    # the rows the drafter reads before it drafts again (the prompt's, plain steps'): a probe after
                    # plain steps costs that read too
                    unread = getattr(self.proposer, "unread_rows", 0)
                    if policy is not None:
                        policy.set_unread(unread)
                    round_width = policy.choose(copying=copy_next[0]) if policy is not None else None
                    copies_alone = getattr(policy, "copies_alone", False)  # verify the copy, draft nothing
                    timing = False  # this round drafts the whole block, for the policy to time
                    drafted = round_width != 1 and not copies_alone  # the drafter drafted this round
                    trimmed = False  # it drafted more rows than the round verifies (a chain that stopped unsure)
                    show(round_width or width)
                    if round_width == 1:  # a plain step: verify the last committed token alone, draft nothing
                        draft = session.token_block(session.last_slots, 1)
                    elif copies_alone:
                        draft = lookup.copy_block(session, round_width)
                    else:
                        timing = policy is not None and policy.needs_draft_timing and len(rounds) >= 1
                        if timing:
                            if token_by_token:  # it drafts the whole block, one slot per draft (a DFlash block's
                                show()  # slots are the margin every drafting round shows)
                            draft_started = self._synced_time()
                        # [B, W] (or [W] at batch 1), or a TreeProposal; a proposer that drafts any width is told
                        # the round's (drafting as for the whole block while the policy times that)
                        # (not while drafting is untimed: those rounds draft whole; nor in a probe, which tests
                        # the text at the width the policy chose: trimmed by the drafter's doubts, a probe on
                        # GSM8K after other kinds of text passed too rarely, and drafting resumed late)
                        unsure = stops_unsure and not policy.needs_draft_timing and not policy.probing
                        if unsure:  # the drafter's doubts end its drafts, the rounds' average no longer does
                            wider = policy.unsure_drafting_width(round_width)
                            if wider != round_width:
                                round_width = wider
                                show(round_width)  # (every slot its drafting may write)
                        with self._drafting_linears():
                            draft = (self.proposer.propose(round_width, whole_block=timing,
                                                           **({"stop_below": UNSURE_STOP} if unsure else {}))
                                     if round_width is not None and takes_width else self.proposer.propose())
                        if timing:
                            policy.timed_draft(self._synced_time() - draft_started)
                        if policy is not None:  # this round's drafting clock holds that read
                            policy.note_read(len(stats.round_widths))
                        confidences = self.proposer.confidences if unsure else None  # None: a DFlash round's
                        if confidences is not None:
                            spent = time.perf_counter() - decode_started
                            drafted_rows = confidences.shape[1] + 1
                            round_width = policy.confident_width(
                                round_width, confidences[active_rows].tolist(),
                                call_tokens / spent if call_tokens else None)
                            trimmed = round_width != drafted_rows
                            if trimmed:
                                policy.drafted_rows[len(stats.round_widths)] = drafted_rows
                            show(round_width)
                        if round_width is not None and not isinstance(draft, TreeProposal):
                            draft = (draft if draft.dim() == 2 else draft[None])[:, :round_width]
                        if (lookup is not None and not isinstance(draft, TreeProposal) and round_width != 1
                                and getattr(policy, "overlays_copies", True)):  # (a drafted round verifying 1 row)
                            block = draft if draft.dim() == 2 else draft[None]
                            draft = lookup.overlay(block, session)
                            looked_up = True
                            copied_in = draft is not block  # (a CPU's lookup hands back a block it left alone)
                    r1 = clock.mark()
                    # a plain step commits its one row: nothing to roll back
                    saved_states = snapshot_states(self.cache) if self._state_layers and round_width != 1 else None
                    starts = session.last_slots
                    if isinstance(draft, TreeProposal):
                        result = self._verify_tree(draft, session, logits_processor, do_sample)
                    else:
                        draft = draft if draft.dim() == 2 else draft[None]
                        exact = exact_steps and draft.shape[1] == 1
                        if exact:
                            session.show_exactly(session.host_lengths[0])  # the committed tokens' keys
                        result = self._verify_block(draft, session, logits_processor, do_sample, exact)
                        if exact:
                            show(1)  # what follows (the drafter's bookkeeping) attends as after any plain step
                    r2 = clock.mark()
                    if looked_up:  # who was right where the copy and the drafter's block differed
                        lookup.learn(result.n_accepted, result.new_tokens, active)
                    # Row b's cache keeps its verified rows up to the last accepted draft; done rows keep theirs.
                    counts = torch.where(active, result.n_accepted + 1, 0)  # [B] tokens each row commits
                    if self._state_layers:
                        result, counts = self._commit_evenly(result, counts, active)
                    set_cache_length(self.cache, session.last_slots + counts)
                    # a round with a copy at hand that verified the drafter's block or a plain step: what the copy
                    # would have kept is read with the round's numbers, for the copy's estimate
                    unused_copy = copy_next[0] and not copies_alone and hasattr(policy, "observe_unused_copy")
                    # a plain round reads whether the target was sure of its token: sure ones in a row call a probe
                    reads_sure = policy is not None and round_width == 1
                    # (the new tokens are in the session after this)
                    numbers, still_active = commit(result, counts, unused_copy, reads_sure)
                    features = result.features
                    if features is not None and self.compile_steps:
                        features = features.clone()  # a graph replay (or the re-feed below) would overwrite it
                    refed = bool(self._state_layers and still_active) and self._roll_back_states(
                        saved_states, draft, starts, numbers, still_active, session)
                    if features is not None and trims_context and not self.compile_steps:
                        # Eager steps take any number of context rows: hand over only up to the longest commit.
                        features = features[:, : max(1, max(numbers[2][b] + 1 for b in active_rows))]
                    with self._drafting_linears():
                        if copies_alone:  # the drafter catches up on the committed rows, as after plain steps
                            rows = numbers[2][0] + 1
                            self.proposer.commit_plain(features[:, :rows] if features is not None else None, counts,
                                                       rows)
                        elif not drafted:
                            self.proposer.commit_plain(features, counts)
                        else:  # (a round that drafted, then verified one row too: its drafter moves on as after any)
                            self.proposer.commit(features, counts)
                            kept = getattr(self.proposer, "commit_accepted", None)
                            if kept is not None:  # a draft LM: which committed rows its cache has read
                                kept(max(numbers[2][b] for b in active_rows), copied=copied_in)
                    if policy is not None:
                        # a round in which a row stopped (EOS, max_new_tokens) may have committed fewer tokens than
                        # it accepted: no measure of what its width delivers
                        # (nor a round that drafted the whole block for the policy's timing)
                        # (nor one whose drafts outnumber its verified rows: its clock is no round of its width)
                        seconds = time.perf_counter() - round_started if (
                            len(still_active) == len(active_rows) and not timing and not trimmed) else None
                        if timing:
                            policy.whole_block_rounds.add(len(stats.round_widths))
                        if refed:
                            policy.refed_rounds.add(len(stats.round_widths))
                        within = None  # a tree's {budget: each active row's drafts kept within it}
                        if result.within_budgets is not None:  # its columns: the first of the tree budgets
                            reported = result.within_budgets.shape[1]
                            within = {n: [row[b] for b in active_rows]
                                      for n, row in zip(self._tree_budgets[:reported], numbers[-reported:])}
                        # a router's drafter may verify fewer rows than the round's width (an EAGLE-3 chain
                        # beside a longer DFlash block): the acceptance counts the rows it verified
                        verified = round_width if isinstance(draft, TreeProposal) else min(round_width,
                                                                                            draft.shape[-1])
                        policy.observe(round_width, [numbers[2][b] for b in active_rows], seconds, within, verified)
                        if unused_copy:  # (the verified tokens, a stopping row's included, are the target's)
                            policy.observe_unused_copy(copy_agreement[0], numbers[2][0] + 1)
                        if reads_sure:
                            policy.observe_sure(target_sure[0])
                        stats.round_widths.append(round_width)
                    if observe is not None and still_active:  # each row's newest committed token
                        rows, newest = torch.arange(session.batch_size, device=result.logits.device), result.n_accepted
                        observe(result.logits[rows, newest], features[rows, newest], still_active)
                    stats.add_round([numbers[2][b] + 1 for b in active_rows],
                                    [session.row_ids[b] for b in active_rows],  # the rows' places in the batch
                                    *([[numbers[i][b] for b in active_rows] for i in (3, 4)]
                                      if result.mismatches is not None else []))
                    stats.round_batch_sizes.append(session.batch_size)
                    call_tokens += sum(numbers[2][b] + 1 for b in active_rows)
                    rounds.append((r0, r1, r2, clock.mark()))
                    active_rows = still_active
                    if drops_rows and 0 < len(active_rows) < session.batch_size:
                        # Later rounds compute only the rows still going (stock generate computes finished rows to
                        # the end): a batch's call lasts as long as its slowest row, and the rows that remain
                        # cost less each round. Copying the caches' rows costs a few percent of a round. Once the
                        # rows fit a smaller batch bucket, the policy takes that bucket's costs.
                        bucket = batch_bucket(session.batch_size)
                        self._drop_finished_rows(session, finished_rows, active_rows)
                        active = torch.ones(len(active_rows), dtype=torch.bool, device=active.device)
                        active_rows = list(range(len(active_rows)))
                        if policy is not None and batch_bucket(session.batch_size) != bucket:
                            policy = self._policy_for_fewer_rows(policy, session, show)
                            segments.append((policy, len(stats.round_widths)))
                t2 = clock.mark()
        finally:
            self.tap = None
            if streamer is not None:
                streamer.end()

        clock.finish()
        stats.prefill_time = clock.seconds(t0, t1)
        stats.decode_time = clock.seconds(t1, t2)
        for r0, r1, r2, r3 in rounds:
            stats.add_round_times(clock.seconds(r0, r1), clock.seconds(r1, r2), clock.seconds(r0, r3))
        # each policy of the call (dropped rows change the batch bucket) learns from the rounds it chose
        for i, (segment_policy, first) in enumerate(segments):
            if segment_policy is not None:
                end = segments[i + 1][1] if i + 1 < len(segments) else len(stats.round_widths)
                segment_policy.learn_costs(stats.round_widths, stats.round_seconds, stats.round_draft_seconds,
                                           range(first, end))
        tokens, lengths = finished_rows.all_rows(session)
        stats.row_new_tokens = [length - prompt_len for length in lengths]
        stats.new_tokens = sum(stats.row_new_tokens)
        stats.draft_forwards = getattr(self.proposer, "forward_calls", stats.num_rounds)
        stats.lookup_drafts = int(lookup.taken_rows) if lookup is not None else 0  # (the call's one more read)
        for name, value in getattr(self.proposer, "round_records", dict)().items():
            setattr(stats, name, list(value))
        sequences = self._sequences(tokens, lengths, generation_config, stop)
        if not generation_config.return_dict_in_generate:
            return sequences
        return SpeculativeGenerateOutput(
            sequences=sequences,
            scores=tuple(s[None] for s in scores_out) if want_scores else None,
            logits=tuple(lg[None] for lg in logits_out) if want_logits else None,
            speculative_stats=stats,
        )

    def _prefill_without_padding(self, input_ids, attention_mask, session: DecodingSession, tap):
        """A left-padded batch on a CPU prefilled in groups of rows of like length (prefill.py), where that pays:
        the last prompt token's logits [B, 1, V] and the taps' features [B, P, F] (or None); None for the padded
        prefill (one row, no padding, a GPU, recurrent layers, or no grouping that saves enough)."""
        batch, prompt_len = input_ids.shape
        if (batch == 1 or attention_mask is None or input_ids.device.type != "cpu" or self._state_layers
                or not prefills_in_groups(self.target)):
            return None
        # each row's real tokens, and how many of them end the row (all of them: left padding), in one read
        lengths, suffixes = torch.stack([attention_mask.sum(-1), attention_mask.flip(-1).cumprod(-1).sum(-1)]).tolist()
        if lengths != suffixes or min(lengths) == prompt_len:
            return None
        # (keyed as the width policy's costs are: the session's device and the target's dtype)
        overhead = forward_overhead_tokens(self.target, session.device, session.mask_dtype, self._cache_key,
                                           self._last_logits_only)
        groups = prefill_groups(lengths, overhead)
        if len(groups) == 1:
            return None
        prefilled = prefill_in_groups(self.target, groups, lengths, input_ids, attention_mask, session.positions,
                                      self.cache, tap, self._cache_key, self._last_logits_only)
        if prefilled is None:  # a layer kept no K/V of its own: this target prefills its batches padded
            return None
        set_cache_length(self.cache, prompt_len)
        return prefilled

    # ------------------------------------------------------------------ recurrent layers
    @staticmethod
    def _commit_evenly(result: RoundResult, counts: torch.Tensor, active: torch.Tensor):
        """Every active row commits as many tokens as the row that accepted fewest (on the device; [B] counts).

        A recurrent state is rolled back by re-feeding the committed tokens in one forward of one width, so every
        row must commit the same number. Committing fewer of a row's verified tokens stays exact: each kept token is
        the target's own choice after its prefix, and where a row is cut depends only on the other rows' drafts
        (independent of this row's samples); the dropped ones are decoded again in the next round.
        """
        fewest = torch.where(active, counts, counts.max()).min()
        counts = torch.where(active, fewest, 0)
        return replace(result, n_accepted=torch.where(active, fewest - 1, result.n_accepted)), counts

    def _roll_back_states(self, saved_states, draft, starts, numbers, active_rows, session) -> bool:
        """After a verify of W rows of which each active row committed c: the recurrent layers hold the state after
        all W rows, so put back the state from before the verify and re-feed the c committed rows (the last committed
        token, then the accepted drafts), over the same cache slots and masks (attention rows are rewritten with the
        same values). The verify's features stay the ones handed to the drafter (eager taps concatenate into a new
        tensor; compiled steps clone them before this). The re-feed runs eagerly also when the steps are compiled:
        its width changes every round, and a graph per width would be a compile per round width. Returns whether it
        re-fed."""
        committed = numbers[2][active_rows[0]] + 1  # the same for every active row (_commit_evenly)
        if committed >= draft.shape[-1] or saved_states is None:
            return False  # every verified row was committed: the states are already right
        restore_states(self.cache, saved_states)
        set_cache_length(self.cache, starts)
        block = (draft if draft.dim() == 2 else draft[None])[:, :committed]
        self._verify_step(block, session.position_block(starts, committed), session.verify_mask(starts, committed))
        set_cache_length(self.cache, session.last_slots)
        return True

    # ------------------------------------------------------------------ the width policy
    def _synced_time(self) -> float:
        if self.target.device.type == "cuda":
            torch.cuda.synchronize()  # only while the policy times the drafter once (first call per cost key)
        return time.perf_counter()

    def _width_policy(self, session: DecodingSession, show, copying: bool) -> WidthPolicy | RoutedWidthPolicy:
        """The call's policy: the target's cost table for this device / dtype / batch bucket (measured now, over this
        call's own cache, if the table lacks a width) and the acceptance carried over from earlier calls. A router
        whose drafters both draft any width (WhiFlash with an EAGLE-3 chain) gets a policy per drafter, and each
        round's drafter is chosen among them (``RoutedWidthPolicy``). ``copying``: the call verifies copied tokens,
        whose rounds keep an acceptance estimate of their own (``COPIED``): one prompt's rounds with a copy at hand may
        verify it alone (``CopyingWidthPolicy``), WhiFlash's choose their drafter and width under that context."""
        drafters = getattr(self.proposer, "proposers", None)
        if drafters is None or not getattr(self.proposer, "drafts_any_width", False):
            # FLy's loose rule accepts more than the exact one, and more the looser its settings: its estimate is
            # kept apart from the same drafter's exact rounds, per setting
            verifier = self.verifier
            context = ("" if verifier is None
                       else f"fly W={verifier.window} theta={verifier.theta:g} {verifier.sampling_rule}")
            policy = self._drafter_policy(self.proposer, self.width, session, show,
                                          lambda fresh: call_acceptance(self.target, self.drafter, fresh, context))
            return self._with_copies(policy, policy.costs, session, show, copying)
        votes = tuple(drafters)
        # the round's context: the router's vote, and whether its rows verify copies (RoutedWidthPolicy.context)
        contexts = list(votes) + ([f"{vote}|{COPIED}" for vote in votes] if copying else [])
        estimates, pooled = {name: {} for name in drafters}, {}

        def acceptance(name):
            def per_vote(fresh):  # the drafter's estimate over all its rounds and in each context (the first leads)
                pooled[name] = call_acceptance(self.target, self.drafter, fresh.carried(), name)
                for context in contexts:
                    estimates[name][context] = call_acceptance(self.target, self.drafter, fresh.carried(),
                                                               f"{name}|{context}")
                return estimates[name][votes[0]]
            return per_vote

        policies = {}
        for name, proposer in drafters.items():
            policies[name] = self._drafter_policy(proposer, proposer.block_size, session, show, acceptance(name),
                                                  rivals=True)
        fixed = self.proposer.settings.router if self.proposer.settings.router in drafters else None
        routed = RoutedWidthPolicy(policies, estimates, pooled, self.proposer.vote, self.proposer.use_drafter, fixed)
        return self._with_copies(routed, next(iter(policies.values())).costs, session, show, copying)

    def _policy_for_fewer_rows(self, policy, session: DecodingSession, show):
        """The call's policy once dropped rows put the batch in a smaller bucket: that bucket's costs (timed in one
        pass where the table lacks them), the same acceptance estimates; a router's (``RoutedWidthPolicy``) keeps its
        call's state (the votes' plain streaks, the call's opening), each drafter's policy made anew."""
        def narrower(proposer, old: WidthPolicy, width: int, **kwargs) -> WidthPolicy:
            return self._drafter_policy(proposer, width, session, show, lambda fresh, kept=old.acceptance: kept,
                                        quick=True, draft_fallback=old.whole_block_draft_seconds, **kwargs)

        if not isinstance(policy, RoutedWidthPolicy):
            return narrower(self.proposer, policy, self.width)
        policies = {}
        for name, proposer in self.proposer.proposers.items():
            policies[name] = narrower(proposer, policy.policies[name], proposer.block_size, rivals=True)
        return policy.with_policies(policies)

    def _with_copies(self, policy, costs, session: DecodingSession, show, copying: bool):
        """``policy``, or for one prompt that copies a CopyingWidthPolicy over it, whose rounds with a copy at hand
        may verify the copy alone (its verify costs kept in ``costs``, the target's table)."""
        if not self._copies_alone(copying, session.batch_size):
            return policy
        widths = width_buckets(self._copy_width(), self.compile_steps)
        self._measure_verify_costs(costs, widths, session, show)
        copied = call_acceptance(self.target, self.drafter, AcceptanceEstimate(widths[-1]), COPIED)
        return CopyingWidthPolicy(policy, WidthPolicy(widths, costs, copied, drafts=False,
                                                      refeeds=bool(self._state_layers)))

    def _drafter_policy(self, proposer, width: int, session: DecodingSession, show, acceptance,
                        quick: bool = False, draft_fallback: float | None = None,
                        rivals: bool = False) -> WidthPolicy:
        """The width policy of one proposer drafting blocks of up to ``width`` rows; ``acceptance(fresh estimate)``
        gives the call's estimate. Its cost table takes the verify costs it lacks from other drafters' tables of the
        same target forward (``CostModel.table_sharing_verifies``: a router's other drafter in this call, or another
        drafter's earlier calls). ``quick``: costs the table still lacks are timed in one pass
        (``_measure_verify_costs``). ``draft_fallback``: the drafting cost to choose by where the table has
        none (WidthPolicy.draft_fallback). ``rivals``: the proposer is one of a router's drafters, whose policies'
        best rates are compared round by round (RoutedWidthPolicy)."""
        token_by_token = getattr(proposer, "drafts_token_by_token", False)
        # (not a router's chain: rated over every width, WhiFlash's EAGLE-3 side outbid DFlash's blocks on the tiny
        # world's math, its estimate of deep slots drawn from the rounds in which it was sure enough to reach them;
        # 4.6 ms a token where the buckets' rounds took 2.6-3.9)
        widths = width_buckets(width, self.compile_steps, every_width=token_by_token and not rivals)
        # Verified whole, or a plain step: a router's tree; and FLy's block, since its rule keeps a mismatch only with
        # W matching drafts after it, so a prefix loses the rescues FLy is for (on the tiny world a prefix chosen as
        # for exact rounds committed 3.2 tokens a round where the whole block committed 4.2)
        router_tree = not getattr(proposer, "drafts_any_width", False) and getattr(proposer, "drafts_trees", False)
        if router_tree or self.verifier is not None:
            widths = (1, width)
        proposer.verify_widths = set(widths)  # the drafter keeps one graph per width its context can have
        if self.compile_steps:
            build_drafting_graphs(proposer)
        # the DFlash block's drafting cost is kept under the bare key (as saved before other drafters adapted), a
        # drafter's with a draft vocabulary (a smaller lm_head product) under its own
        head_by_width = getattr(proposer, "drafts_head_by_width", False)
        drafter_kind = proposer.head.cost_kind if head_by_width else type(proposer).__name__
        table = costs_of(self.target).table_sharing_verifies(cost_key(session.device, session.mask_dtype,
                                                                      session.batch_size, self.compile_steps,
                                                                      drafter_kind))
        self._measure_verify_costs(table, widths, session, show, quick)
        if table.draft_head is None and head_by_width and not self.compile_steps:
            # the lm_head over the block's W - 1 drafted rows: what a narrower round's drafting skips
            head = proposer.head
            rows = torch.zeros(session.batch_size, width - 1, head.weight.shape[1], dtype=head.weight.dtype,
                               device=head.weight.device)
            table.draft_head = measure_verify_costs(lambda w: head(rows), (width,), session.device,
                                                    **self._quick_timing(quick))[width]
        # a proposer whose trees' node budget the policy chooses (not a router's tree, verified whole)
        depth = getattr(proposer, "depth", None) if getattr(proposer, "drafts_trees", False) else None
        fresh = AcceptanceEstimate(width) if depth is None else TreeAcceptanceEstimate(widths, depth)
        self._tree_budgets = [w for w in widths if w > 1] if depth is not None else []
        if depth is not None:  # a tree of w nodes drafts min(depth, w - 1) levels
            share = lambda w: proposer.levels(w) / depth  # noqa: E731
        elif token_by_token:  # w - 1 draft forwards
            share = lambda w: (w - 1) / max(width - 1, 1)  # noqa: E731
        else:
            share = None
        # a call of one prompt opens with a probe where plain steps are expected (not a batch, nor a batch that shrank)
        return WidthPolicy(widths, table, acceptance(fresh), share, refeeds=bool(self._state_layers),
                           opening_probe=session.batch_size == 1 and not quick, draft_fallback=draft_fallback)

    def _quick_timing(self, quick: bool) -> dict:
        """A call whose batch shrank into a bucket the table lacks times that bucket's forwards in the middle of the
        call, where every second spent is the user's: one timed pass and no warm-up (these eager shapes already ran
        at the larger batch), about a quarter of the first call's timing; the rounds' clock refines it."""
        return dict(warmups=0, budget=0.0) if quick and not self.compile_steps else {}

    def _measure_verify_costs(self, table, widths: tuple[int, ...], session: DecodingSession, show,
                              quick: bool = False) -> None:
        """Time the target's verify at each of ``widths`` the cost table lacks, over this call's own cache
        (``quick``: one pass, see ``_quick_timing``). Compiled steps also run every width whose graph this cache has
        not run yet, where the costs are known (an earlier cache, or ``load_costs``): a width first chosen later in
        the call would compile there."""
        missing = tuple(w for w in widths if w not in table.verify)
        built = built_widths(self.cache) if self.compile_steps else set(widths)
        unbuilt = tuple(w for w in widths if w not in built and w not in missing)
        if not missing and not unbuilt:
            return
        run_verify, finish = self._timing_verify(session, show)
        for w in unbuilt:
            for _ in range(BUILDING_CALLS):
                run_verify(w)
        if missing:
            started = time.perf_counter()
            if self.compile_steps:  # its warm-ups compile (and record CUDA graphs): then a budget of its own
                timing = dict(warmups=BUILDING_CALLS)
            else:  # one budget for all of an eager call's timings, their warm-ups in it (MEASURE_BUDGET_SECONDS)
                timing = self._quick_timing(quick) or dict(
                    warmups_in_budget=True, budget=max(0.0, MEASURE_BUDGET_SECONDS - self._measuring_spent))
            table.verify.update(measure_verify_costs(run_verify, missing, session.device, **timing))
            self._retime_dear_widths(table, missing, run_verify, session.device)
            self._measuring_spent += time.perf_counter() - started
        built.update(widths)
        finish()

    @staticmethod
    def _retime_dear_widths(table, measured: tuple[int, ...], run_verify, device: torch.device) -> None:
        """Time again, up to RETIMINGS times, each width just measured that reads DEAR_MARGIN times dearer than a
        wider one in the table, keeping its fastest timing. A verify of fewer rows does no more work, so this is
        mostly a stall in its only timed pass (the tiny world's EAGLE-3 widths 3 and 6 once read 1.70 and 1.76 plain
        steps beside 1.13 and 1.27 for 4 and 8, bf16, a data job on the other core), and a width that reads dear is
        seldom chosen, so the rounds' clocks would never correct it. A width that stays dear (a kernel that really
        is slower there) keeps what it measured."""
        for _ in range(RETIMINGS):
            dear = tuple(w for w in measured if any(table.verify[w] > DEAR_MARGIN * seconds
                                                    for v, seconds in table.verify.items() if v > w))
            if not dear:
                return
            again = measure_verify_costs(run_verify, dear, device, warmups=0, budget=0.0)
            for w, seconds in again.items():
                table.verify[w] = min(table.verify[w], seconds)

    def _timing_verify(self, session: DecodingSession, show):
        """(run_verify(w): a verify of w rows over the call's cache, each row's last token repeated, writing K/V past
        the committed slots only; finish(): rolls the cache back to the committed slots, once timing is done)."""
        starts = session.last_slots
        last = session.token_block(starts, 1)
        saved_states = snapshot_states(self.cache) if self._state_layers else None

        def run_verify(w):
            show(w)
            self._verify(last.expand(-1, w), session.position_block(starts, w), session.verify_mask(starts, w))
            if saved_states is not None:
                restore_states(self.cache, saved_states)

        return run_verify, lambda: set_cache_length(self.cache, starts)

    def _set_prefill_routes(self, device: torch.device, dtype: torch.dtype) -> None:
        """``self._routes`` for the prefill's target forward: its linears by the kinds of narrow_rows.KINDS that this
        process already timed faster for this target, device and dtype (on the AMD EPYC of docs/width-policy.md a
        prompt of 128-512 tokens prefilled 1.7-1.9x as fast over packed weights in fp32 and 1.03-1.09x in bf16, the
        bf16 logits to the bit). A call's own timing needs its cache, so comes after its prefill: the first call of a
        process prefills the library's way, as does any call where no kind was timed faster. Where nothing is left to
        time, _decide_narrow_rows keeps these routes for the call's decoding forwards."""
        decided, kinds = costs_of(self.target).narrow_rows, kinds_for(device, dtype, bool(self.compile_steps))
        taken = tuple(k for k in kinds if decided.get((str(device), k.name)))
        self._routes = None
        if not taken:
            return
        linears = routable_linears(self.target)
        if any(k.way == "packed" for k in taken) and not pack_linears(linears, dtype):
            taken = tuple(k for k in taken if k.way != "packed")  # the copies no longer fit in memory
        self._routes = RoutedLinears(linears, taken) if taken else None

    def _decide_narrow_rows(self, session: DecodingSession, show, dtype: torch.dtype) -> None:
        """Which kinds of narrow_rows.KINDS this call's eager target forwards take on a CPU (fp32: one-row steps over
        the weights' halves, forwards of more rows over packed weights; bf16: packed weights): each kind the call's
        forwards can run, timed both ways over this call's cache once per process, target, device and kind (the
        verdicts kept on the target's cost model beside its tables), is taken where it was faster."""
        prefill_routes = self._routes  # built by _set_prefill_routes from the verdicts known before this call
        self._routes = self._drafting_routes = None
        kinds = kinds_for(session.device, dtype, bool(self.compile_steps))
        decided, device = costs_of(self.target).narrow_rows, str(session.device)
        draft_model = getattr(self.proposer, "draft_model", None)  # a separate draft LM (classic, FLy)
        if draft_model is not None and kinds and not self.layer_ids:
            self._drafting_routes = self._draft_model_routes(draft_model, session, dtype, kinds)
        if all(decided.get((device, k.name)) is False for k in kinds):
            return  # no kind here (a GPU, compiled steps), or each timed slower: no module walk nor packing check
        if prefill_routes is not None and all((device, k.name) in decided for k in kinds):
            self._routes = prefill_routes  # nothing left to time: the prefill's routes are the call's
        else:
            self._time_narrow_rows(session, show, dtype, kinds)
        taken = self._routes.kinds if self._routes is not None else ()
        if taken and self.layer_ids:  # a drafter on the target's hidden states: its linears and the target's
            drafters = [getattr(p, "drafter", None)
                        for p in (self.proposer, *getattr(self.proposer, "proposers", {}).values())]
            drafting = routable_linears(self.target, *drafters)
            if any(k.way == "packed" for k in taken):
                pack_linears(drafting, dtype)  # (a drafter's linear left unpacked keeps the library's way)
            self._drafting_routes = RoutedLinears(drafting, taken)

    def _draft_model_routes(self, draft_model, session: DecodingSession, dtype: torch.dtype,
                            kinds) -> RoutedLinears | None:
        """The routes of a separate draft LM's forwards: each kind timed once per process, draft model and device
        on one of its own forwards over its cache (a drafting step of one row per batch row, or the first step's
        two), the verdicts kept on the draft model's cost model. Its forwards are a target's plain steps in small:
        a one-token step of the tiny world's 2-layer draft LM took 9-35% less over packed weights in bf16, and over
        the weights' halves in fp32 with AVX2 kernels (one thread; docs/width-policy.md), where a drafting round of
        7 tokens spends most of its time in such steps. The drafts only propose: any kernel's rounding leaves the
        verified tokens the target's."""
        batch = session.batch_size

        def ways(kind, routed: RoutedLinears):
            rows = next((w for w in (1, 2) if kind.holds(batch * w, dtype)), None)
            if rows is None:
                return None
            run_step = self.proposer.timing_step(rows)

            def run(routes: RoutedLinears | None) -> None:
                with routes or nullcontext():
                    run_step()

            return lambda: run(None), lambda: run(routed)

        return _timed_routes(routable_linears(draft_model), costs_of(draft_model).narrow_rows, session.device,
                             dtype, kinds, ways)

    def _time_narrow_rows(self, session: DecodingSession, show, dtype: torch.dtype, kinds) -> None:
        """Times each of ``kinds`` this call's forwards can run and no earlier call timed, and sets ``self._routes``
        to the kinds taken (_decide_narrow_rows)."""
        batch = session.batch_size
        # the widths a verify of this call may have: any up to the widest where widths vary (the width policy, a
        # hybrid target's re-feed of the committed rows), else the fixed block; at this batch size or any it shrinks to
        widths = range(1, self._copy_width() + 1) if self.adaptive or self._state_layers else (self.width,)
        possible = {rows * w for rows in range(1, batch + 1) for w in widths}
        timing = None  # (run_verify, finish), once something is timed

        def ways(kind, routed: RoutedLinears):
            nonlocal timing
            # the narrowest verify width whose rows at this batch size are of this kind (none: a batch of 4 about a
            # one-row step, untimed until a call of one prompt)
            timed_width = next((w for w in sorted(widths) if kind.holds(batch * w, dtype)), None)
            if timed_width is None or not any(kind.holds(rows, dtype) for rows in possible):
                return None
            timing = timing or self._timing_verify(session, show)

            def run(routes: RoutedLinears | None, run_verify=timing[0]) -> None:
                self._routes = routes
                run_verify(timed_width)

            return lambda: run(None), lambda: run(routed)

        routes = _timed_routes(routable_linears(self.target), costs_of(self.target).narrow_rows, session.device,
                               dtype, kinds, ways)
        if timing is not None:
            timing[1]()
        self._routes = routes

    def _drop_finished_rows(self, session: DecodingSession, finished_rows: "FinishedRows", active_rows: list[int]):
        """Keep the session's (and its caches') and the proposer's ``active_rows`` only; the others' tokens go to
        ``finished_rows``."""
        finished_rows.keep(session, [b for b in range(session.batch_size) if b not in active_rows])
        session.keep_rows(active_rows)
        self.proposer.keep_rows(active_rows)

    @staticmethod
    def _sequences(tokens: torch.Tensor, lengths: list[int], generation_config, stop: StopRule) -> torch.Tensor:
        """tokens [B, capacity], lengths [B] committed per row -> [B, P + longest row's new tokens]: each row, then
        pad_token_id after it (stock generate's output)."""
        longest = max(lengths)
        sequences = tokens[:, :longest].clone()
        if len(lengths) > 1:
            pad = _pad_token_id(generation_config, stop.stop_token_ids)
            ends = torch.tensor(lengths, device=tokens.device)
            past_end = torch.arange(longest, device=tokens.device)[None] >= ends[:, None]
            sequences.masked_fill_(past_end, pad)
        return sequences
