"""WhiFlash: every round a router picks the EAGLE-3 (autoregressive tree) drafter or the DFlash (block) drafter.

The target verifies whatever the chosen drafter proposed exactly as usual, so the output is lossless for ANY
routing; the router only decides speed. Per round:

  1. the router reads the target at the last accepted position: the full-vocabulary entropy of its next-token
     distribution (WhiFlash-Entropy: entropy > threshold -> EAGLE-3) or its final decoder layer's hidden state
     through a small MLP predicting AL_eagle - AL_dflash (WhiFlash-Neural: prediction > threshold -> EAGLE-3).
     In a batch every unfinished row votes and the batch takes the drafter most rows chose (DFlash on a tie): both
     drafters stay batched, and the verify keeps one shape;
  2. lazy catch-up: the drafter that sat out does not see the rounds it missed until it is chosen again; then its
     whole backlog (the committed tokens and their target features: rounds of [B, W, F] rows of which each batch
     row committed its own count) is compacted so each row's committed rows come first, and prefilled in ONE
     KV-only forward. With ``lazy=False`` the inactive drafter is brought up to date every round instead (the
     paper's baseline);
  3. the chosen drafter proposes (a tree or a block), the target verifies, both drafters' bookkeeping is updated.

In the default call (no width named) with an EAGLE-3 chain, the width policy takes the router's vote as the round's
context and picks the drafter and width that pay most on this machine (engine.width_policy.RoutedWidthPolicy).
"""

from __future__ import annotations

import copy
import random

import torch

from ..engine.stats import PLAIN
from ..engine.taps import decoder_layers
from .dflash import DFlashProposer
from .eagle3 import Eagle3ChainProposer

AR, PARALLEL = "eagle3", "dflash"


