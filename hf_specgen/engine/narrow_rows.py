"""Linear layers over a few rows on a CPU in fp32: plain steps and verifies of 2-4 tokens faster than the library's.

A CPU's BLAS computes ``x @ W.T`` for a single row as a matrix-vector product, but for 2-16 rows it runs a general
matrix product that repacks the large operand, the weight, on every call. On SmolLM2-135M in fp32 (one thread of a
2-core AMD EPYC with AVX512-BF16, transformers' eager forward over a 200-token cache) a forward of 1 token took 41
ms, of 2 tokens 75 ms and of 4 tokens 65 ms, the linears' share of it 34, 61 and 52 ms; the same rows as ``W @ x.T``
(the few rows are then the small operand) took 47 and 50 ms, and with 2 threads 33 and 34 ms, where the
single-token forward stays at 40 (docs/benchmarks/narrow_rows/forward_rows_2026-11-28.txt, docs/width-policy.md).
The width policy prices every width by what it measures, so cheaper narrow verifies make rounds of 2-4 tokens pay
where they did not. In bf16 the library's kernels already handle few rows well (the engine's bf16 verify of 2 rows
cost 1.05 plain steps there): fp32 only. Not measured on a CPU with AVX2 only, which is why the engine times both
ways before it takes this one.

The single row has a slow kernel of its own there: MKL's matrix-vector product, on one thread only. The same
library's batched matrix product over the weight's two halves (its output rows split in two, one column each) ran a
one-token forward's linears in 21 ms where the library's way took 34, and in 13 ms with two threads; the forward took
34 and 25 ms against 42 and 41 (docs/benchmarks/narrow_rows/forward_rows.txt). So one row runs as that batched
product (``halves_linear``), on the same terms: timed first, taken only where it pays.

``NarrowRowLinears`` is a torch function mode: while it is active, ``F.linear`` over one row of fp32 CPU tensors runs
as ``halves_linear`` and over 2 to ``NARROW_ROWS_MAX`` rows as ``(W @ x.T).T``; every other call is untouched. The
engine enables it around the target's eager forwards of those row counts (plain steps, verifies) once a timing on the
call's own cache shows each way faster on this machine (``route_pays``; ``SpeculativeDecoder._decide_narrow_rows``),
and around the drafter's forwards in a round for the same row counts (``SpeculativeDecoder._drafting_linears``).
It changes the order of fp32 additions, as any verify of several rows already does against stock's single-row steps:
the logits are stock's within fp32 rounding rather than to the bit, and tests check lossless calls still give stock's
tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .width_policy import measure_verify_costs

NARROW_ROWS_MAX = 4  # from 8 rows on the library's product was as fast or faster (8 rows, one thread: 74.9 / 80.4 ms)
# the kinds of forward timed and taken each on its own (a plain step of one row; verifies of a few rows), named in
# the target's cost model by their fewest rows
ROUTED_ROWS = (frozenset({1}), frozenset(range(2, NARROW_ROWS_MAX + 1)))
ROUTE_MARGIN = 0.05  # the route must save this share of a forward to be taken (timing noise)
ROUTE_PASSES = 2  # timed passes of each route, alternating, the fastest of each compared (0.3-0.4 s on SmolLM2)


def applies(device: torch.device, dtype: torch.dtype, compiled: bool) -> bool:
    """Whether the route may be used: eager fp32 forwards on a CPU (compiled steps use inductor's own kernels)."""
    return device.type == "cpu" and dtype == torch.float32 and not compiled


def narrow_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; x [..., K] of 1 to NARROW_ROWS_MAX rows in all, weight [N, K] (fp32 CPU
    tensors): one row as ``halves_linear``, more as ``(weight @ x.T).T`` [..., N]; anything else through
    ``F.linear``."""
    rows = x.numel() // max(x.shape[-1], 1)
    if not (1 <= rows <= NARROW_ROWS_MAX and x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu"
            and weight.device.type == "cpu" and weight.dim() == 2 and weight.layout == torch.strided):
        return F.linear(x, weight, bias)
    if rows == 1:
        return halves_linear(x, weight, bias)
    # [N, K] @ [K, rows] -> [N, rows] -> [rows, N], made contiguous: the next layer reads it row by row
    out = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous().view(*x.shape[:-1], weight.shape[0])
    return out if bias is None else out + bias


def halves_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [..., K] of one row in all and weight [N, K] (contiguous, N even; else
    through ``F.linear``) as one batched product over the weight's two halves of output rows: [2, N/2, K] @ [2, K, 1]
    (the library's product over one row is a matrix-vector one, the slower kernel, see the module's docstring)."""
    n, k = weight.shape
    if n % 2 or not weight.is_contiguous():  # (a view of the halves must not copy the weight)
        return F.linear(x, weight, bias)
    # [K, 1] as the transpose of a row (strides (1, K)): MKL's batched product takes that layout fast, where a
    # contiguous [K, 1] column (strides (1, 1)) ran 6x slower on the real target's lm_head
    column = x.reshape(1, k).t()
    out = torch.bmm(weight.view(2, n // 2, k), column.expand(2, k, 1))  # [2, N/2, 1]: the halves' outputs in order
    out = out.view(*x.shape[:-1], n)
    return out if bias is None else out + bias


class NarrowRowLinears(TorchFunctionMode):
    """While active (``with NarrowRowLinears(rows):``), ``F.linear`` over a count of rows in ``rows`` (default: 1 to
    NARROW_ROWS_MAX) runs as ``narrow_linear``, any other as the library's. ``calls`` counts the linears it routed (so
    tests can tell that a forward went through it)."""

    calls = 0

    def __init__(self, rows: frozenset[int] = frozenset(range(1, NARROW_ROWS_MAX + 1))):
        super().__init__()
        self.rows = rows

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:  # the mode is off inside this method, so F.linear below is the library's
            x = args[0] if args else kwargs["input"]
            if x.numel() // max(x.shape[-1], 1) in self.rows:
                NarrowRowLinears.calls += 1
                return narrow_linear(*args, **kwargs)
        return func(*args, **kwargs)


def route_pays(run_plain, run_narrow, device: torch.device, passes: int = ROUTE_PASSES,
               margin: float = ROUTE_MARGIN) -> bool:
    """Whether ``run_narrow()`` is faster than ``run_plain()`` by at least ``margin``, timed as the width policy times
    its verifies (``measure_verify_costs``): one untimed call of each, then ``passes`` timed calls of each in turns,
    the fastest of each compared."""
    seconds = measure_verify_costs(lambda run: run(), (run_plain, run_narrow), device, budget=0.0, min_passes=passes)
    return seconds[run_narrow] < (1 - margin) * seconds[run_plain]


def describe_routes(decided: dict[tuple[str, int], bool]) -> str | None:
    """One line for a benchmark's report: which kinds of forward this process's calls timed (a target's
    ``CostModel.narrow_rows``) and whether each took the narrow way; None where none was timed (bf16, a GPU, compiled
    steps)."""
    def kind(rows: int) -> str:  # a kind of ROUTED_ROWS by its fewest rows
        return ("one-row steps as a batched product over the weights' halves" if rows == 1
                else f"verifies of {rows}-{NARROW_ROWS_MAX} rows as W @ x.T")

    verdicts = ("not taken (not {:.0%} faster)".format(ROUTE_MARGIN), "taken (timed faster)")
    parts = [f"{kind(rows)} on {device}: {verdicts[taken]}" for (device, rows), taken in sorted(decided.items())]
    return "fp32 linears of few rows (engine/narrow_rows.py): " + "; ".join(parts) if parts else None
