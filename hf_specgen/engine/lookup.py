"""Copied tokens (``prompt_lookup``): rows that repeat their own text verify the copy instead of the drafter's block.

Prompt lookup decoding (transformers' ``prompt_lookup_num_tokens``, vLLM's n-gram speculator) finds a row's last few
tokens earlier in its sequence and proposes what followed them there. Here it runs beside the drafter rather than
instead of it: on a GPU on the device over the session's token buffer with fixed shapes (no host read, no new shape
for a compiled step: ``PromptLookup``), on a CPU in Python over n-gram tables kept up as tokens commit
(``HostPromptLookup``, the same choices at a fifth of the cost a round). For one prompt, a round whose row has a
3-token match (``copies_next``, read with the previous round's numbers) may verify the copy alone (``copy_block``;
``width_policy.CopyingWidthPolicy`` decides); otherwise, and in batches, ``PromptLookup.overlay`` decides per row
which of the copy and the drafter's block to verify (docs/methods.md).
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
    there). ``CommittedNgrams`` gives the same for a buffer in host memory, in a fraction of the time."""
    batch, capacity = tokens.shape
    device = tokens.device
    sizes = sorted(n for n in ngram_sizes if n < capacity)
    matched = torch.zeros(batch, dtype=torch.long, device=device)
    start = torch.zeros(batch, dtype=torch.long, device=device)
    if sizes:
        longest = sizes[-1]
        slots = torch.arange(capacity, device=device)
        tail = tokens.gather(1, (lengths[:, None] - longest + slots[:longest]).clamp(min=0))  # [B, longest]
        same = tokens[:, None, :] == tail[:, :, None]  # [B, longest, C]: slot i holds the tail's j-th token
        after_padding = slots >= first_real[:, None]  # [B, C]
        starts_here = same[:, -1]  # [B, C - n + 1]: the tail's last n tokens occur from slot i on (here n = 1)
        for n in range(2, longest + 1):
            starts_here = same[:, longest - n, : capacity - n + 1] & starts_here[:, 1:]
            if n not in sizes:
                continue
            # an earlier occurrence (not the tail itself), followed by a committed token, past the padding
            span = slots[: capacity - n + 1]
            earlier = starts_here & after_padding[:, : capacity - n + 1] & (span < (lengths - n)[:, None])
            latest = torch.where(earlier, span, -1).amax(dim=1)  # [B]
            found = latest >= 0  # sizes rise: a longer match replaces a shorter one
            start = torch.where(found, latest + n, start)
            matched = torch.where(found, n, matched)
    # Past the committed end the copy continues as it went on from ``start``: the text is repeating itself with period
    # lengths - start (a loop, or a list), so the draft repeats it too.
    period = (lengths - start).clamp(min=1)[:, None]
    follow = start[:, None] + torch.arange(count, device=device)[None] % period  # [B, count]
    return matched > 0, matched, tokens.gather(1, follow.clamp(max=capacity - 1))


class CommittedNgrams:
    """``lookup_drafts`` for a buffer in host memory (a CPU's decoding), kept up as tokens commit: per row, its
    committed tokens as a list and, per n-gram size, a dict from each n-gram followed by a committed token to its
    latest start. A round adds the n-grams its few new tokens complete and looks the tail up in O(1), where a search
    over the buffer costs a dozen tensor operations, each several microseconds on a CPU whose caches a forward just
    filled (on a 2-core machine a small model's round takes a few milliseconds)."""

    def __init__(self, ngram_sizes: tuple[int, ...]):
        self.sizes = sorted(ngram_sizes, reverse=True)
        self.rows: dict[int, tuple[list[int], dict[int, dict]]] = {}  # row id -> (tokens past the padding, tables)

    def _row(self, row_id: int, tokens: torch.Tensor, first: int, length: int):
        committed, tables = self.rows.get(row_id) or ([], {})
        have = first + len(committed)
        if length < have or not tables:  # a new row, or one cut back (a stop string): index it again
            committed, tables = tokens[first:length].tolist(), {n: {} for n in self.sizes}
            self.rows[row_id] = committed, tables
            begin = 0
        else:
            begin = len(committed)
            committed.extend(tokens[have:length].tolist())
        for n, table in tables.items():  # n-grams that a committed token now follows: those starting before len - n
            for i in range(max(begin - n, 0), len(committed) - n):
                table[tuple(committed[i: i + n])] = i
        return committed, tables

    def find(self, session, count: int) -> tuple[list[int], list[list[int]]]:
        """Per row of the session: the matched n-gram's size (0: none) and the ``count`` tokens it copies (any tokens
        where none), as ``lookup_drafts`` gives them."""
        lengths, firsts = session.lengths.tolist(), session.left_padding.tolist()
        row_ids = getattr(session, "row_ids", range(len(lengths)))
        sizes, drafts = [], []
        for b, (row_id, length, first) in enumerate(zip(row_ids, lengths, firsts)):
            committed, tables = self._row(row_id, session.tokens[b], first, length)
            size, start = 0, 0
            for n in self.sizes:
                latest = tables[n].get(tuple(committed[-n:])) if len(committed) > n else None
                if latest is not None:
                    size, start = n, latest + n
                    break
            period = max(len(committed) - start, 1)  # past the end the copy repeats the text from start on
            drafts.append([committed[start + j % period] for j in range(count)] if size else [0] * count)
            sizes.append(size)
        return sizes, drafts


