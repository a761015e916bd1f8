"""Every knob of a speculative generate call, validated once, with errors that say what to change."""

from __future__ import annotations

from dataclasses import dataclass, fields

SPECULATIVE_MODES = ("dflash", "classic")
DEFAULT_NUM_DRAFT_TOKENS = 7


@dataclass
class SpeculativeConfig:
    """Settings of ``generate(..., speculative_mode=...)``.

    mode:          which method runs, all lossless: "dflash" (a DFlash drafter drafts a whole block in one forward
                   from the target's hidden states) or "classic" (a small causal LM of the same tokenizer drafts
                   tokens one by one: classic speculative decoding).
    block_size:    tokens verified per round (DFlash: the drafted block, first slot = last committed token).
                   None = the drafter's trained block size. Smaller than trained works; larger does not.
    num_draft_tokens: tokens a draft LM proposes per round ("classic"); None = 7. The verify has K + 1 rows.
    compile:       torch.compile the fixed-shape draft and verify steps ("reduce-overhead": CUDA graphs on
                   GPU). "auto" = on for CUDA, off elsewhere (on CPU compile costs more than it saves).
    max_cache_len: upper bound on the KV cache the call may allocate (prompt + max_new_tokens + block);
                   None = no bound. A call that needs more raises instead of truncating.
    """

    mode: str = "dflash"
    block_size: int | None = None
    num_draft_tokens: int | None = None
    compile: bool | str = "auto"
    max_cache_len: int | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if self.mode not in SPECULATIVE_MODES:
            raise ValueError(
                f"Unknown speculative_mode={self.mode!r}. Choose one of {', '.join(map(repr, SPECULATIVE_MODES))}, "
                "or leave speculative_mode unset for stock generation."
            )
        if self.block_size is not None and (not isinstance(self.block_size, int) or self.block_size < 2):
            raise ValueError(f"block_size must be an int >= 2 (one committed token + at least one draft), got {self.block_size!r}.")
        if self.num_draft_tokens is not None and (not isinstance(self.num_draft_tokens, int) or self.num_draft_tokens < 1):
            raise ValueError(f"num_draft_tokens must be an int >= 1, got {self.num_draft_tokens!r}.")
        if self.mode == "dflash" and self.num_draft_tokens is not None:
            raise ValueError("num_draft_tokens applies to draft-LM modes ('classic'); DFlash drafts a block: use block_size.")
        if self.mode == "classic" and self.block_size is not None:
            raise ValueError("block_size applies to speculative_mode='dflash'; for 'classic' set num_draft_tokens "
                             "(tokens drafted per round).")
        if self.compile not in (True, False, "auto"):
            raise ValueError(f"compile must be True, False or 'auto', got {self.compile!r}.")
        if self.max_cache_len is not None and (not isinstance(self.max_cache_len, int) or self.max_cache_len < 1):
            raise ValueError(f"max_cache_len must be a positive int or None, got {self.max_cache_len!r}.")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
