"""Checks on the prompt of a speculative call, made before its first forward.

Stock ``generate`` hands the prompt to the model as it is: an empty prompt, float ids, ids outside the vocabulary or
an ``attention_mask`` of another shape fail deep inside the model (a reshape of an empty tensor, an embedding lookup
out of range) with errors that do not say what to change, and a speculative call can even run on with a mismatched
mask and return tokens decoded under the wrong one. Here each of them is an error naming the fix, raised before any
forward. A prompt beyond the model's positions is legal in stock generate (it only warns): the engine gives the same
warning (``engine/loop.py``, ``StopRule``).
"""

from __future__ import annotations

import torch


def check_prompt(model, input_ids: torch.Tensor) -> None:
    """Raise a ``TypeError`` / ``ValueError`` naming the fix for a prompt the model cannot read. (The mask's shape
    is checked earlier, by ``check_mask_shape``.)"""
    _check_integer_ids(input_ids)
    _check_not_empty(input_ids)
    _check_in_vocabulary(model, input_ids)


def _check_integer_ids(input_ids: torch.Tensor) -> None:
    # int32 ids work in stock generate: only types an embedding lookup refuses are errors.
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be integer token ids (torch.long); got {input_ids.dtype}: tokenize the text "
                        "(tokenizer(text, return_tensors='pt').input_ids), or convert ids you hold with "
                        "input_ids.long().")


def _check_not_empty(input_ids: torch.Tensor) -> None:
    if input_ids.shape[-1] == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}): a prompt needs at least one token. "
                         "Pass one (e.g. the tokenizer's bos_token_id), or call generate without input_ids to start "
                         "from generation_config.bos_token_id.")


def _check_in_vocabulary(model, input_ids: torch.Tensor) -> None:
    # The embedding's row count, not config.vocab_size: resize_token_embeddings changes only the former.
    rows = model.get_input_embeddings().weight.shape[0]
    low, high = torch.stack(torch.aminmax(input_ids)).tolist()  # one read from the device for both ends
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        hint = (" (negative ids such as -100, the label ignore index, are not padding: pad with "
                "tokenizer.pad_token_id and mask it in attention_mask)") if bad < 0 else ""
        raise ValueError(f"input_ids holds token id {bad}, outside the model's vocabulary (ids 0..{rows - 1}){hint}: "
                         "tokenize with this model's own tokenizer, or resize_token_embeddings after adding tokens.")


def check_mask_shape(input_ids, attention_mask) -> None:
    """Called on generate's own arguments, before transformers prepares them (it drops an all-ones mask, so the
    decoding callable could no longer see that one's shape)."""
    if not isinstance(input_ids, torch.Tensor) or not isinstance(attention_mask, torch.Tensor):
        return
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids "
                         f"{tuple(input_ids.shape)}: pass the attention_mask the tokenizer returned with these "
                         "input_ids (one entry per token), or none for an unpadded prompt.")
