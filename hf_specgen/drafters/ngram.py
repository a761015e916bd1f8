"""Prompt lookup: continue the sequence the way it continued after an earlier occurrence of its last n tokens."""

from __future__ import annotations

import torch


def ngram_candidates(sequence: list[int], max_ngram: int = 4, max_tokens: int = 6) -> list[int]:
    """Up to ``max_tokens`` tokens that followed the EARLIEST earlier occurrence of the sequence's last n tokens,
    trying n = max_ngram down to 1 (FLy's MLA convention); [] when nothing matches."""
    length = len(sequence)
    if max_tokens <= 0 or length < 2:
        return []
    seq = torch.tensor(sequence)
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = seq[: length - 1].unfold(0, n, 1)  # [L-n, n]: every n-gram that has a following token
        hits = (windows == seq[length - n:]).all(dim=1).nonzero()
        if len(hits):
            start = int(hits[0]) + n
            return sequence[start: start + max_tokens]
    return []
