"""Classic speculative decoding: a small causal LM of the same tokenizer drafts K tokens one at a time.

Round r, with ``start`` = slot of the last committed token and K = num_draft_tokens (W = K + 1 rows verified):
  1. the draft model runs on the newest committed token at slot ``start`` and proposes d1 = argmax at ``start``;
     where its cache lacks the slot before (the last round's drafts were all kept, so the last of them was never fed;
     copied tokens were verified in place of its drafts; the first round), it runs on the two tokens at start-1 and
     start (a one-row forward costs the tiny world's draft LM 1.6 ms where two rows cost 2.4-3.7, fp32 with AVX2);
  2. K-1 one-row steps feed d_j at slot start+j and propose d_{j+1}; with a confidence threshold (transformers'
     assisted-generation heuristic) a batch row stops drafting once the draft model's top probability falls below
     it and repeats its last draft from there (any token is a valid draft: acceptance stops at the first token the
     target disagrees with anyway); once every row has stopped, the rest of the block repeats too when the steps are
     compiled (the verify keeps its fixed K+1 rows), and eager, the verify gets only the drafted columns. In the
     default call on a CPU the batch instead stops once every row's product of its drafts' probabilities is below
     the width policy's UNSURE_STOP, and the loop verifies the width those drafts are worth
     (``stops_when_unsure``; WidthPolicy.confident_width).
The draft cache is a static cache indexed by the same slots as the target's; rejected drafts are simply overwritten
next round. With the width policy (the default call) a round of w rows drafts only w - 1 tokens (drafting costs one
draft forward per token), and a plain step drafts nothing: the n tokens committed by plain steps since the last
drafting round are fed to the draft model first (one forward of n rows, eager: n varies) when drafting resumes.

With ``ngram=True`` (FLy's Multi-Level Acceleration) each draft forward also carries up to M prompt-lookup candidate
tokens (rows padded to M, so shapes stay fixed); the candidates' prefix that equals the draft model's own argmax is
kept, plus the draft model's next token: one forward yields 1..M+1 draft tokens, and the draft tokens are exactly
those of plain greedy drafting. Drafts are greedy: with the engine's acceptance rule (accept while the draft equals the target's own
choice) this is lossless for greedy and for sampling (rejection sampling with a one-hot draft).
"""

from __future__ import annotations

import torch

from ..engine.cache import CachePool, set_cache_length
from ..engine.graphs import StepRunner
from ..engine.proposer import keep_batch_rows
from ..engine.support import cache_keyword, last_logits_only, recurrent_state_reason, rollback_layer_indices
from ..engine.taps import decoder_layers
from ..models.eagle3 import Eagle3DraftModel
from .ngram import ngram_candidates


def check_draft_lm_fits_target(draft_model, target) -> None:
    if isinstance(draft_model, Eagle3DraftModel) or type(draft_model).__name__ == "DFlashDraftModel":
        raise ValueError(f"{type(draft_model).__name__} reads the target's hidden states: use "
                         f"speculative_mode={'eagle3' if isinstance(draft_model, Eagle3DraftModel) else 'dflash'!r}, "
                         "not a draft-LM mode.")
    if not hasattr(draft_model, "get_output_embeddings") or draft_model.get_output_embeddings() is None:
        raise ValueError(
            f"speculative_mode='classic' needs a causal LM as assistant_model (an AutoModelForCausalLM), got "
            f"{type(draft_model).__name__}. DFlash drafters go with speculative_mode='dflash'."
        )
    if rollback_layer_indices(draft_model) or recurrent_state_reason(draft_model):
        raise ValueError(
            f"The draft model ({type(draft_model).__name__}) has recurrent, linear-attention or convolution layers: "
            "hf_specgen rolls those back for targets only; use an attention-only draft model with the target's "
            "tokenizer, or a DFlash / EAGLE-3 drafter.")
    draft_vocab = draft_model.get_output_embeddings().weight.shape[0]
    target_vocab = target.get_output_embeddings().weight.shape[0]
    if draft_vocab != target_vocab:
        raise ValueError(
            f"The draft model's vocabulary ({draft_vocab} tokens) differs from the target's ({target_vocab}): classic "
            "speculative decoding needs a draft model with the target's tokenizer (e.g. a smaller model of the same "
            "family)."
        )


