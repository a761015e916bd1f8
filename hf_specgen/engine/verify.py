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
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
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


def process_block_logits(
    logits: torch.Tensor, committed: torch.Tensor, draft: torch.Tensor, processors: LogitsProcessorList,
    row_tokens=None,
) -> torch.Tensor:
    """Apply generate's logits processors to every row of a verify forward.

    logits:     [W, V] target logits; row i predicts the token after draft[:i+1]
    committed:  [1, L] tokens committed so far (its last token is draft[0])
    draft:      [W] the verified block
    row_tokens: for a tree, a function i -> [1, d] tokens between the root and node i (default: draft[1:i+1])
    returns     [W, V] float32 scores, as stock generate would compute them one token at a time
    """
    scores = logits.float()
    if not processors:
        return scores
    width = scores.shape[0]
    if row_tokens is None:
        row_tokens = lambda i: draft[None, 1 : i + 1]  # noqa: E731
    row_context = committed.expand(width, -1)  # [W, L]: enough for row-independent processors
    for processor in processors:
        if isinstance(processor, _ROW_INDEPENDENT):
            scores = processor(row_context, scores)
        else:
            scores = torch.cat(
                [processor(torch.cat([committed, row_tokens(i)], dim=1), scores[i : i + 1]) for i in range(width)]
            )
    return scores


def target_choices(scores: torch.Tensor, do_sample: bool) -> torch.Tensor:
    """[W, V] scores -> [W] tokens: argmax, or one sample per row."""
    if do_sample:
        return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(-1)
    return scores.argmax(dim=-1)


def accepted_length(draft: torch.Tensor, choices: torch.Tensor) -> int:
    """Longest prefix of draft[1:] equal to the target's choices[:-1].

    draft:   [W] (draft[0] is the last committed token)
    choices: [W] target's choice after each block row
    """
    return int((draft[1:] == choices[:-1]).long().cumprod(0).sum())
