"""Copied tokens (``prompt_lookup``): rows that repeat their own text verify the copy instead of the drafter's block.

Prompt lookup decoding (transformers' ``prompt_lookup_num_tokens``, vLLM's n-gram speculator) finds a row's last few
tokens earlier in its sequence and proposes what followed them there. Here it runs on the device over the session's
token buffer with fixed shapes (no host read, no new shape for a compiled step), beside the drafter rather than
instead of it. For one prompt, a round whose row has a 3-token match (``copies_next``, read with the previous round's
numbers) may verify the copy alone (``copy_block``; ``width_policy.CopyingWidthPolicy`` decides); otherwise, and in
batches, ``PromptLookup.overlay`` decides per row which of the copy and the drafter's block to verify
(docs/methods.md).
"""

from __future__ import annotations

import torch


def lookup_drafts(tokens: torch.Tensor, lengths: torch.Tensor, first_real: torch.Tensor, count: int,
                  ngram_sizes: tuple[int, ...] = (3, 2)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt lookup for every batch row at once, on the device (fixed shapes, no host read): the ``count`` tokens that
    followed the LATEST earlier occurrence of the row's last n committed tokens, for the first n of ``ngram_sizes``
    that has one (longer first: a longer match is better evidence of copying).

    tokens [B, C] each row's sequence (prompt left-padded; slots past lengths[b] are stale); lengths [B] committed
    tokens; first_real [B] the first slot that is not padding. Returns (found [B] bool, n [B] the matched n-gram's
    size, 0 when none, drafts [B, count]); rows without a match get any tokens (the caller keeps its own drafts
    there)."""
    batch, capacity = tokens.shape
    device = tokens.device
    start = torch.zeros(batch, dtype=torch.long, device=device)
    matched = torch.zeros(batch, dtype=torch.long, device=device)
    for n in sorted(ngram_sizes, reverse=True):
        if capacity <= n:
            continue
        tail = tokens.gather(1, (lengths[:, None] - n + torch.arange(n, device=device)).clamp(min=0))  # [B, n]
        hits = (tokens.unfold(1, n, 1) == tail[:, None]).all(dim=-1)  # [B, C-n+1]: the n-gram starting at slot i
        slots = torch.arange(hits.shape[1], device=device)[None]
        # an earlier occurrence (not the tail itself), followed by a committed token, past the padding
        hits &= (slots >= first_real[:, None]) & (slots + n < lengths[:, None]) & (lengths[:, None] > n)
        latest = torch.where(hits, slots, -1).max(dim=1).values  # [B]
        new = (latest >= 0) & (matched == 0)
        start = torch.where(new, latest + n, start)
        matched = torch.where(new, n, matched)
    # Past the committed end the copy continues as it went on from ``start``: the text is repeating itself with period
    # lengths - start (a loop, or a list), so the draft repeats it too.
    period = (lengths - start).clamp(min=1)[:, None]
    follow = start[:, None] + torch.arange(count, device=device)[None] % period  # [B, count]
    return matched > 0, matched, tokens.gather(1, follow.clamp(max=capacity - 1))


class PromptLookup:
    """A drafted block [B, w] (column 0: each row's last committed token) with copied tokens where a row repeats its
    own text, and what the target's verdicts say about them (one object per decoding call; device tensors only, so a
    round reads nothing more on the host).

    A row whose last 3 tokens occurred earlier may take the tokens that followed their latest earlier occurrence;
    with only its last 2 matching, only where that continuation starts with the drafter's own first draft (a
    2-token match alone is common in code and chat that copy nothing). Whether it does depends on who has been right
    where the two disagreed: at the first slot where the copy and the drafter's block differ, the target's token
    (known once the verify accepted everything before that slot, which the two share) is one of theirs, or neither.
    Each match size keeps a score, copy wins minus drafter wins, and the copy is taken while its score is >= 0: a
    weak drafter cedes copied text to the lookup within a few rounds, and a strong one keeps its blocks (its
    drafts win where a copy would have led astray). Lossless either way: only proposals change."""

    SIZES = (3, 2)

    def __init__(self, device):
        self.score = torch.zeros(len(self.SIZES), dtype=torch.long, device=device)  # per match size, as SIZES
        self.taken_rows = torch.zeros((), dtype=torch.long, device=device)  # rows and rounds that verified a copy
        self._round = None

    def copies_next(self, session) -> torch.Tensor:
        """[B] long, 1 where the row has a copy at hand: its last 3 tokens occurred earlier and 3-token copies are
        trusted (the next overlay takes it whatever the drafter drafts, or the round verifies it alone). Computed after
        a round's tokens are appended and read with that round's numbers, so the width policy knows it before choosing
        the next round (``CopyingWidthPolicy``)."""
        found, _, _ = lookup_drafts(session.tokens, session.lengths, session.left_padding, 1, self.SIZES[:1])
        return (found & (self.score[0] >= 0)).long()

    def copy_block(self, session, width: int) -> torch.Tensor:
        """[B, width]: each row's last committed token, then the width - 1 tokens its 3-token match copies (for rows
        that ``copies_next`` named: a round verifying copied tokens alone, with no drafter's block)."""
        _, _, copied = lookup_drafts(session.tokens, session.lengths, session.left_padding, width - 1, self.SIZES[:1])
        self.taken_rows += copied.shape[0]
        return torch.cat([session.token_block(session.last_slots, 1), copied], dim=1)

    def overlay(self, draft: torch.Tensor, session) -> torch.Tensor:
        """draft [B, w] -> the block to verify, [B, w]."""
        drafted = draft[:, 1:]  # [B, w-1]
        found, size, copied = lookup_drafts(session.tokens, session.lengths, session.left_padding, drafted.shape[1],
                                            self.SIZES)
        by_size = torch.stack([size == n for n in self.SIZES], dim=1)  # [B, sizes]
        trusted = (by_size & (self.score >= 0)).any(dim=1)  # [B] its match size's score
        taken = found & trusted & ((size >= 3) | (copied[:, 0] == drafted[:, 0]))
        self.taken_rows += taken.sum()
        self._round = (found, by_size, drafted, copied)
        return torch.cat([draft[:, :1], torch.where(taken[:, None], copied, drafted)], dim=1)

    def learn(self, n_accepted: torch.Tensor, new_tokens: torch.Tensor, active: torch.Tensor) -> None:
        """After the verify of the last overlay: n_accepted [B] drafts kept, new_tokens [B, n] the committed tokens
        (row b's token at slot j+1 is new_tokens[b, j] for j <= n_accepted[b]), active [B] the rows that verified."""
        found, by_size, drafted, copied = self._round  # every row with a match: taken or not, it is evidence
        width = drafted.shape[1]
        differ = copied != drafted  # [B, w-1]
        first = torch.where(differ.any(dim=1), differ.int().argmax(dim=1), width)  # [B] first disagreement
        known = found & active & (first < width) & (n_accepted >= first)  # the target's token there is committed
        target = new_tokens.gather(1, first.clamp(max=min(width, new_tokens.shape[1]) - 1)[:, None])[:, 0]
        at = first.clamp(max=width - 1)[:, None]
        verdict = (target == copied.gather(1, at)[:, 0]).long() - (target == drafted.gather(1, at)[:, 0]).long()
        self.score += (by_size & known[:, None]).long().mul(verdict[:, None]).sum(dim=0)
