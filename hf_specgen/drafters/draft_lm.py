"""Classic speculative decoding: a small causal LM of the same tokenizer drafts K tokens one at a time.

Round r, with ``start`` = slot of the last committed token and K = num_draft_tokens (W = K + 1 rows verified):
  1. the draft model runs on the two committed tokens at slots start-1 and start (always two rows, so the step has a
     fixed shape: after a full accept the slot before ``start`` is missing from its cache, otherwise it is rewritten
     with the same values) and proposes d1 = argmax at ``start``;
  2. K-1 one-row steps feed d_j at slot start+j and propose d_{j+1}; with a confidence threshold (transformers'
     assisted-generation heuristic) drafting stops once the draft model's top probability falls below it, and the
     remaining slots repeat the last draft when the steps are compiled (any token is a valid draft: the verify keeps
     its fixed K+1 rows, and acceptance stops at the first token the target disagrees with anyway); eager, the
     verify gets only the drafted tokens.
The draft cache is a static cache indexed by the same slots as the target's; rejected drafts are simply overwritten
next round.

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

    def __init__(self, draft_model, target, num_draft_tokens: int, compile_steps: bool, ngram: bool = False,
                 max_ngram: int = 4, ngram_tokens: int = 6, confidence_threshold: float | None = None):
        check_draft_lm_fits_target(draft_model, target)
        self.draft_model = draft_model
        self.num_draft_tokens = num_draft_tokens
        self.block_size = num_draft_tokens + 1
        self.ngram, self.max_ngram, self.ngram_tokens = ngram, max_ngram, ngram_tokens
        self.confidence_threshold = confidence_threshold
        self.batch_refusal = None
        if ngram:
            self.batch_refusal = ("FLy's prompt-lookup drafting (fly_ngram) drafts for one prompt at a time: pass "
                                  "fly_ngram=False to decode a batch, or call generate once per prompt")
        elif confidence_threshold is not None:
            self.batch_refusal = ("draft_confidence_threshold stops drafting per prompt: leave it unset to decode a "
                                  "batch, or call generate once per prompt")
        # Padded candidate rows may be written past the last verified slot: the cache needs that much room.
        self.cache_margin = ngram_tokens + 2 if ngram else 0
        self.forward_calls = 0
        device = next(draft_model.parameters()).device
        self._step = StepRunner(self._draft_step, compile_steps, device)
        self._rows_step = StepRunner(self._draft_rows_step, compile_steps, device)
        self._caches = CachePool(keep=compile_steps)

    def _forward(self, ids, positions, mask):
        # ids [B, n]; positions [B, n]; mask [B, 1, n, K] -> logits [B, n, V]
        return self.draft_model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                past_key_values=self.cache, use_cache=True).logits

    def _draft_step(self, ids, positions, mask):
        # -> ([B] argmax after the last row, [B] its probability, or None without a confidence threshold)
        logits = self._forward(ids, positions, mask)[:, -1]
        if self.confidence_threshold is None:  # plain drafting needs no softmax over the vocabulary
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
        prompt_len = session.prompt_len
        # Prefill the prompt except its last token (it is rewritten as the first row of round 1).
        if prompt_len > 1:
            self.draft_model(input_ids=session.tokens[:, : prompt_len - 1],
                             position_ids=session.positions[:, : prompt_len - 1],
                             attention_mask=session.causal_mask(0, prompt_len - 1), past_key_values=self.cache,
                             use_cache=True)
        self.forward_calls = 0
        self.drafts = torch.zeros((session.batch_size, self.block_size), dtype=torch.long, device=session.device)

    def propose(self) -> torch.Tensor:
        """[B, W]: each row's last committed token, then K greedy draft tokens."""
        if self.ngram:
            return self._propose_with_ngrams()
        session, starts = self.session, self.session.last_slots  # [B], each >= 1 (the prefill committed a token)
        firsts = starts - 1
        set_cache_length(self.cache, firsts)
        token, confidence = self._step(session.token_block(firsts, 2), session.position_block(firsts, 2),
                                       session.causal_mask(firsts, 2))
        self.drafts[:, 0] = session.token_block(starts, 1)[:, 0]
        self.drafts[:, 1] = token
        drafted = 1
        for j in range(1, self.num_draft_tokens):
            if self.confidence_threshold is not None and float(confidence) < self.confidence_threshold:  # batch 1
                self.drafts[:, j + 1:] = self.drafts[:, j: j + 1]  # unsure: stop drafting, pad the fixed-width block
                break
            slots = starts + j
            token, confidence = self._step(self.drafts[:, j: j + 1], session.position_block(slots, 1),
                                           session.causal_mask(slots, 1))
            self.drafts[:, j + 1] = token
            drafted += 1
        self.forward_calls += drafted
        if drafted < self.num_draft_tokens and not self._step.compiled:
            return self.drafts[:, : drafted + 1].clone()  # eager: verify only what was drafted (fewer target rows)
        return self.drafts.clone()

    def _propose_with_ngrams(self) -> torch.Tensor:
        session, start, k, m = self.session, self.session.last_slot, self.num_draft_tokens, self.ngram_tokens
        history = session.tokens[0, : start + 1].tolist()  # committed tokens
        drafted: list[int] = []
        pending_slot = max(start - 1, 0)
        pending = history[pending_slot:]  # tokens not yet in the draft cache (as in plain drafting: 2 rows)
        set_cache_length(self.cache, pending_slot)
        while len(drafted) < k:
            candidates = ngram_candidates(history + drafted, self.max_ngram, min(m, k - len(drafted) - 1))
            rows = pending + candidates + [pending[-1]] * (m - len(candidates)) if candidates else pending
            slots = slice(pending_slot, pending_slot + len(rows))
            ids = torch.tensor([rows], device=session.device)
            # Shapes: 2 or 1 pending rows, with or without M candidate rows: four fixed shapes in all.
            predicted = self._rows_step(ids, session.positions[:, slots],
                                        session.causal_mask(pending_slot, len(rows)))[0]
            # Row len(pending)-1+i predicts the token after candidate i-1 (after the pending tokens for i = 0).
            follow = predicted[len(pending) - 1: len(pending) + len(candidates)].tolist()
            kept = 0
            while kept < len(candidates) and candidates[kept] == follow[kept]:
                kept += 1
            drafted += candidates[:kept] + [follow[kept]]
            pending_slot += len(pending) + kept  # the draft cache is valid through the last kept candidate
            set_cache_length(self.cache, pending_slot)
            pending = [follow[kept]]
            self.forward_calls += 1
        return torch.tensor(history[-1:] + drafted[:k], device=session.device)

    def commit(self, verify_features, n_committed: torch.Tensor) -> None:
        pass  # the next round re-reads the committed tokens from the session
