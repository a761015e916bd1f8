"""Per-call statistics returned as ``out.speculative_stats``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


PLAIN = "plain"  # WhiFlash: a round no drafter drafted (a plain step, or copied tokens verified alone)

@dataclass
class SpeculativeStats:
    """What one speculative ``generate`` call did.

    acceptance_lengths: tokens committed in each round (accepted drafts + the target's bonus token).
    lossy: True for FLy: tokens may differ from the target's own. Then, per round, mismatches_per_round counts
    draft tokens the target disagreed with and rescued_per_round those FLy emitted anyway.
    draft_forwards: drafter forward passes (a draft LM with n-gram MLA needs fewer than tokens drafted).
    Times are wall-clock seconds; decode excludes the prefill (the DFlash paper's convention).
    """

    mode: str
    block_size: int
    lossy: bool = False
    batch_size: int = 1
    acceptance_lengths: list[int] = field(default_factory=list)  # batches: every active row's, round by round
    row_acceptance_lengths: list[list[int]] = field(default_factory=list)  # per batch row
    mismatches_per_round: list[int] = field(default_factory=list)
    rescued_per_round: list[int] = field(default_factory=list)
    draft_forwards: int = 0
    lookup_drafts: int = 0  # prompt_lookup: the rows and rounds that verified copied tokens instead of the drafter's
    rounds: int = 0
    drafter_per_round: list[str] = field(default_factory=list)  # WhiFlash: which drafter proposed each round (PLAIN)
    backlog_sizes: list[int] = field(default_factory=list)  # WhiFlash: rows prefilled at each lazy catch-up
    round_widths: list[int] = field(default_factory=list)  # adaptive width: rows verified each round (1 = plain step)
    round_draft_seconds: list[float] = field(default_factory=list)  # per round: drafting (catch-up included)
    round_seconds: list[float] = field(default_factory=list)  # per round: draft + verify + bookkeeping
    # batches: the rows each round's forwards computed (an eager batch drops each row that is done)
    round_batch_sizes: list[int] = field(default_factory=list)
    new_tokens: int = 0  # all rows together
    row_new_tokens: list[int] = field(default_factory=list)
    prefill_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    decode_time: float = 0.0

    def add_round(self, committed: list[int], rows: list[int], mismatches: list[int] | None = None,
                  rescued: list[int] | None = None) -> None:
        """One decode round: ``committed[i]`` tokens for batch row ``rows[i]`` (FLy: that row's mismatches[i] and
        rescued[i] too)."""
        if not self.row_acceptance_lengths:
            self.row_acceptance_lengths = [[] for _ in range(self.batch_size)]
        self.rounds += 1
        for row, count in zip(rows, committed):
            self.acceptance_lengths.append(count)
            self.row_acceptance_lengths[row].append(count)
        if mismatches is not None:
            self.mismatches_per_round.append(sum(mismatches))
            self.rescued_per_round.append(sum(rescued))

    def add_round_times(self, draft: float, verify: float, total: float) -> None:
        self.draft_time += draft
        self.verify_time += verify
        self.round_draft_seconds.append(draft)
        self.round_seconds.append(total)

    @property
    def num_rounds(self) -> int:
        return self.rounds

    @property
    def mean_acceptance_length(self) -> float:
        """tau: committed tokens per round (a batch: per row and round, pooled over the rows)."""
        return sum(self.acceptance_lengths) / max(1, len(self.acceptance_lengths))

    @property
    def switches(self) -> int:
        """WhiFlash: drafting rounds whose drafter differs from the previous drafting round's (plain steps between
        them, PLAIN in ``drafter_per_round``, are no drafter)."""
        drafters = [name for name in self.drafter_per_round if name != PLAIN]
        return sum(a != b for a, b in zip(drafters, drafters[1:]))

    @property
    def rescued_tokens(self) -> int:
        """FLy: emitted draft tokens that exact verification would have refused."""
        return sum(self.rescued_per_round)

    @property
    def initial_mismatches(self) -> int:
        """FLy: draft tokens the target disagreed with, before any rescue."""
        return sum(self.mismatches_per_round)

    @property
    def other_time(self) -> float:
        """Decode time spent outside the drafter and target forwards (bookkeeping, masks, stop checks)."""
        return max(0.0, self.decode_time - self.draft_time - self.verify_time)

    @property
    def decode_tokens_per_second(self) -> float:
        # The first new token of each row comes from the prefill, so decode produced new_tokens - batch_size.
        decoded = max(0, self.new_tokens - self.batch_size)
        return decoded / self.decode_time if self.decode_time > 0 else float("nan")

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "block_size": self.block_size,
            "lossy": self.lossy,
            "batch_size": self.batch_size,
            "draft_forwards": self.draft_forwards,
            "initial_mismatches": self.initial_mismatches,
            "rescued_tokens": self.rescued_tokens,
            "rescued_per_round": list(self.rescued_per_round),
            "drafter_per_round": list(self.drafter_per_round),
            "switches": self.switches,
            "backlog_sizes": list(self.backlog_sizes),
            "round_widths": list(self.round_widths),
            "num_rounds": self.num_rounds,
            "new_tokens": self.new_tokens,
            "row_new_tokens": list(self.row_new_tokens),
            "row_acceptance_lengths": [list(r) for r in self.row_acceptance_lengths],
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_lengths": list(self.acceptance_lengths),
            "prefill_time": self.prefill_time,
            "draft_time": self.draft_time,
            "verify_time": self.verify_time,
            "other_time": self.other_time,
            "decode_time": self.decode_time,
            "decode_tokens_per_second": self.decode_tokens_per_second,
        }


class RoundClock:
    """Marks points of a call and turns them into seconds once, at the end.

    On CUDA a mark is a recorded event (no host synchronization inside the rounds; ``finish`` synchronizes once), so
    GPU work is charged to the phase that launched it; on a CPU a mark is the wall clock.
    """

    def __init__(self, device: torch.device):
        self._cuda = device.type == "cuda"

    def mark(self):
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def finish(self) -> None:
        if self._cuda:
            torch.cuda.synchronize()

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self._cuda else end - start
