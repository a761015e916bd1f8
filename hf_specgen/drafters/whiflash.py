"""WhiFlash: every round a router picks the EAGLE-3 (autoregressive tree) drafter or the DFlash (block) drafter.

The target verifies whatever the chosen drafter proposed exactly as usual, so the output is lossless for ANY
routing; the router only decides speed. Per round:

  1. the router reads the target at the last accepted position: the full-vocabulary entropy of its next-token
     distribution (WhiFlash-Entropy: entropy > threshold -> EAGLE-3) or its final decoder layer's hidden state
     through a small MLP predicting AL_eagle - AL_dflash (WhiFlash-Neural: prediction > threshold -> EAGLE-3);
  2. lazy catch-up: the drafter that sat out does not see the rounds it missed until it is chosen again; then its
     whole backlog (the committed tokens and their target features) is prefilled in ONE forward. With
     ``lazy=False`` the inactive drafter is brought up to date every round instead (the paper's baseline);
  3. the chosen drafter proposes (a tree or a block), the target verifies, both drafters' bookkeeping is updated.
"""

from __future__ import annotations

import random

import torch

from ..engine.taps import decoder_layers
from .dflash import DFlashProposer
from .eagle3 import Eagle3ChainProposer

AR, PARALLEL = "eagle3", "dflash"


def full_entropy(logits: torch.Tensor) -> float:
    """Entropy in nats of softmax(logits) over the whole vocabulary. logits: [V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logp.exp() * logp).sum())


class WhiFlashProposer:
    """Routes between two proposers that share the target's taps; see the module docstring.

    ``settings`` is the WhiFlash bundle: its router ("entropy" | "neural" | "eagle3" | "dflash" | "random" | a
    callable(signal dict) -> "eagle3" / "dflash"), thresholds and ``lazy`` are read every round, so changing them
    on the bundle (``set_category``) applies to a decoder that is already built.
    """

    batch_refusal = ("WhiFlash routes each round for one prompt at a time: call generate once per prompt, or decode "
                     "a batch with speculative_mode='dflash' or an EAGLE-3 chain")

    def __init__(self, ar: Eagle3ChainProposer, parallel: DFlashProposer, target, settings, seed: int = 0):
        self.proposers = {AR: ar, PARALLEL: parallel}
        final_layer = len(decoder_layers(target)) - 1
        # One tap list for the target; each drafter reads its own columns of the concatenated features.
        self.tapped_layer_ids = sorted(set(ar.tapped_layer_ids) | set(parallel.tapped_layer_ids) | {final_layer})
        hidden = target.config.get_text_config(decoder=True).hidden_size
        self._columns = {
            name: torch.cat([torch.arange(self.tapped_layer_ids.index(i) * hidden,
                                          (self.tapped_layer_ids.index(i) + 1) * hidden)
                             for i in proposer.tapped_layer_ids])
            for name, proposer in self.proposers.items()
        }
        final = self.tapped_layer_ids.index(final_layer)
        self._final_columns = slice(final * hidden, (final + 1) * hidden)
        self.block_size = max(ar.block_size, parallel.block_size)
        self.cache_margin = max(getattr(ar, "cache_margin", 0), getattr(parallel, "cache_margin", 0))
        self.settings = settings
        self._rng = random.Random(seed)
        self.forward_calls = 0

    # ------------------------------------------------------------------ routing
    def choose(self, signal: dict) -> str:
        settings = self.settings
        router = settings.router
        if callable(router):
            choice = router(signal)
        elif router == "entropy":
            choice = AR if full_entropy(signal["logits"]) > settings.entropy_threshold else PARALLEL
        elif router == "neural":
            mlp = settings.neural_router
            with torch.no_grad():
                predicted = float(mlp(signal["hidden"][None].to(mlp.dtype)))
            choice = AR if predicted > settings.neural_threshold else PARALLEL
        elif router in (AR, PARALLEL):
            choice = router
        elif router == "random":
            choice = self._rng.choice((AR, PARALLEL))
        else:
            raise ValueError(f"unknown router {router!r}")
        if choice not in (AR, PARALLEL):
            raise ValueError(f"a WhiFlash router must return {AR!r} or {PARALLEL!r}, got {choice!r}")
        return choice

    # ------------------------------------------------------------------ proposer protocol
    def start(self, session, prompt_features: torch.Tensor) -> None:
        self.session = session
        for name, proposer in self.proposers.items():
            proposer.start(session, prompt_features[..., self._columns[name]])
        self.backlog = {name: [] for name in self.proposers}  # features of committed rows a drafter has not seen
        # How many leading rows of each proposer's ``pending`` are committed (the prompt's: all of them).
        self.valid_pending = {name: prompt_features.shape[1] for name in self.proposers}
        self.forward_calls = 0
        self.drafter_per_round: list[str] = []
        self.backlog_sizes: list[int] = []
        self.active = None
        self.signal = None

    def observe(self, logits_row: torch.Tensor, features_row: torch.Tensor) -> None:
        """The target at the last accepted position (the row that produced the newest token): logits [V],
        features [n_taps*H] (the router reads the final layer's columns)."""
        self.signal = {"logits": logits_row, "hidden": features_row[self._final_columns]}

    def propose(self):
        # The router also gets the slot of the last committed token (where this round's drafts start).
        choice = self.choose({**self.signal, "position": self.session.last_slot}) if self.signal is not None \
            else PARALLEL
        proposer = self.proposers[choice]
        if self.backlog[choice]:
            # Lazy catch-up: everything committed while this drafter sat out, prefilled in its next forward.
            self._gather_backlog(choice)
            self.backlog_sizes.append(proposer.pending.shape[1])
        self.active = choice
        self.drafter_per_round.append(choice)
        calls = proposer.forward_calls
        draft = proposer.propose()
        self.forward_calls += proposer.forward_calls - calls
        return draft

    def round_records(self) -> dict[str, list]:
        """Per-round records for the call's statistics."""
        return {"drafter_per_round": self.drafter_per_round, "backlog_sizes": self.backlog_sizes}

    def commit(self, verify_features: torch.Tensor, n_committed: torch.Tensor) -> None:
        n_committed = int(n_committed[0])  # batch 1: the router decides on the host anyway
        for name, proposer in self.proposers.items():
            columns = verify_features[..., self._columns[name]]
            if name == self.active:
                proposer.commit(columns, n_committed)
                self.valid_pending[name] = n_committed
            else:
                self.backlog[name].append(columns[:, :n_committed])
        if not self.settings.lazy:  # eager updating: the inactive drafter prefills its backlog every round
            for name, proposer in self.proposers.items():
                if name != self.active and self.backlog[name]:
                    self._gather_backlog(name)
                    proposer.prefill_context()
                    self.valid_pending[name] = proposer.pending.shape[1]

    def _gather_backlog(self, name: str) -> None:
        """pending = its committed pending rows, then every row committed since (all committed, in slot order)."""
        proposer = self.proposers[name]
        kept = proposer.pending[:, : self.valid_pending[name]]
        proposer.pending = torch.cat([kept, *self.backlog[name]], dim=1)
        self.valid_pending[name] = proposer.pending.shape[1]
        self.backlog[name] = []
