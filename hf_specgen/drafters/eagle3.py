"""EAGLE-3 proposer, chain drafting (top_k = 1): K autoregressive drafter steps per round.

Alignment (``start`` = slot of the last committed token, the bonus b):
  * the drafter row at slot t pairs the target feature f_t with the token at slot t+1 and predicts the token at t+2;
  * its cache holds committed rows only: slots < start, each built from a REAL target feature;
  * a round first appends the rows whose features arrived with the last verify (the prompt's in round 1, else the W
    verify rows: fixed shape, rows past the committed ones are masked out and overwritten later); the row at slot
    start-1 pairs f_{start-1} with b and predicts d1;
  * then K-1 one-row steps: row at slot start+j-1 pairs the token d_j with the drafter's own previous output
    (standing in for the target feature it does not have yet) and predicts d_{j+1}.
After drafting, the cache length goes back to ``start``: rows built from the drafter's own outputs are not kept.
"""

from __future__ import annotations

import torch

from ..engine.cache import set_cache_length, static_cache
from ..engine.graphs import StepRunner
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


class Eagle3ChainProposer:
    def __init__(self, drafter: Eagle3DraftModel, target, num_draft_tokens: int, compile_steps: bool):
        layers = target.config.get_text_config(decoder=True).num_hidden_layers
        self.tapped_layer_ids = drafter.target_layer_ids or default_eagle3_layer_ids(layers)
        check_eagle3_fits_target(drafter, target, self.tapped_layer_ids)
        self.drafter = drafter
        self.embed = target.get_input_embeddings()
        self.num_draft_tokens = num_draft_tokens
        self.block_size = num_draft_tokens + 1
        self.forward_calls = 0
        device = next(drafter.parameters()).device
        self._context_step = StepRunner(self._step, compile_steps, device)
        self._chain_step = StepRunner(self._step, compile_steps, device)

    def _step(self, token_ids, features, positions, mask):
        # token_ids [1, T]; features [1, T, n*H] or [1, T, H]; positions [1, T]; mask [1, 1, T, capacity]
        hidden = self.drafter(self.embed(token_ids), features, positions, self.cache, mask)  # [1, T, H]
        draft_ids = self.drafter.draft_logits(hidden).argmax(dim=-1)  # [1, T]
        return self.drafter.to_target_ids(draft_ids)[0], hidden

    def start(self, session, prompt_features: torch.Tensor) -> None:
        self.session = session
        self.cache = static_cache(session.capacity, 1)
        self.pending = prompt_features  # [1, P, n*H]: features of slots 0..P-1
        self.context_len = 0
        self.forward_calls = 0
        self.drafts = torch.zeros(self.block_size, dtype=torch.long, device=session.device)

    def propose(self) -> torch.Tensor:
        """[W]: the last committed token, then K draft tokens."""
        session, start = self.session, self.session.last_slot
        first, rows = self.context_len, self.pending.shape[1]
        set_cache_length(self.cache, first)
        # Context rows: feature of slot t with the token at slot t+1 (committed for every row that will be kept).
        token_ids = session.tokens[:, first + 1: first + 1 + rows]
        step = self._context_step if rows == self.block_size else self._context_step.eager  # round 1: the prompt
        predicted, hidden = step(token_ids, self.pending, session.positions[:, first: first + rows],
                                 session.causal_mask(first, rows))
        set_cache_length(self.cache, start)  # rows from slot start on were built from uncommitted tokens
        last = start - 1 - first  # the row at slot start-1 (pairs f_{start-1} with the bonus)
        self.drafts[0] = session.tokens[0, start]
        self.drafts[1] = predicted[last]
        hidden = hidden[:, last: last + 1]
        for j in range(1, self.num_draft_tokens):
            slot = start + j - 1
            predicted, hidden = self._chain_step(self.drafts[j: j + 1][None], hidden, session.positions[:, slot: slot + 1],
                                                 session.causal_mask(slot, 1))
            self.drafts[j + 1] = predicted[0]
            hidden = hidden.clone()  # a CUDA-graph replay would overwrite it before the next step reads it
        self.forward_calls += self.num_draft_tokens
        set_cache_length(self.cache, start)  # keep rows built from real target features only
        self.context_len = start
        return self.drafts.clone()

    def commit(self, verify_features: torch.Tensor, n_committed: int) -> None:
        self.pending = verify_features  # [1, W, n*H]: slots start..start+W-1; the first n_committed are valid
