"""Byte-level BPE tokenizer for the tiny world, saved as a transformers-compatible folder.

Design choices:

* Byte-level BPE (like GPT-2/Qwen): every string round-trips exactly, so code whitespace and any odd byte survive.
* Digits are split one per token before BPE, so "1234" is always ``1 2 3 4`` (a leading space may stay attached
  to the first digit). Arithmetic is far easier for a small model when numbers are not chopped into arbitrary
  multi-digit merges.
* Special tokens get fixed, low ids in this order: ``<|pad|>`` 0, ``<|endoftext|>`` 1, ``<|user|>`` 2,
  ``<|assistant|>`` 3, ``<|end|>`` 4, ``<|mask|>`` 5. ``<|mask|>`` is reserved for DFlash drafters (the masked block
  positions they fill in); the corpus never contains it.
* ``eos_token`` is ``<|end|>``, so ``generate`` stops at the end of an assistant turn; ``<|endoftext|>`` only
  separates pretraining documents.
* The Jinja chat template renders exactly :func:`hf_specgen.training.corpus.format_messages`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .corpus import ASSISTANT_TOKEN, END_TOKEN, ENDOFTEXT_TOKEN, MASK_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, USER_TOKEN

DEFAULT_VOCAB_SIZE = 8192

# Built from the same constants as corpus.format_messages; tests check both render identically. Jinja's '\n' in a
# string literal is a newline. ``{%- ... -%}`` trims the template's own line breaks so only ``{{ }}`` output remains.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{ '" + USER_TOKEN + "\\n' + message['content'] + '\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '" + ASSISTANT_TOKEN + "\\n' + message['content'] + '" + END_TOKEN + "' }}"
    "{%- else -%}"
    "{{ raise_exception('unsupported chat role ' + message['role'] + \": only 'user' and 'assistant' exist\") }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '" + ASSISTANT_TOKEN + "' }}"
    "{%- endif -%}"
)

# Pre-tokenization pattern: the usual byte-level word split (contractions, words with their leading space, runs of
# punctuation, runs of whitespace that keep the last space for the next word), except that numbers are matched one
# digit at a time.
PRETOKENIZE_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

_SPECIAL_SPLIT = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))


def _without_special_markers(texts: Iterable[str]) -> Iterator[str]:
    """Yield the pieces of each text between special-token markers.

    Markers are atomic added tokens at encode time, so BPE should never learn merges that straddle them (such as
    ``|>\\n``); cutting the training text at the markers guarantees that.
    """
    for text in texts:
        for piece in _SPECIAL_SPLIT.split(text):
            if piece:
                yield piece


def build_bpe_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE pipeline (single-digit pre-tokenization, byte-level decoding)."""
    tokenizer = Tokenizer(models.BPE())  # byte-level: every byte is in the base alphabet, so no unk token is needed
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),  # bytes -> printable chars only
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer, model_max_length: int = 2048) -> PreTrainedTokenizerFast:
    """Wrap a trained :class:`tokenizers.Tokenizer` with the tiny world's special tokens and chat template."""
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=END_TOKEN,
        mask_token=MASK_TOKEN,
        extra_special_tokens=[ENDOFTEXT_TOKEN, USER_TOKEN, ASSISTANT_TOKEN],
        clean_up_tokenization_spaces=False,  # decoding must return the exact text (code is whitespace-sensitive)
        model_max_length=model_max_length,
    )
    hf_tokenizer.chat_template = CHAT_TEMPLATE
    return hf_tokenizer


def train_tokenizer(texts: Iterable[str], out_dir: str | Path | None, vocab_size: int = DEFAULT_VOCAB_SIZE,
                    min_frequency: int = 2, model_max_length: int = 2048) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and save it with ``save_pretrained`` to ``out_dir``.

    ``texts`` should be training data only (for example :func:`corpus.iter_pretraining_text`), so evaluation text
    does not shape the vocabulary. ``vocab_size`` includes the 256 byte tokens and the 6 special tokens. Pass
    ``out_dir=None`` to skip saving.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (bytes + special tokens)")
    tokenizer = build_bpe_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),  # listed first, so they get ids 0..5 in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, even ones absent from the corpus
        show_progress=False,
    )
    tokenizer.train_from_iterator(_without_special_markers(texts), trainer=trainer)
    hf_tokenizer = wrap_tokenizer(tokenizer, model_max_length)
    if out_dir is not None:
        hf_tokenizer.save_pretrained(str(out_dir))
    return hf_tokenizer
