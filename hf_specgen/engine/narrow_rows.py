"""The linears of eager decoding forwards on a CPU, computed faster than the library's ``F.linear`` where timed so.

Decoding forwards are few rows (a plain step: batch rows; a verify: batch x width), so their linears read every weight
to multiply it by a handful of rows: their speed is how fast the kernel streams the weight. On a 2-core AMD EPYC with
AVX512-BF16 the library's kernels stream it slowly for such shapes (docs/width-policy.md, "Packed weights: every
decoding forward on a CPU"; docs/benchmarks/narrow_rows/forward_rows.txt):

- **one row in fp32**: MKL's matrix-vector product read SmolLM2's weights at half the speed of its batched matrix
  product over the same weight cut into two halves of output rows, and on one thread where two were set. So one row
  runs as that batched product (``halves_linear``): a one-token forward of SmolLM2 took 28 ms instead of 43 (one
  thread).
- **2 rows or more in fp32, any rows in bf16**: the library's product reorders the weight into oneDNN's blocked layout
  on every call. ``torch.ops.mkldnn._reorder_linear_weight`` does that once (what inductor's freezing pass does for
  compiled CPU graphs) and ``torch.ops.mkldnn._linear_pointwise`` multiplies by the packed copy: a 16-token fp32
  forward of SmolLM2 took 63 ms instead of 100 and a one-token bf16 forward 23 ms instead of 33 (one thread). In
  bf16 the packed product gave the library's results to the bit on that CPU (the same oneDNN kernel without the
  reorder); in fp32 it sums in another order (the logits 6e-5 off on SmolLM2). The packed copies double the memory
  of the linears' weights: packing is skipped where that would take more than ``PACK_MEMORY_SHARE`` of the memory
  available.

Each kind (``KINDS``) is taken only in eager forwards on a CPU, and only where a timing of both ways over the first
call's own cache found it ``ROUTE_MARGIN`` faster (``route_pays``; ``SpeculativeDecoder._decide_narrow_rows``), once
per process, target, device and kind, so a CPU whose library kernels are fast keeps them (a separate draft LM's
kinds likewise, timed on its own forwards: ``SpeculativeDecoder._draft_model_routes``). ``RoutedLinears`` swaps the
forwards of a model's ``nn.Linear`` modules for the kinds taken while it is entered (around the engine's decoding
forwards of the target, the drafter's forwards in a round, and the prefill of every call after the kinds were
timed: a 128-512-token prompt prefilled 1.7-1.9x as fast in fp32 over packed weights, 1.03-1.09x in bf16): a torch
function mode would see every torch call of the forward, which cost 5-6 ms a forward on SmolLM2. The packed copies
are kept beside their modules and made again when a weight changes (its storage or version)."""

from __future__ import annotations

import functools
import os
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .width_policy import measure_verify_costs

ROUTE_MARGIN = 0.05  # a kind must save this share of a forward to be taken (timing noise)
ROUTE_PASSES = 2  # timed passes of each way, alternating, the fastest of each compared (0.2-0.4 s on SmolLM2)
PACK_MEMORY_SHARE = 0.25  # the packed copies may take at most this share of the memory available when packing


@dataclass(frozen=True)
class RouteKind:
    """Forwards whose linears have ``fewest`` to ``most`` rows (None: any more) in ``dtype``, computed ``way``
    ("halves": ``halves_linear``; "packed": oneDNN's product over a packed copy of the weight)."""

    dtype: torch.dtype
    fewest: int
    most: int | None
    way: str

    def holds(self, rows: int, dtype: torch.dtype) -> bool:
        return dtype == self.dtype and self.fewest <= rows and (self.most is None or rows <= self.most)

    @property
    def name(self) -> str:
        """The kind's key in a target's ``CostModel.narrow_rows`` and its words in a report."""
        dtype = {torch.float32: "fp32", torch.bfloat16: "bf16"}[self.dtype]
        rows = (f"{self.fewest} row" if self.most == self.fewest else f"{self.fewest}+ rows")
        how = ("a batched product over the weights' halves" if self.way == "halves"
               else "oneDNN's product over packed weights")
        return f"{dtype} forwards of {rows} as {how}"


KINDS = (RouteKind(torch.float32, 1, 1, "halves"), RouteKind(torch.float32, 2, None, "packed"),
         RouteKind(torch.bfloat16, 1, None, "packed"))


def kinds_for(device: torch.device, dtype: torch.dtype, compiled: bool) -> tuple[RouteKind, ...]:
    """The kinds that may be used: eager forwards on a CPU (compiled steps use inductor's own kernels) in their
    dtype; the packed ones only where torch has oneDNN."""
    if device.type != "cpu" or compiled:
        return ()
    return tuple(k for k in KINDS if k.dtype == dtype and (k.way != "packed" or torch.backends.mkldnn.is_available()))


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


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [..., K] with ``packed`` = ``pack_weight(weight)``: [..., N]."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A copy of weight [N, K] in oneDNN's layout for its linear (an opaque tensor ``packed_linear`` reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


@functools.cache
def packs_on_this_cpu(dtype: torch.dtype) -> bool:
    """Whether this process's torch packs CPU weights of ``dtype`` for oneDNN. bf16 needs AVX512 (BW, VL, DQ) or
    AVX-NE-CONVERT: on an AVX2-only CPU torch 2.13 refuses it (a RuntimeError), and its bf16 forwards keep the
    library's way. A torch built without oneDNN's linear ops packs nothing."""
    try:
        pack_weight(torch.zeros(8, 8, dtype=dtype))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return True


# nn.Linear -> (its weight packed, the weight's data_ptr and version when packed)
_PACKED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.Tensor, int, int]]" = weakref.WeakKeyDictionary()