class PromptLookup:
    """A drafted block [B, w] (column 0: each row's last committed token) with copied tokens where a row repeats its
    own text, and what the target's verdicts say about them (one object per decoding call; device tensors only, so a
    round reads nothing more on the host; ``HostPromptLookup`` makes the same choices on a CPU).

    A row whose last 3 tokens occurred earlier may take the tokens that followed their latest earlier occurrence;
    with only its last 2 matching, only where that continuation starts with the drafter's own first draft (a
    2-token match alone is common in code and chat that copy nothing). Whether it does depends on who has been right
    where the two disagreed: at the first slot where the copy and the drafter's block differ, the target's token
    (known once the verify accepted everything before that slot, which the two share) is one of theirs, or neither.
    Each match size keeps a score, copy wins minus drafter wins, and the copy is taken while its score is >= 0: a
    weak drafter cedes copied text to the lookup within a few rounds, and a strong one keeps its blocks (its
    drafts win where a copy would have led astray). Lossless either way: only proposals change."""

    SIZES = (3, 2)

    def __init__(self, device, count: int):
        self.count = count  # the most copied tokens a round verifies (its widest block, less the committed token)
        self.score = torch.zeros(len(self.SIZES), dtype=torch.long, device=device)  # per match size, as SIZES
        self.taken_rows = torch.zeros((), dtype=torch.long, device=device)  # rows and rounds that verified a copy
        self._round = None
        # (found, size, copied) for the tokens committed so far: looked up once a round, when the round's tokens are
        # appended (copies_next), and used by the next round's overlay or copy block
        self._found = None

    @staticmethod
    def for_device(device, count: int) -> "PromptLookup":
        """The lookup for a call on ``device``: this one off a CPU, ``HostPromptLookup`` on one."""
        return HostPromptLookup(count) if torch.device(device).type == "cpu" else PromptLookup(device, count)

    def _find(self, session, count: int):
        return lookup_drafts(session.tokens, session.lengths, session.left_padding, count, self.SIZES)

    def _copies(self, session, count: int):
        """The lookup ``copies_next`` made for the session's current tokens (taken once), else a new one."""
        found, self._found = self._found, None
        if found is None or found[2].shape[0] != session.tokens.shape[0] or found[2].shape[1] < count:
            found = self._find(session, max(count, self.count))  # (a batch that dropped rows since)
        return found

    def copies_next(self, session) -> torch.Tensor:
        """[B] long, 1 where the row has a copy at hand: its last 3 tokens occurred earlier and 3-token copies are
        trusted (the next overlay takes it whatever the drafter drafts, or the round verifies it alone). Computed after
        a round's tokens are appended and read with that round's numbers, so the width policy knows it before choosing
        the next round (``CopyingWidthPolicy``); the next round's overlay or copy block reuses this lookup."""
        self._found = self._find(session, self.count)
        return ((self._found[1] == self.SIZES[0]) & (self.score[0] >= 0)).long()

    def agreement_of_unused_copy(self, session, new_tokens: torch.Tensor) -> torch.Tensor:
        """[B] long: how many of a round's tokens, from its first, the copy looked up when the round began matches
        (new_tokens [B, W]: the target's token at each verified row). For a round with a copy at hand that verified
        the drafter's block or a plain step instead: the copy would have kept that many of the tokens the round
        committed (all of them, and perhaps more, where it matches as many as were committed), so its estimate learns
        without a round of its own (``CopyingWidthPolicy.observe_unused_copy``); 0 for a row with no copy. Call
        before the round's tokens are appended."""
        found, _, copied = self._found if self._found is not None else self._find(session, self.count)
        n = min(copied.shape[1], new_tokens.shape[1])
        return (copied[:, :n] == new_tokens[:, :n]).long().cumprod(dim=1).sum(dim=1) * found  # 0 without a copy

    def copy_block(self, session, width: int) -> torch.Tensor:
        """[B, width]: each row's last committed token, then the width - 1 tokens its 3-token match copies (for rows
        that ``copies_next`` named: a round verifying copied tokens alone, with no drafter's block)."""
        copied = self._copies(session, width - 1)[2][:, : width - 1]
        self.taken_rows += copied.shape[0]
        return torch.cat([session.token_block(session.last_slots, 1), copied], dim=1)

    def overlay(self, draft: torch.Tensor, session) -> torch.Tensor:
        """draft [B, w] -> the block to verify, [B, w]."""
        drafted = draft[:, 1:]  # [B, w-1]
        found, size, copied = self._copies(session, drafted.shape[1])
        copied = copied[:, : drafted.shape[1]]
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


