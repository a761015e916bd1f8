"""No drafter: ``speculative_mode="autoregressive"`` runs plain one-token decoding through the engine.

Each round "proposes" only the last committed token, so the verify forward is an ordinary 1-token decode step and
the target's choice is the next token. What it adds over stock ``generate`` is the engine itself: a pre-allocated
static cache and a fixed-shape step that ``speculative_compile=True`` compiles once per cache size. It is the
fair baseline for the speculative modes (same caches, same compilation, no drafting) and a compiled decoder
where stock generate does not compile (CPU).
"""

from __future__ import annotations

import torch


class NoDraftProposer:
    block_size = 1  # the verify block is the last committed token alone
    tapped_layer_ids: list[int] = []  # no target hidden states needed

    def start(self, session, prompt_features) -> None:
        self.session = session
        self.forward_calls = 0

    def propose(self) -> torch.Tensor:
        return self.session.token_block(self.session.last_slots, 1)  # [B, 1]

    def commit(self, verify_features, n_committed: torch.Tensor) -> None:
        pass

    def keep_rows(self, rows: list[int]) -> None:
        pass  # no state of its own: every row's tokens are the session's
