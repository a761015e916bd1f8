"""Every knob of a speculative generate call, validated once, with errors that say what to change."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .engine.fly import FLY_SAMPLING_RULES, FLY_WINDOW_CONVENTIONS, check_fly_settings

SPECULATIVE_MODES = ("dflash", "classic", "eagle3", "whiflash", "fly", "autoregressive")
LOSSY_MODES = ("fly",)
LOOKUP_MODES = ("dflash", "classic", "eagle3", "whiflash")  # modes that draft blocks or chains (prompt_lookup)
DEFAULT_NUM_DRAFT_TOKENS = {"classic": 7, "eagle3": 7, "fly": 15}
DEFAULT_EAGLE_TOP_K = 10  # an EAGLE-3 tree's candidates per level (the WhiFlash paper's), where a tree is drafted
DEFAULT_EAGLE_TOTAL_TOKENS = 60  # an EAGLE-3 tree's nodes per round (the WhiFlash paper's); adaptive: at most this


@dataclass
class SpeculativeConfig:
    """Settings of ``generate(..., speculative_mode=...)``; each can also be a ``generate`` keyword argument or an
    attribute of the ``generation_config`` (so ``generation_config.save_pretrained`` keeps them).

    mode:          "dflash" (lossless; a DFlash drafter drafts a whole block in one forward from the target's hidden
                   states), "classic" (lossless; a small causal LM of the same tokenizer drafts token by token),
                   "eagle3" (lossless; an EAGLE-3 drafter drafts token by token from the target's hidden states),
                   "whiflash" (lossless; a router picks EAGLE-3 or DFlash every round: assistant_model=WhiFlash(...)) or
                   "fly" (LOSSY, opt-in: FLy's loose verification over a draft LM's or a DFlash drafter's drafts;
                   outputs differ from the target's own, task accuracy is what it keeps) or
                   "autoregressive" (no drafter, no speculation: one-token steps on the engine's static cache, which
                   speculative_compile=True compiles; the baseline to measure the other modes against).
    block_size:    tokens verified per round with a DFlash drafter (first slot = last committed token). None = the
                   drafter's trained block size. Smaller than trained works; larger does not.
    num_draft_tokens: K, tokens a draft LM proposes per round; None = 7 ("classic") or 15 ("fly"). K + 1 rows verified.
    draft_confidence_threshold: "classic" only: the draft LM stops drafting early once its top probability falls
                   below this (transformers' assisted generation uses 0.4 with K = 20); the rest of the K slots are
                   filled with its last token, so the verify keeps its fixed shape. None = always K tokens.
    compile:       torch.compile the fixed-shape draft and verify steps ("reduce-overhead": CUDA graphs on
                   GPU). "auto" = on for CUDA, off elsewhere (on a CPU each step gets faster too, but compiling
                   takes 20-40 s per cache size: worth it for many calls sharing one max_cache_len).
                   "max-autotune" = compiled, and inductor's own GEMM kernels on frozen weights (GPU: torch's
                   "max-autotune" mode, not yet run on one). On a CPU with AVX2 only this is the fastest setting
                   (SmolLM2-135M, fp32: plain steps 1.7-2.0x stock generate, DFlash 1.8-2.5x; docs/width-policy.md),
                   but the first call compiles every width for minutes (2.5 for plain steps, 9-11 with a drafter),
                   again in every new process (inductor's cache skips graphs on packed weights), every compiled step
                   keeps a repacked copy of the weights (frozen: they must not change afterwards), and the kernels
                   sum in another order than eager matmuls: in fp32 the output follows the compiled target's own
                   greedy choices, which part from eager generate's at near-ties (as bf16 does).
    max_cache_len: as in stock generate's static cache: allocate at least this many KV slots, so compiled calls of
                   any length up to it share one cache size and one graph; a call that needs more allocates more.
                   None = what the call needs (rounded up to 256 slots when compiled).
    eagle_top_k, eagle_depth, eagle_total_tokens: EAGLE-3 dynamic tree (10, 8, 60: the WhiFlash paper's);
                   eagle_top_k=1 drafts a chain of num_draft_tokens tokens instead. eagle_top_k None = a tree of
                   top_k 10 on a GPU (or with eagle_total_tokens given), a chain elsewhere or with
                   num_draft_tokens given: on a CPU a verify costs about in proportion to its rows, and on the real
                   target an adaptive chain was faster overall than the trees tried (docs/width-policy.md).
                   eagle_total_tokens None = 60 nodes at most, each round's budget chosen by the width policy
                   (speculative_mode="eagle3").
    dflash_tree_nodes: DDTree-style draft trees from one DFlash pass: the N most probable prefixes under the drafter's
                   per-position distributions (root included), verified in one target forward. 0 = the single block.
    dflash_tree_top_k: candidate tokens per block position for those trees; None = N - 1 (no cap); 1 = the block's
                   own chain.
    adaptive_width: each round verifies the width that pays (the engine's width policy): a prefix of the DFlash block
                   or of the draft LM's / EAGLE-3 chain's tokens, an EAGLE-3 or DFlash tree's node budget, or a
                   plain one-token step when no draft pays, from the target's measured verify costs and the
                   drafter's running acceptance (on a CPU a drafter that drafts token by token, an EAGLE-3 chain,
                   WhiFlash's EAGLE-3 rounds or a draft LM, also stops drafting when unsure and verifies what its
                   drafts' probabilities say they are worth: UNSURE_STOP). None = on for
                   "dflash" blocks unless block_size is given, for "classic" unless
                   num_draft_tokens or draft_confidence_threshold is, for "eagle3" unless its width is
                   (num_draft_tokens for a chain, eagle_total_tokens for a tree), for "whiflash" (a plain step
                   or the router's drafter, its block verified whole or a prefix of it) unless any of those is, and
                   for "fly" unless block_size or num_draft_tokens is (its whole block or a plain step: FLy keeps
                   a mismatch only with W matching drafts after it, so a prefix would be an exact round): an
                   explicit width keeps today's fixed behaviour; True / False force it (True with
                   dflash_tree_nodes=N: each round's DFlash tree budget, up to N).
    fly_window:    FLy's deferred window W (default 6; 0 disables the window).
    fly_window_convention: "reference" (W counts the mismatched slot; FLy's code) or "vllm" (W counts only the
                   following matches: vLLM's ``fly_window_size``; vLLM W = reference W - 1).
    fly_entropy_threshold: theta for the top-3 entropy gate, in nats (default 0.3; <= 0.01 disables the gate).
    fly_sampling_rule: with do_sample=True: "reference" (draft accepted if it equals either of two target samples;
                   FLy's code) or "lossless_core" (speculative sampling, with FLy's rescues on top).
    prompt_lookup: each drafting round, a row that is copying from its own text (its last 3 tokens occurred earlier in
                   the prompt or the output, or its last 2 and what followed them starts with the drafter's first
                   draft) verifies the tokens that followed that earlier occurrence instead of the drafter's
                   (lossless: only proposals change). Blocks and chains ("dflash", "classic", "eagle3" chains,
                   "whiflash"); not trees. None = on in the default call (where the width policy chooses each
                   round's width) of one prompt, off for a batch (whose rows share one width: copies slowed
                   batches of 4 in the benchmark) and with an explicit width; True = on, batches too; False = the
                   drafter alone (docs/methods.md).
    fly_ngram:     Multi-Level Acceleration for a draft LM: prompt-lookup candidates checked by the draft model, so one
                   draft forward can yield several draft tokens; the draft tokens are the same. None = on for "fly".
    """

    mode: str = "dflash"
    block_size: int | None = None
    num_draft_tokens: int | None = None
    draft_confidence_threshold: float | None = None
    compile: bool | str = "auto"
    max_cache_len: int | None = None
    eagle_top_k: int | None = None
    eagle_depth: int = 8
    eagle_total_tokens: int | None = None
    dflash_tree_nodes: int = 0
    dflash_tree_top_k: int | None = None
    adaptive_width: bool | None = None
    prompt_lookup: bool | None = None
    fly_window: int = 6
    fly_window_convention: str = "reference"
    fly_entropy_threshold: float = 0.3
    fly_sampling_rule: str = "reference"
    fly_ngram: bool | None = None

    def __post_init__(self):
        self.validate()

    @property
    def lossy(self) -> bool:
        return self.mode in LOSSY_MODES

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
            raise ValueError("num_draft_tokens applies to token-by-token drafters ('classic', 'eagle3', 'fly'); DFlash "
                             "drafts a block: "
                             "use block_size.")
        if self.draft_confidence_threshold is not None:
            if self.mode != "classic":
                raise ValueError("draft_confidence_threshold applies to speculative_mode='classic' (a draft LM "
                                 "drafting token by token); drop it for this mode.")
            threshold = self.draft_confidence_threshold
            if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 < threshold < 1:
                raise ValueError(f"draft_confidence_threshold must be a probability in (0, 1), got "
                                 f"{self.draft_confidence_threshold!r}.")
        if self.mode == "autoregressive" and (self.block_size is not None or self.num_draft_tokens is not None):
            raise ValueError("speculative_mode='autoregressive' drafts nothing: drop block_size / num_draft_tokens.")
        if self.mode in ("classic", "eagle3") and self.block_size is not None:
            raise ValueError("block_size applies to DFlash drafters; for 'classic' set num_draft_tokens "
                             "(tokens drafted per round).")
        if self.compile not in (True, False, "auto", "max-autotune"):
            raise ValueError(f"compile must be True, False, 'auto' or 'max-autotune', got {self.compile!r}.")
        if self.max_cache_len is not None and (not isinstance(self.max_cache_len, int) or self.max_cache_len < 1):
            raise ValueError(f"max_cache_len must be a positive int or None, got {self.max_cache_len!r}.")
        for name in ("eagle_top_k", "eagle_depth", "eagle_total_tokens"):
            value = getattr(self, name)
            if (value is not None or name == "eagle_depth") and (
                    not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
        top_k = self.eagle_top_k or DEFAULT_EAGLE_TOP_K
        if self.eagle_total_tokens is not None and top_k > 1 and not 2 <= self.eagle_total_tokens <= 1 + top_k * \
                self.eagle_depth:
            raise ValueError(f"eagle_total_tokens must be in [2, 1 + eagle_top_k * eagle_depth = "
                             f"{1 + top_k * self.eagle_depth}], got {self.eagle_total_tokens}.")
        nodes, top_k = self.dflash_tree_nodes, self.dflash_tree_top_k
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0 or nodes == 1:
            raise ValueError(f"dflash_tree_nodes must be 0 (the single DFlash block) or an int >= 2 (nodes per tree, "
                             f"the root included), got {nodes!r}.")
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
            raise ValueError(f"dflash_tree_top_k must be an int >= 1 or None, got {top_k!r}.")
        if (nodes or top_k is not None) and self.mode != "dflash":
            raise ValueError("dflash_tree_nodes / dflash_tree_top_k apply to speculative_mode='dflash' (FLy and "
                             "WhiFlash verify the DFlash block, not trees): drop them or use 'dflash'.")
        if top_k is not None and not nodes:
            raise ValueError("dflash_tree_top_k sizes DFlash trees: also pass dflash_tree_nodes=N.")
        if self.adaptive_width not in (None, True, False):
            raise ValueError(f"adaptive_width must be True, False or None (automatic), got {self.adaptive_width!r}.")
        if self.adaptive_width and self.mode not in ("dflash", "classic", "eagle3", "whiflash", "fly"):
            raise ValueError("adaptive_width=True applies to speculative_mode 'dflash' (its block, or with "
                             "dflash_tree_nodes its trees), 'classic', 'eagle3', 'whiflash' and 'fly': drop "
                             "adaptive_width.")
        if self.adaptive_width and self.draft_confidence_threshold is not None:
            raise ValueError("draft_confidence_threshold is a width heuristic of its own (each row stops drafting "
                             "when unsure): drop it, or adaptive_width.")
        if self.prompt_lookup not in (None, True, False):
            raise ValueError(f"prompt_lookup must be True, False or None (automatic), got {self.prompt_lookup!r}.")
        if self.prompt_lookup and (self.mode not in LOOKUP_MODES or self.dflash_tree_nodes):
            raise ValueError("prompt_lookup puts copied tokens into a drafted block or chain ('dflash', 'classic', "
                             "'eagle3' chains, 'whiflash'); DFlash trees and FLy do not take it: drop prompt_lookup.")
        check_fly_settings(self.fly_window, self.fly_entropy_threshold)
        if self.fly_window_convention not in FLY_WINDOW_CONVENTIONS:
            raise ValueError(f"fly_window_convention must be one of {FLY_WINDOW_CONVENTIONS}, got {self.fly_window_convention!r}.")
        if self.fly_sampling_rule not in FLY_SAMPLING_RULES:
            raise ValueError(f"fly_sampling_rule must be one of {FLY_SAMPLING_RULES}, got {self.fly_sampling_rule!r}.")
        if self.fly_ngram not in (None, True, False):
            raise ValueError(f"fly_ngram must be True, False or None, got {self.fly_ngram!r}.")
        for prefix, modes in (("fly_", ("fly",)), ("eagle_", ("eagle3", "whiflash"))):
            changed = [f.name for f in fields(self) if f.name.startswith(prefix) and getattr(self, f.name) != f.default]
            if changed and self.mode not in modes:
                raise ValueError(f"{changed} only apply to speculative_mode in {modes}: drop them or set the mode.")

    @property
    def adapts_width(self) -> bool:
        """Whether the call's verify width follows the width policy (see ``adaptive_width``)."""
        if self.adaptive_width is not None:
            return self.adaptive_width
        if self.mode == "classic":  # an explicit num_draft_tokens or confidence threshold keeps its own widths
            return self.num_draft_tokens is None and self.draft_confidence_threshold is None
        if self.mode == "eagle3":  # a chain's width is its draft tokens, a tree's its node budget
            return self.num_draft_tokens is None and (self.eagle_top_k == 1 or self.eagle_total_tokens is None)
        if self.mode == "whiflash":  # plain steps, or a drafter (the vote as context) and its width
            return self.block_size is None and self.num_draft_tokens is None and self.eagle_total_tokens is None
        if self.mode == "fly":  # its whole block (DFlash's, or the draft LM's tokens) or a plain step
            return self.block_size is None and self.num_draft_tokens is None
        return self.mode == "dflash" and not self.dflash_tree_nodes and self.block_size is None

    @property
    def sets_width(self) -> bool:
        """Whether the call names its verify width (the largest, with adaptive_width=True): copied tokens verified
        alone stay within it too."""
        return (any(value is not None for value in (self.block_size, self.num_draft_tokens, self.eagle_total_tokens))
                or bool(self.dflash_tree_nodes))

    def looks_up(self, drafts_trees: bool) -> bool:
        """Whether drafting rounds verify copied tokens where a row repeats its text (see ``prompt_lookup``)."""
        if self.prompt_lookup is not None:
            return self.prompt_lookup
        return self.adapts_width and not drafts_trees and self.mode in LOOKUP_MODES

    def eagle_shape(self, device_type: str) -> int:
        """The EAGLE-3 top_k this call drafts with on ``device_type`` (1: a chain; see eagle_top_k)."""
        if self.eagle_top_k is not None:
            return self.eagle_top_k
        if self.num_draft_tokens is not None or self.mode == "fly":
            return 1
        tree = self.eagle_total_tokens is not None or device_type == "cuda"
        return DEFAULT_EAGLE_TOP_K if tree else 1

    def tree_budget(self, top_k: int) -> int:
        """An EAGLE-3 tree's nodes per round (the root included): the given eagle_total_tokens, else the default
        capped by what top_k and depth can reach."""
        return self.eagle_total_tokens or min(DEFAULT_EAGLE_TOTAL_TOKENS, 1 + top_k * self.eagle_depth)

    def draft_tokens(self) -> int:
        return self.num_draft_tokens or DEFAULT_NUM_DRAFT_TOKENS.get(self.mode, 7)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