def full_entropy(logits: torch.Tensor) -> float:
    """Entropy in nats of softmax(logits) over the whole vocabulary. logits: [V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logp.exp() * logp).sum())


def route(settings, signal: dict, rng: random.Random) -> str:
    """The router's choice for one batch row from its signal: {"logits": [V], "hidden": [H] (the target's final
    decoder layer at the row's newest committed token), "position": slot}. ``settings``: the WhiFlash bundle (its
    router, thresholds); ``rng``: for the random router. Also what ``scripts/policy_replay.py`` replays."""
    router = settings.router
    if callable(router):
        choice = router(signal)
    elif router == "entropy":
        choice = AR if full_entropy(signal["logits"]) > settings.entropy_threshold else PARALLEL
    elif router == "neural":
        choice = neural_choices(settings, signal["hidden"][None])[0]
    elif router in (AR, PARALLEL):
        choice = router
    elif router == "random":
        choice = rng.choice((AR, PARALLEL))
    else:
        raise ValueError(f"unknown router {router!r}")
    if choice not in (AR, PARALLEL):
        raise ValueError(f"a WhiFlash router must return {AR!r} or {PARALLEL!r}, got {choice!r}")
    return choice


def neural_choices(settings, hidden: torch.Tensor, mlp: torch.nn.Module | None = None) -> list[str]:
    """The neural router's choice for each row of hidden [N, H] (the target's final decoder layer at each row's newest
    committed token), in one forward: EAGLE-3 where its predicted AL_eagle - AL_dflash exceeds the threshold.
    ``mlp``: the router to run (default: the bundle's own; a call on a CPU passes an fp32 copy, ``cpu_router``)."""
    mlp = mlp if mlp is not None else settings.neural_router
    with torch.no_grad():
        predicted = mlp(hidden.to(mlp.dtype)).tolist()
    return [AR if value > settings.neural_threshold else PARALLEL for value in predicted]


def cpu_router(mlp: torch.nn.Module | None) -> torch.nn.Module | None:
    """The neural router to run each round of a call on a CPU: an fp32 copy of a bf16 or fp16 one (the library's bf16
    kernels are the slower for its two small products: timed in the tiny world's loop, a round's vote took 260 us
    with the bf16 router and 205 us with the copy); a copy per call (``start``), so a router trained since is never
    stale."""
    if mlp is None or mlp.dtype == torch.float32 or next(mlp.parameters()).device.type != "cpu":
        return mlp
    return copy.deepcopy(mlp).float()


class WhiFlashProposer:
    """Routes between two proposers that share the target's taps; see the module docstring.

    ``settings`` is the WhiFlash bundle: its router ("entropy" | "neural" | "eagle3" | "dflash" | "random" | a
    callable(signal dict) -> "eagle3" / "dflash"), thresholds and ``lazy`` are read every round, so changing them
    on the bundle (``set_category``) applies to a decoder that is already built.
    """

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
        self.drafts_trees = getattr(ar, "drafts_trees", False)  # its EAGLE-3 side may draft trees
        # With an EAGLE-3 chain both drafters draft any width: the default call's policy then picks each round's
        # drafter and width itself (engine.width_policy.RoutedWidthPolicy, through ``vote`` and ``use_drafter``).
        # A tree is verified whole, and the router alone picks (a plain step or the router's drafter).
        self.drafts_any_width = not self.drafts_trees
        # An EAGLE-3 chain built to stop when unsure does so in the rounds it drafts (propose(stop_below=...));
        # self.confidences is then its drafts' probabilities, and None after a DFlash round, whose block is one forward
        self.stops_when_unsure = getattr(ar, "stops_when_unsure", False)
        self.confidences = None
        self._chosen = None  # the drafter the policy picked for the next proposal (None: the router's vote)
        self._router = None  # the neural router this call runs (start: cpu_router)

    # ------------------------------------------------------------------ routing
    def choose(self, signal: dict) -> str:
        """One batch row's choice from its signal: {"logits": [V], "hidden": [H], "position": slot}."""
        return route(self.settings, signal, self._rng)

    def vote(self) -> str:
        """The batch's drafter this round: the one most unfinished rows choose (DFlash on a tie, and before any
        signal). The neural router reads every row's hidden state in one forward (row by row, a batch of 16 spent
        about 2 ms a round on a CPU in 16 small forwards)."""
        if self.settings.router == "neural" and self.signals:
            votes = neural_choices(self.settings, torch.stack([signal["hidden"] for signal in self.signals]),
                                   self._router)
        else:
            votes = [self.choose(signal) for signal in self.signals]
        return AR if 2 * votes.count(AR) > len(votes) else PARALLEL

    def use_drafter(self, name: str) -> None:
        """The width policy's pick for the next ``propose`` (instead of the router's vote)."""
        self._chosen = name

    # ------------------------------------------------------------------ proposer protocol
    def start(self, session, prompt_features: torch.Tensor) -> None:
        self.session = session
        self._router = cpu_router(self.settings.neural_router)
        for name, proposer in self.proposers.items():
            proposer.start(session, prompt_features[..., self._columns[name]])
        # What each drafter has not absorbed, oldest first: (features [B, R, F], rows committed per batch row [B]).
        # Its own pending rows (the prompt, or its last verify) lead: they are its committed rows since its context.
        prompt_rows = torch.full_like(session.lengths, prompt_features.shape[1])
        self.unseen = {name: [] for name in self.proposers}
        self.pending_counts = {name: prompt_rows for name in self.proposers}
        self.forward_calls = 0
        self.drafter_per_round: list[str] = []
        self.backlog_sizes: list[int] = []
        self.active = None
        self.signals = []

    def observe(self, logits_rows: torch.Tensor, features_rows: torch.Tensor, rows: list[int]) -> None:
        """The target at each batch row's newest committed token: logits [B, V], features [B, n_taps*H] (the router
        reads the final layer's columns); ``rows``: the unfinished rows, the ones that vote."""
        self.signals = [{"logits": logits_rows[b], "hidden": features_rows[b, self._final_columns],
                         "position": self.session.host_lengths[b] - 1} for b in rows]

    def propose(self, width: int | None = None, whole_block: bool = False, stop_below: float | None = None):
        """The round's drafter's proposal (``width`` / ``whole_block``: see DFlashProposer.propose; ``stop_below``:
        see Eagle3ChainProposer.propose, for EAGLE-3's rounds)."""
        choice, self._chosen = self._chosen or self.vote(), None
        proposer = self.proposers[choice]
        if self.unseen[choice]:
            # Lazy catch-up: everything committed while this drafter sat out, prefilled in one forward.
            self.backlog_sizes.append(int(self._catch_up(choice).max()))
        self.active = choice
        self.drafter_per_round.append(choice)
        calls = proposer.forward_calls
        stops = stop_below is not None and choice == AR
        draft = (proposer.propose(width, whole_block, **({"stop_below": stop_below} if stops else {}))
                 if width is not None else proposer.propose())
        self.confidences = proposer.confidences if stops else None
        self.forward_calls += proposer.forward_calls - calls
        return draft

    @property
    def unread_rows(self) -> dict[str, int]:
        """Per drafter, the rows its next drafting round reads first: its own unread pending rows (the prompt's,
        plain steps': PendingContextRows.unread_rows) and its backlog of the rounds it sat out. The width policy
        charges each drafter's probe its own (RoutedWidthPolicy.set_unread)."""
        return {name: proposer.unread_rows + sum(rows.shape[1] for rows, _ in self.unseen[name])
                for name, proposer in self.proposers.items()}

    def round_records(self) -> dict[str, list]:
        """Per-round records for the call's statistics."""
        return {"drafter_per_round": self.drafter_per_round, "backlog_sizes": self.backlog_sizes}

    def commit(self, verify_features: torch.Tensor, n_committed: torch.Tensor) -> None:
        """verify_features [B, W, n_taps*H]; n_committed [B] rows each batch row committed (0 when done)."""
        for name, proposer in self.proposers.items():
            columns = verify_features[..., self._columns[name]]
            if name == self.active:
                proposer.commit(columns, n_committed)
                self.pending_counts[name] = n_committed
            else:
                self.unseen[name].append((columns, n_committed))
        if not self.settings.lazy:  # eager updating: the inactive drafter prefills its backlog every round
            for name in self.proposers:
                if name != self.active:
                    self._catch_up(name)

    def commit_plain(self, verify_features: torch.Tensor, n_committed: torch.Tensor, rows: int = 1) -> None:
        """A round neither drafter drafted (a plain step, or copied tokens verified alone): its committed rows
        (``n_committed`` of ``verify_features``' per batch row) join both backlogs, caught up as any round they sat
        out."""
        self.drafter_per_round.append(PLAIN)
        for name in self.proposers:
            self.unseen[name].append((verify_features[..., self._columns[name]], n_committed))
        if not self.settings.lazy:
            for name in self.proposers:
                self._catch_up(name)

    def keep_rows(self, rows: list[int]) -> None:
        """An eager batch drops its finished rows (``SpeculativeDecoder``): both drafters, and each one's backlog,
        keep ``rows`` only. (The votes need nothing: ``observe`` read the unfinished rows alone, in order.) While a
        router's batch kept its finished rows, the tiny world's WhiFlash at batch 16 ran its rounds over 16 rows to
        the end, at 0.93x stock batched generate with AVX2 fp32 costs, where DFlash and EAGLE-3 alone dropped theirs
        and ran at 1.43x and 1.36x."""
        index = torch.tensor(rows, dtype=torch.long, device=self.session.device)
        for name, proposer in self.proposers.items():
            proposer.keep_rows(rows)
            self.pending_counts[name] = self.pending_counts[name].index_select(0, index)
            self.unseen[name] = [(features.index_select(0, index), counts.index_select(0, index))
                                 for features, counts in self.unseen[name]]

    def _catch_up(self, name: str) -> torch.Tensor:
        """Hand drafter ``name`` every row it has not seen, in one forward; returns how many each batch row had [B]."""
        proposer = self.proposers[name]
        parts = [(proposer.pending, self.pending_counts[name]), *self.unseen[name]]
        features = torch.cat([rows for rows, _ in parts], dim=1)  # [B, T, F]
        committed = torch.cat([torch.arange(rows.shape[1], device=rows.device) < counts[:, None]
                               for rows, counts in parts], dim=1)  # [B, T]
        # Each batch row's committed rows first, in slot order (a stable sort on "not committed"), the rest after.
        order = torch.sort((~committed).to(torch.uint8), dim=1, stable=True).indices
        features = features.gather(1, order[:, :, None].expand(-1, -1, features.shape[-1]))
        counts = committed.sum(dim=1)  # [B]
        proposer.absorb(features, counts)
        self.pending_counts[name] = counts.clamp(max=proposer.pending.shape[1])  # what absorb left pending
        self.unseen[name] = []
        return counts
