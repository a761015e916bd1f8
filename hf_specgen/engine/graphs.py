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

import torch

CACHE_BUCKET = 256  # cache sizes are rounded up to this when compiling, so nearby calls reuse graphs
VISIBLE_BUCKET = 8  # eager steps attend the used cache prefix rounded up to this (fewer keys: less attention work)


MAX_AUTOTUNE = "max-autotune"


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
        if self.compiled and self._is_cuda:
            torch.compiler.cudagraph_mark_step_begin()
        if self._inductor_gemms:
            from torch._inductor import config as inductor_config

            with inductor_config.patch(freezing=True, max_autotune=True):
                return self._fn(*args)
        return self._fn(*args)