class DraftModelProposer:
    tapped_layer_ids: list[int] = []  # the draft model reads tokens only
    drafts_any_width = True  # propose(width): w - 1 tokens, one draft forward each
    drafts_token_by_token = True  # the width policy charges a round of w rows (w - 1) / K of the whole block
    def __init__(self, draft_model, target, num_draft_tokens: int, compile_steps: bool | str, ngram: bool = False,
                 max_ngram: int = 4, ngram_tokens: int = 6, confidence_threshold: float | None = None,
                 stops_when_unsure: bool = False):
        check_draft_lm_fits_target(draft_model, target)
        self.draft_model = draft_model
        # propose(stop_below=...) and self.confidences (the width policy's UNSURE_STOP): fixed here, since a compiled
        # step's outputs are; plain drafting needs no softmax over the vocabulary
        self.stops_when_unsure = stops_when_unsure
        self.num_draft_tokens = num_draft_tokens
        self.block_size = num_draft_tokens + 1
        self.ngram, self.max_ngram, self.ngram_tokens = ngram, max_ngram, ngram_tokens
        self.confidence_threshold = confidence_threshold
        # Padded candidate rows may be written past the last verified slot: the cache needs that much room.
        self.cache_margin = ngram_tokens + 2 if ngram else 0
        self.forward_calls = 0
        device = next(draft_model.parameters()).device
        self._step = StepRunner(self._draft_step, compile_steps, device)
        self._rows_step = StepRunner(self._draft_rows_step, compile_steps, device)
        self._caches = CachePool(keep=compile_steps)
        self._cache_key = cache_keyword(draft_model)
        # the forwards that read only their last row's logits (a drafting step) or none (catching up on committed
        # rows) compute the lm_head over that row alone, where the model takes logits_to_keep: the vocabulary's
        # product over every row of a prompt it catches up on is most of that read for a small draft LM
        self._last_logits_only = last_logits_only(draft_model)

    def _forward(self, ids, positions, mask, last_only: bool = False):
        # ids [B, n]; positions [B, n]; mask [B, 1, n, K] -> logits [B, n, V] ([B, 1, V] or so with last_only)
        return self.draft_model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                **{self._cache_key: self.cache}, use_cache=True,
                                **(self._last_logits_only if last_only else {})).logits

    def _draft_step(self, ids, positions, mask):
        # -> ([B] argmax after the last row, [B] its probability, or None where nothing reads it)
        logits = self._forward(ids, positions, mask, last_only=True)[:, -1]
        if self.confidence_threshold is None and not self.stops_when_unsure:
            return logits.argmax(dim=-1), None
        confidence, token = logits.float().softmax(dim=-1).max(dim=-1)
        return token, confidence

    def _draft_rows_step(self, ids, positions, mask):
        return self._forward(ids, positions, mask).argmax(dim=-1)  # [B, n] argmax after every row

    def start(self, session, prompt_features) -> None:
        self.session = session
        self.cache = self._caches.get(session.capacity, len(decoder_layers(self.draft_model)), session.batch_size,
                                      session.device)
        session.attach(self.cache)
        self.forward_calls = 0
        # The committed rows the draft cache has not read, up to the two newest (which every drafting path rewrites
        # itself): the prompt but its last token, and later the rows of plain steps. They are read in one forward
        # when the drafter next drafts (_catch_up), so a call that decodes in plain steps (a width policy that found
        # drafting does not pay) never runs the draft model over its prompt: on the tiny world in fp32 with AVX2
        # kernels that prefill was about 4% of a short answer's call, and a batch's is the batch's prompts.
        self.unread_rows = max(session.prompt_len - 1, 0)
        self.unread_prompt_rows = self.unread_rows  # (read as the prefill was: no drafting forward of the count)
        self.drafts = torch.zeros((session.batch_size, self.block_size), dtype=torch.long, device=session.device)
        # The drafts of this proposer's last drafting round whose slots the draft cache read (None before its first:
        # prompt lookup's drafting path rewrites the two newest rows itself), and whether the cache holds every
        # committed row but the newest (the first drafting step then feeds that one row alone)
        self.fed_drafts: int | None = None
        self.reads_newest_only = False
        if self.ngram:
            self._first_real_slots = session.left_padding.tolist()

    def propose(self, width: int | None = None, whole_block: bool = False,
                stop_below: float | None = None) -> torch.Tensor:
        """[B, w]: each row's last committed token, then w - 1 greedy draft tokens (``width`` None or
        ``whole_block``: K + 1, the width policy timing the whole block's drafting; the caller keeps the first w).

        ``stop_below`` (with ``stops_when_unsure``): drafting stops once every row's product of its drafts'
        probabilities is below it, and returns the drafts so far; ``self.confidences`` [B, n] holds the
        probabilities of the n drafts returned (see Eagle3ChainProposer.propose)."""
        if stop_below is not None and not self.stops_when_unsure:
            raise ValueError("stop_below needs a draft LM proposer built with stops_when_unsure=True.")
        session, starts = self.session, self.session.last_slots  # [B], each >= 1 (the prefill committed a token)
        firsts = starts - 1
        self._catch_up(firsts)
        n_drafts = self.num_draft_tokens if width is None or whole_block else min(width - 1, self.num_draft_tokens)
        if self.ngram:
            return self._propose_with_ngrams(n_drafts)
        first, rows = (starts, 1) if self.reads_newest_only else (firsts, 2)
        set_cache_length(self.cache, first)
        token, confidence = self._step(session.token_block(first, rows), session.position_block(first, rows),
                                       session.causal_mask(first, rows))
        self.drafts[:, 0] = session.token_block(starts, 1)[:, 0]
        self.drafts[:, 1] = token
        drafted = 1
        unsure = None  # [B] rows that stopped drafting (confidence threshold only)
        confidences, all_right = [confidence], confidence  # [B] each (with stops_when_unsure)
        for j in range(1, n_drafts):
            if stop_below is not None and float(all_right.max()) < stop_below:
                break  # (the loop verifies at most the drafted rows: no padding, compiled or not)
            if self.confidence_threshold is not None:
                unsure = confidence < self.confidence_threshold if unsure is None else \
                    unsure | (confidence < self.confidence_threshold)
                if bool(unsure.all()):  # one read per step, as transformers' heuristic reads it
                    self.drafts[:, j + 1:] = self.drafts[:, j: j + 1]  # pad the fixed-width block
                    break
            slots = starts + j
            token, confidence = self._step(self.drafts[:, j: j + 1], session.position_block(slots, 1),
                                           session.causal_mask(slots, 1))
            # A row that stopped repeats its last draft (any token is a valid draft: acceptance stops at the first
            # one the target disagrees with), while the batch drafts on for the rows still sure.
            self.drafts[:, j + 1] = token if unsure is None else torch.where(unsure, self.drafts[:, j], token)
            drafted += 1
            if self.stops_when_unsure:
                confidences.append(confidence)
                all_right = all_right * confidence
        self.forward_calls += drafted
        self.fed_drafts = drafted - 1  # d_1 .. d_{drafted - 1} were fed at their slots; later ones (padding) not
        self.reads_newest_only = False  # (until commit_accepted says how many drafts were kept)
        self.confidences = torch.stack(confidences, dim=1) if self.stops_when_unsure else None  # [B, drafted]
        if drafted < n_drafts and (stop_below is not None or not self._step.compiled):
            return self.drafts[:, : drafted + 1].clone()  # eager: verify only what was drafted (fewer target rows)
        return self.drafts[:, : n_drafts + 1].clone()

    def timing_step(self, rows: int):
        """A forward of ``rows`` rows per batch row over the draft cache at each row's newest committed slots (a
        drafting step's shape), for the engine to time its linears' kinds on (SpeculativeDecoder._draft_model_routes):
        it writes only slots the next drafting round rewrites before reading them (from the slot before the newest
        on, as every drafting round does), so it may run any number of times."""
        session = self.session
        firsts = session.last_slots - 1  # (>= 0: the prefill committed a token)
        ids, positions = session.token_block(firsts, rows), session.position_block(firsts, rows)
        mask = session.causal_mask(firsts, rows)

        def step() -> None:
            set_cache_length(self.cache, firsts)
            self._forward(ids, positions, mask, last_only=True)

        return step

    def _catch_up(self, firsts: torch.Tensor) -> None:
        """Feed the draft cache the committed rows it has not read (the prompt, the rows of plain steps), up to each
        row's slot ``firsts`` (the two newest tokens, which every drafting path rewrites itself, excluded)."""
        if not self.unread_rows:
            return
        session, rows = self.session, self.unread_rows
        behind = (firsts - rows).clamp(min=0)  # (a finished row's window may start at slot 0)
        set_cache_length(self.cache, behind)
        self._forward(session.token_block(behind, rows), session.position_block(behind, rows),
                      session.causal_mask(behind, rows), last_only=True)
        self.forward_calls += rows > self.unread_prompt_rows  # a drafting forward where plain steps' rows are in it
        self.unread_rows = self.unread_prompt_rows = 0
        self.reads_newest_only = False  # (read up to the slot before the newest two: the two-row step reads both)

    def _propose_with_ngrams(self, k: int) -> torch.Tensor:
        """Prompt lookup for every batch row (FLy's MLA): each forward runs, per row, the two newest tokens not yet
        checked (slots p, p+1, the first already in the draft cache and rewritten unchanged) and up to M candidates
        from the row's own history (padded to M: one shape for the batch). Row p+1+i predicts the token after
        candidate i-1; a row keeps its candidates up to the first one the draft model disagrees with, plus the
        model's own next token, and moves p past them. Rows draft until every row has k tokens (K, or fewer for a
        narrower round of the width policy). -> [B, k + 1]"""
        session, m = self.session, self.ngram_tokens
        batch = session.batch_size
        lengths = session.host_lengths
        sequences = session.tokens[:, : max(lengths)].tolist()  # one read: every row's committed tokens
        first_real = self._first_real_slots  # prompt lookup reads the real tokens only, not the left padding
        histories = [sequences[b][: lengths[b]] for b in range(batch)]  # per row: slot -> token, drafts appended
        checked = [length - 2 for length in lengths]  # p: slot of the first of the two rows to run
        while any(len(histories[b]) - lengths[b] < k for b in range(batch)):
            candidates = []
            for b in range(batch):
                room = min(m, k - (len(histories[b]) - lengths[b]) - 1)
                candidates.append(ngram_candidates(histories[b][first_real[b]:], self.max_ngram, room))
            width = 2 + (m if any(candidates) else 0)  # two shapes in all: with or without candidate rows
            rows = [histories[b][checked[b]: checked[b] + 2] + candidates[b] +
                    [histories[b][-1]] * (width - 2 - len(candidates[b])) for b in range(batch)]
            firsts = torch.tensor(checked, device=session.device)
            set_cache_length(self.cache, firsts)
            ids = torch.tensor(rows, device=session.device)  # [B, width]
            predicted = self._rows_step(ids, session.position_block(firsts, width),
                                        session.causal_mask(firsts, width)).tolist()  # [B, width]
            self.forward_calls += 1
            for b in range(batch):
                if len(histories[b]) - lengths[b] >= k:
                    continue  # this row has its drafts: its rows ran only to keep the shape
                # Row 1 + i predicts the token after candidate i - 1 (after the two checked tokens for i = 0).
                follow = predicted[b][1: 2 + len(candidates[b])]
                kept = 0
                while kept < len(candidates[b]) and candidates[b][kept] == follow[kept]:
                    kept += 1
                histories[b] += candidates[b][:kept] + [follow[kept]]
                checked[b] += 1 + kept  # the draft cache is valid through the last kept candidate
        drafts = [histories[b][lengths[b] - 1: lengths[b] + k] for b in range(batch)]
        return torch.tensor(drafts, device=session.device)  # [B, K+1]

    def commit(self, verify_features, n_committed: torch.Tensor) -> None:
        pass  # the next round re-reads the committed tokens from the session

    def commit_accepted(self, accepted: int, copied: bool = False) -> None:
        """The round this draft LM drafted kept up to ``accepted`` drafts in a row (host-side, the batch's most).
        Its cache read the drafts it fed; a kept draft past them (the last one, never fed, or the padding a compiled
        batch repeats once every row fell below its confidence threshold) is read when it next drafts, as are the
        committed rows of a round that verified copied tokens (prompt lookup, ``copied``) in place of its drafts in
        some row: the cache read its own drafts at those slots. Without that, a row whose copy the target kept went
        on drafting from a context of tokens it never committed. Where the cache holds every committed row but the
        newest, the next drafting step feeds that one row alone."""
        fed = 0 if copied else self.fed_drafts
        if fed is None:  # (prompt lookup's drafting path rewrites the two newest rows itself)
            return
        missing = max(accepted - fed, 0)  # kept rows before the newest the cache did not read
        self.unread_rows = max(self.unread_rows, missing - 1)  # (the two-row step reads the last of them)
        self.reads_newest_only = missing == 0

    def commit_plain(self, verify_features, n_committed: torch.Tensor, rows: int = 1) -> None:
        """A round this draft LM did not draft (a plain step, or a verify of copied tokens) committed ``rows`` tokens
        per active row: the draft cache falls that much further behind, caught up when drafting resumes."""
        self.unread_rows += rows
        self.reads_newest_only = False

    def keep_rows(self, rows: list[int]) -> None:
        keep_batch_rows(self, ("drafts", "_first_real_slots"), rows)
