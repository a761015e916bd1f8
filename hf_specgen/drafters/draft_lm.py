"""Classic speculative decoding: a small causal LM of the same tokenizer drafts K tokens one at a time.

Round r, with ``start`` = slot of the last committed token and K = num_draft_tokens (W = K + 1 rows verified):
  1. the draft model runs on the two committed tokens at slots start-1 and start (always two rows, so the step has a
     fixed shape: after a full accept the slot before ``start`` is missing from its cache, otherwise it is rewritten
     with the same values) and proposes d1 = argmax at ``start``;
  2. K-1 one-row steps feed d_j at slot start+j and propose d_{j+1}.
The draft cache is a static cache indexed by the same slots as the target's; rejected drafts are simply overwritten
next round. Drafts are greedy: with the engine's acceptance rule (accept while the draft equals the target's own
choice) this is lossless for greedy and for sampling (rejection sampling with a one-hot draft).
"""

from __future__ import annotations

import torch

from ..engine.cache import set_cache_length, static_cache
from ..engine.graphs import StepRunner
from ..engine.taps import decoder_layers


def check_draft_lm_fits_target(draft_model, target) -> None:
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

    def __init__(self, draft_model, target, num_draft_tokens: int, compile_steps: bool):
        check_draft_lm_fits_target(draft_model, target)
        self.draft_model = draft_model
        self.num_draft_tokens = num_draft_tokens
        self.block_size = num_draft_tokens + 1
        self.forward_calls = 0
        self._step = StepRunner(self._draft_step, compile_steps, draft_model.device)

    def _draft_step(self, ids, positions, mask):
        # ids [1, n]; positions [1, n]; mask [1, 1, n, capacity] -> argmax of the last row [1]
        logits = self.draft_model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                  past_key_values=self.cache, use_cache=True).logits
        return logits[0, -1:].argmax(dim=-1)

    def start(self, session, prompt_features) -> None:
        self.session = session
        self.cache = static_cache(session.capacity, len(decoder_layers(self.draft_model)))
        prompt_len = session.prompt_len
        # Prefill the prompt except its last token (it is rewritten as the first row of round 1).
        if prompt_len > 1:
            self.draft_model(input_ids=session.tokens[:, : prompt_len - 1],
                             position_ids=session.positions[:, : prompt_len - 1],
                             attention_mask=session.causal_mask(0, prompt_len - 1), past_key_values=self.cache,
                             use_cache=True)
        self.forward_calls = 0
        self.drafts = torch.zeros(self.block_size, dtype=torch.long, device=session.device)

    def propose(self) -> torch.Tensor:
        """[W]: the last committed token, then K greedy draft tokens."""
        session, start = self.session, self.session.last_slot
        first = max(start - 1, 0)
        n_rows = start + 1 - first  # 2, or 1 for a one-token prompt's first round
        set_cache_length(self.cache, first)
        step = self._step if n_rows == 2 else self._step.eager
        token = step(session.tokens[:, first: start + 1], session.positions[:, first: start + 1],
                     session.causal_mask(first, n_rows))
        self.drafts[0] = session.tokens[0, start]
        self.drafts[1] = token[0]
        for j in range(1, self.num_draft_tokens):
            slot = start + j
            token = self._step(self.drafts[j: j + 1][None], session.positions[:, slot: slot + 1],
                               session.causal_mask(slot, 1))
            self.drafts[j + 1] = token[0]
        self.forward_calls += self.num_draft_tokens
        return self.drafts.clone()

    def commit(self, verify_features, n_committed: int) -> None:
        pass  # the next round re-reads the committed tokens from the session
