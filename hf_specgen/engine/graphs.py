"""Fixed-shape steps, optionally compiled with torch.compile ("reduce-overhead" = CUDA graphs on GPU).

``speculative_compile="max-autotune"`` also lets inductor replace the target's and drafter's matrix products with its
own GEMM kernels, specialized to each step's row count, on weights it freezes and repacks. On a CPU with AVX2 only,
MKL's fp32 product over 2-16 rows costs 1.6-2.5 single-row forwards of SmolLM2-135M, so a verify costs about two
plain steps; with inductor's kernels the engine's plain steps and its speculative calls ran about twice as fast
(docs/width-policy.md, "Compiled steps on an AVX2 CPU"). The price: minutes of compiling per step shape, a frozen
copy of the weights per compiled step, and sums in another order than eager's (see SpeculativeConfig.compile).

Every decode step sees the same shapes each round (W query rows, the whole pre-allocated cache as keys,
masks and positions passed as tensors), so one graph serves the whole call; ``fullgraph=True`` makes a graph break an
error rather than a silent fallback. Acceptance stays outside the graph. On CUDA, outputs of a graph replay are
overwritten by the next replay: callers clone what they keep. Eager steps instead attend only the cache slots in use
(``DecodingSession.show``), rounded up to VISIBLE_BUCKET.
"""

from __future__ import annotations

import weakref

import torch

CACHE_BUCKET = 256  # cache sizes are rounded up to this when compiling, so nearby calls reuse graphs
VISIBLE_BUCKET = 8  # eager steps attend the used cache prefix rounded up to this (fewer keys: less attention work)


MAX_AUTOTUNE = "max-autotune"
# calls that build a compiled step: it compiles on the first and records its CUDA graph on the second
BUILDING_CALLS = 2


def should_compile(setting, device: torch.device) -> bool | str:
    """Whether to compile the engine's steps: False, True, or MAX_AUTOTUNE (compiled, with inductor's own GEMMs)."""
    if setting == "auto":
        return device.type == "cuda"
    return setting if setting == MAX_AUTOTUNE else bool(setting)


def allow_a_graph_per_decoder() -> None:
    """Raise dynamo's recompile limits (never lower them). Every compiled decoder (one per mode, drafter, batch size
    and cache bucket) compiles the same step functions and the target's forward over its own caches, and dynamo
    counts those graphs per function: past its default of 8 a ninth decoder would fail to compile (fullgraph=True)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)


# cache -> the widths whose compiled graphs have run over it (a new cache of a new shape compiles anew, and CUDA graphs
# record the addresses of the cache tensors they write)
_BUILT: "weakref.WeakKeyDictionary[object, set[int]]" = weakref.WeakKeyDictionary()


def built_widths(cache) -> set[int]:
    """The widths whose compiled steps have already run over ``cache`` (callers add the ones they build)."""
    return _BUILT.setdefault(cache, set())


def build_drafting_graphs(proposer) -> None:
    """Compiled steps: run a drafter's steps at every context width its rounds can hand it (the rows of a verify of
    each width bucket), right after ``start``, so that a width first chosen in a later round or call finds its graphs
    built. Compiling in the middle of a call stalls it: seconds with CUDA graphs, minutes with max-autotune (the
    width policy would also take that round's clock for the drafter's cost). The dummy rows it writes lie past the
    drafter cache's valid slots (the first round rewrites them from the pending prompt rows), and the proposer's
    state is put back. Proposers without pending context rows (a draft LM) keep one graph per step anyway."""
    if getattr(proposer, "pending", None) is None or not hasattr(proposer, "_context_widths"):
        return
    built = built_widths(proposer.cache)
    widths = sorted(proposer._context_widths() - built)
    if not widths:
        return
    saved = proposer.pending, proposer.pending_counts, proposer.context_start, proposer.forward_calls
    pending, context_start = saved[0], saved[2]
    for width in widths:
        for _ in range(BUILDING_CALLS):
            proposer.pending = pending.new_zeros(pending.shape[0], width, pending.shape[2])  # [B, w, F]
            proposer.pending_counts, proposer.context_start = None, torch.zeros_like(context_start)
            proposer.propose(whole_block=True)
        built.add(width)
    proposer.pending, proposer.pending_counts, proposer.context_start, proposer.forward_calls = saved


def standard_layout(arg):
    """``arg`` with the strides of a fresh tensor of its shape (a copy only where they differ). A compiled step's graph
    is specialized on its inputs' strides, and the same width's inputs arrive in several layouts (a slice of a wider
    drafted block, a gather, the cost measurement's expanded token; at batch 1 even a [1, w] slice of [1, W] counts
    as contiguous yet has other strides): each would compile a graph of its own, in the middle of a call."""
    if not isinstance(arg, torch.Tensor):
        return arg
    strides, step = [], 1
    for size in reversed(arg.shape):
        strides.append(step)
        step *= max(size, 1)
    return arg if arg.stride() == tuple(reversed(strides)) else arg.clone(memory_format=torch.contiguous_format)


class StepRunner:
    """Calls ``fn`` eagerly or through torch.compile; ``.eager`` always bypasses compilation."""

    def __init__(self, fn, compile_step: bool | str, device: torch.device):
        self.eager = fn
        self.compiled = bool(compile_step)
        self._is_cuda = device.type == "cuda"
        # inductor's GEMM templates (CPU): only on frozen weights, and inductor reads both settings while it compiles,
        # which happens inside a call (torch.compile's options= did not freeze: measured, no template was chosen)
        self._inductor_gemms = compile_step == MAX_AUTOTUNE and not self._is_cuda
        if compile_step:
            allow_a_graph_per_decoder()
            mode = ("max-autotune" if compile_step == MAX_AUTOTUNE else "reduce-overhead") if self._is_cuda \
                else "default"
            self._fn = torch.compile(fn, mode=mode, dynamic=False, fullgraph=True)
        else:
            self._fn = fn

    def __call__(self, *args):
        if self.compiled:
            args = tuple(standard_layout(arg) for arg in args)
        if self.compiled and self._is_cuda:
            torch.compiler.cudagraph_mark_step_begin()
        if self._inductor_gemms:
            from torch._inductor import config as inductor_config

            with inductor_config.patch(freezing=True, max_autotune=True):
                return self._fn(*args)
        return self._fn(*args)