class HostPromptLookup(PromptLookup):
    """``PromptLookup`` for a buffer in host memory (a CPU's decoding): the same lookups, choices and scores, made in
    Python over ``CommittedNgrams``' lists, with tensors built only for the blocks verified and the numbers read. On a
    CPU each of the device way's few dozen tensor operations a round costs several microseconds (on the tiny world's
    DFlash rounds of about 8.5 ms, 0.54 ms a round against 0.1 ms this way, docs/width-policy.md)."""

    def __init__(self, count: int):
        self.count = count
        self.score = [0] * len(self.SIZES)
        self.taken_rows = 0
        self._round = None
        self._found = None  # (sizes, copied): per row, as CommittedNgrams.find gives them
        self._index = CommittedNgrams(self.SIZES)

    def _copies(self, session, count: int):
        found, self._found = self._found, None
        if found is None or len(found[0]) != session.tokens.shape[0] or len(found[1][0]) < count:
            found = self._index.find(session, max(count, self.count))
        return found

    def copies_next(self, session) -> torch.Tensor:
        self._found = self._index.find(session, self.count)
        trusted = self.score[0] >= 0
        return torch.tensor([int(trusted and size == self.SIZES[0]) for size in self._found[0]])

    def agreement_of_unused_copy(self, session, new_tokens: torch.Tensor) -> torch.Tensor:
        sizes, copied = self._found if self._found is not None else self._index.find(session, self.count)
        agreed = []
        for size, row, verified in zip(sizes, copied, new_tokens.tolist()):
            matching = [c == t for c, t in zip(row, verified)] if size else [False]
            agreed.append(matching.index(False) if False in matching else len(matching))
        return torch.tensor(agreed)

    def copy_block(self, session, width: int) -> torch.Tensor:
        _, copied = self._copies(session, width - 1)
        self.taken_rows += len(copied)
        return torch.cat([session.token_block(session.last_slots, 1),
                          torch.tensor([row[: width - 1] for row in copied])], dim=1)

    def overlay(self, draft: torch.Tensor, session) -> torch.Tensor:
        drafts = draft.shape[1] - 1
        sizes, copied = self._copies(session, drafts)
        taken = [size > 0 and self.score[self.SIZES.index(size)] >= 0 and (size >= 3 or row[0] == first)
                 for size, row, first in zip(sizes, copied, draft[:, 1].tolist())]
        self.taken_rows += sum(taken)
        self._round = sizes, copied, draft
        if not any(taken):
            return draft
        copies = torch.tensor([row[:drafts] for row in copied])
        return torch.cat([draft[:, :1], torch.where(torch.tensor(taken)[:, None], copies, draft[:, 1:])], dim=1)

    def learn(self, n_accepted: torch.Tensor, new_tokens: torch.Tensor, active: torch.Tensor) -> None:
        sizes, copied, draft = self._round
        if not any(sizes):  # no row had a copy: nothing to judge
            return
        drafted = draft[:, 1:].tolist()
        for size, copy, mine, accepted, verified, verifies in zip(sizes, copied, drafted, n_accepted.tolist(),
                                                                  new_tokens.tolist(), active.tolist()):
            first = next((j for j, (c, d) in enumerate(zip(copy, mine)) if c != d), len(mine))
            if size and verifies and first < len(mine) and accepted >= first:  # the target's token there is known
                target = verified[first]
                self.score[self.SIZES.index(size)] += (target == copy[first]) - (target == mine[first])