def routable_linears(*models) -> list[torch.nn.Linear]:
    """The ``nn.Linear`` modules of ``models`` (None skipped, each once) whose forwards may be swapped: plain linears
    (not subclasses, such as quantized ones) with a 2-D strided weight on a CPU, and no forward of their own
    already set on the instance (an accelerate hook's wrapper)."""
    found, seen = [], set()
    for model in models:
        for module in (model.modules() if isinstance(model, torch.nn.Module) else ()):
            weight = getattr(module, "weight", None)
            if (type(module) is torch.nn.Linear and id(module) not in seen and "forward" not in module.__dict__
                    and weight is not None and weight.dim() == 2 and weight.layout == torch.strided
                    and weight.device.type == "cpu"):
                seen.add(id(module))
                found.append(module)
    return found


def _available_memory() -> int | None:
    """Bytes of memory available now (None where this platform does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        try:
            import psutil
        except ImportError:
            return None
        return int(psutil.virtual_memory().available)


def _is_fresh(module: torch.nn.Linear) -> bool:
    entry = _PACKED.get(module)
    return entry is not None and entry[1:] == (module.weight.data_ptr(), module.weight._version)


def pack_linears(linears: list[torch.nn.Linear], dtype: torch.dtype) -> bool:
    """Pack the weights of ``linears`` in ``dtype`` that have no fresh packed copy (none made yet, or the weight has
    changed since); False, packing nothing, where torch cannot or the copies would take more than
    ``PACK_MEMORY_SHARE`` of the memory available."""
    stale = [m for m in linears if m.weight.dtype == dtype and not _is_fresh(m)]
    if not stale:
        return True
    if not packs_on_this_cpu(dtype):
        return False
    available = _available_memory()
    needed = sum(m.weight.numel() * m.weight.element_size() for m in stale)
    if available is None or needed > PACK_MEMORY_SHARE * available:
        return False
    try:
        for module in stale:
            _PACKED[module] = (pack_weight(module.weight), module.weight.data_ptr(), module.weight._version)
    except (RuntimeError, AttributeError, NotImplementedError):  # a weight oneDNN cannot take: none packed
        drop_packed(stale)
        return False
    return True


def drop_packed(linears: list[torch.nn.Linear]) -> None:
    """Free the packed copies of ``linears``' weights."""
    for module in linears:
        _PACKED.pop(module, None)


class RoutedLinears:
    """While entered (``with routes:``), each of ``linears`` computes its forwards of a row count and dtype some kind of
    ``kinds`` holds that kind's way, any other as the library's ``F.linear``. The packed kinds need
    ``pack_linears(linears, dtype)`` first (a linear without a fresh packed copy then keeps the library's way). The
    forwards are made once, here (a call's worth: the weights do not change within a call); entering and leaving set
    and drop them in the modules' ``__dict__`` (0.01 ms for SmolLM2's 211 linears, where ``setattr`` and ``delattr``
    on each module took 0.27 ms). ``calls`` counts the linears it routed (so tests can tell that a forward went through it)."""

    calls = 0

    def __init__(self, linears: list[torch.nn.Linear], kinds: tuple[RouteKind, ...]):
        self.kinds = kinds
        self._forwards = [(module.__dict__, _routed_forward(module, kinds, _PACKED[module][0] if _is_fresh(module)
                                                            else None)) for module in linears]

    def __enter__(self) -> "RoutedLinears":
        for attributes, forward in self._forwards:
            attributes["forward"] = forward  # found before the class's forward
        return self

    def __exit__(self, *exc) -> None:
        for attributes, _ in self._forwards:
            attributes.pop("forward", None)  # the class's forward again


def _routed_forward(module: torch.nn.Linear, kinds: tuple[RouteKind, ...], packed: torch.Tensor | None):
    weight, bias = module.weight, module.bias

    def forward(x: torch.Tensor) -> torch.Tensor:  # x [..., K] -> [..., N]
        rows = x.numel() // max(x.shape[-1], 1)
        for kind in kinds:
            if kind.holds(rows, x.dtype) and weight.dtype == x.dtype:
                if kind.way == "halves":
                    RoutedLinears.calls += 1
                    return halves_linear(x, weight, bias)
                if packed is not None:
                    RoutedLinears.calls += 1
                    return packed_linear(x, packed, bias)
        return F.linear(x, weight, bias)

    return forward


def route_pays(run_plain, run_routed, device: torch.device, passes: int = ROUTE_PASSES,
               margin: float = ROUTE_MARGIN) -> bool:
    """Whether ``run_routed()`` is faster than ``run_plain()`` by at least ``margin``, timed as the width policy times
    its verifies (``measure_verify_costs``): one untimed call of each, then ``passes`` timed calls of each in turns,
    the fastest of each compared."""
    seconds = measure_verify_costs(lambda run: run(), (run_plain, run_routed), device, budget=0.0, min_passes=passes)
    return seconds[run_routed] < (1 - margin) * seconds[run_plain]


def describe_routes(decided: dict[tuple[str, str], bool], whose: str = "decoding linears") -> str | None:
    """One line for a benchmark's report: which kinds of forward this process's calls timed (a target's
    ``CostModel.narrow_rows``, or a draft LM's, by (device, kind name)) and whether each was taken; None where none
    was timed (a GPU, compiled steps). ``whose``: the linears the line is about."""
    verdicts = ("not taken (not {:.0%} faster)".format(ROUTE_MARGIN), "taken (timed faster)")
    order = {kind.name: i for i, kind in enumerate(KINDS)}
    parts = [f"{name} on {device}: {verdicts[taken]}"
             for (device, name), taken in sorted(decided.items(), key=lambda item: (item[0][0], order[item[0][1]]))]
    return f"{whose} (engine/narrow_rows.py): " + "; ".join(parts) if parts else None
