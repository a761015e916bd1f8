"""Lossless acceptance of a drafted block.

Both rules compare the draft with ONE choice of the target per block position:
  * greedy: the target's argmax;
  * sampling: a sample from the target's (processed) distribution.
Drafts are accepted while they equal that choice; the target's choice at the first mismatch (or after the
last slot) is the bonus token. For a deterministic draft this is exactly speculative (rejection) sampling
with a one-hot draft distribution: a draft token d is kept with probability p(d) and, when rejected, the
replacement is distributed as p restricted to tokens != d. So the output distribution is the target's.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)

# Processors whose output depends on the scores only, not on the tokens so far: they can run on all block
# rows at once. Every other processor (repetition penalty, min length, bad words, ...) sees, for each row,
# exactly the token sequence stock generate would have shown it.
_ROW_INDEPENDENT = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
)


def check_processors(processors: LogitsProcessorList | None) -> None:
    """Refuse, before decoding, a processor that cannot score a verified block: classifier-free guidance
    (``guidance_scale``) runs the model again on an unconditional prompt with a cache of its own that advances one
    token per call, so a block's rows (and rolled-back drafts) would put it out of step: wrong tokens, silently."""
    for processor in processors or ():
        if isinstance(processor, UnbatchedClassifierFreeGuidanceLogitsProcessor):
            raise ValueError("guidance_scale (classifier-free guidance) runs a second, stateful forward of the model "
                             "for every generated token, which a speculative verify cannot reproduce: drop "
                             "guidance_scale, or decode without speculative_mode.")


def process_block_logits(
    logits: torch.Tensor, session, draft: torch.Tensor, processors: LogitsProcessorList, row_tokens=None,
) -> torch.Tensor:
    """Apply generate's logits processors to every row of a verify forward, for every batch row.

    logits:     [B, W, V] target logits; row i of batch row b predicts the token after draft[b, :i+1]
    session:    the DecodingSession (its committed tokens end with draft[:, 0])
    draft:      [B, W] the verified blocks
    row_tokens: for a tree, a function (b, i) -> [1, d] tokens between the root and node i (default:
                draft[b, 1:i+1])
    returns     [B, W, V] float32 scores, as stock generate would compute them one token at a time
    """
    scores = logits.float()
    if not processors:
        return scores
    batch, width, vocab = scores.shape
    if row_tokens is None:
        row_tokens = lambda b, i: draft[b: b + 1, 1: i + 1]  # noqa: E731
    # Each (batch row, block row) as stock generate would show it: the row's committed tokens, then the drafts
    # before it. Rows of equal length go through a processor together, as stock generate's batch does (one call
    # instead of B * W: a min-length processor alone scans the vocabulary each call). Built only when a processor
    # reads the tokens: sampling's warpers alone need none of it.
    groups: dict[int, list[tuple[int, torch.Tensor]]] = {}
    if not all(isinstance(processor, _ROW_INDEPENDENT) for processor in processors):
        for b in range(batch):
            committed = session.row(b)
            for i in range(width):
                sequence = torch.cat([committed, row_tokens(b, i)], dim=1)[0]
                groups.setdefault(len(sequence), []).append((b * width + i, sequence))
    for processor in processors:
        if isinstance(processor, _ROW_INDEPENDENT):  # they read the scores only: all rows at once
            flat = scores.reshape(batch * width, vocab)
            scores = processor(draft.reshape(batch * width, 1), flat).reshape(batch, width, vocab)
            continue
        flat = scores.reshape(batch * width, vocab)
        processed = torch.empty_like(flat)
        for members in groups.values():
            index = torch.tensor([flat_row for flat_row, _ in members], device=flat.device)
            # the caller's batch rows (an eager call drops its finished rows: row b is then session.row_ids[b])
            call = _for_rows(processor, [session.row_ids[flat_row // width] for flat_row, _ in members])
            processed[index] = call(torch.stack([sequence for _, sequence in members]), flat[index])
        scores = processed.reshape(batch, width, vocab)
    return scores


def _for_rows(processor, batch_rows: list[int]):
    """``processor`` for a call whose i-th input row is batch row ``batch_rows[i]``. Two of transformers' processors
    know rows by their index in the batch: a repetition penalty skips each row's own left padding
    (``prompt_ignore_length`` [B]), and a prefix constraint calls ``prefix_allowed_tokens_fn(batch_id, tokens)``.
    They get the batch rows' own values, as stock generate gives them."""
    if isinstance(processor, RepetitionPenaltyLogitsProcessor):
        ignored = getattr(processor, "prompt_ignore_length", None)
        if isinstance(ignored, torch.Tensor):
            rows = torch.tensor(batch_rows, device=ignored.device)
            return RepetitionPenaltyLogitsProcessor(processor.penalty, prompt_ignore_length=ignored[rows])
        return processor
    if not isinstance(processor, PrefixConstrainedLogitsProcessor):
        return processor
    allowed = getattr(processor, "_prefix_allowed_tokens_fn", None)
    if allowed is None or getattr(processor, "_num_beams", 1) != 1:
        raise ValueError("prefix_allowed_tokens_fn: this transformers version's PrefixConstrainedLogitsProcessor "
                         "is not supported in a speculative call; decode without speculative_mode, or upgrade")
    return PrefixConstrainedLogitsProcessor(lambda i, tokens: allowed(batch_rows[i], tokens), num_beams=1)


def target_choices(scores: torch.Tensor, do_sample: bool) -> torch.Tensor:
    """[..., V] scores -> [...] tokens: argmax, or one sample per row."""
    if do_sample:
        flat = scores.reshape(-1, scores.shape[-1])
        return torch.multinomial(torch.softmax(flat, dim=-1), num_samples=1).reshape(scores.shape[:-1])
    return scores.argmax(dim=-1)


def accepted_length(draft: torch.Tensor, choices: torch.Tensor) -> torch.Tensor:
    """Longest prefix of draft[..., 1:] equal to the target's choices[..., :-1], per row.

    draft:   [B, W] (draft[:, 0] is the last committed token)
    choices: [B, W] target's choice after each block row
    returns  [B]
    """
    return (draft[..., 1:] == choices[..., :-1]).long().cumprod(-1).sum(-1)


def accept_block(draft: torch.Tensor, choices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The lossless rule on a block, every row at once, on the device.

    Returns n_accepted [B] and new_tokens [B, W]: row b commits its first n_accepted[b] drafts, then the target's
    choice at the first mismatch (or after the last slot): new_tokens[b, :n_accepted[b] + 1].
    """
    n_accepted = accepted_length(draft, choices)
    return n_accepted, committed_tokens(draft, choices, n_accepted)


def committed_tokens(draft: torch.Tensor, choices: torch.Tensor, n_accepted: torch.Tensor) -> torch.Tensor:
    """[B, W]: each row's first n_accepted[b] drafts, then the target's choice at slot n_accepted[b] (row b commits
    the first n_accepted[b] + 1 of them). Shared by the lossless rule and FLy's, which differ in n_accepted only."""
    shifted = torch.cat([draft[:, 1:], choices[:, -1:]], dim=1)  # [B, W]: draft j+1 at column j
    keep_draft = torch.arange(draft.shape[1], device=draft.device) < n_accepted[:, None]
    return torch.where(keep_draft, shifted, choices)
