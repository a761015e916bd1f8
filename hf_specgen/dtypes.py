"""Which dtype runs fast here: bf16 on an accelerator or a CPU with bf16 units, fp32 on a CPU that emulates bf16
(``--dtype auto``, ``hf_specgen.auto_dtype()``), and the one-time warning for a bf16 speculative call on such a CPU."""

from __future__ import annotations


def cpu_runs_bf16_fast() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX).

    On such CPUs bf16 halves the memory traffic and a multi-token verify costs little more than one token; on CPUs
    without them torch emulates bf16 products and a 16-token verify costs ~10x a single step, so fp32 is faster there.
    """
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes) and not onednn_caps_out_bf16()


# oneDNN's ISA masks (dnnl_cpu_isa_t): a level includes every level whose bits it holds.
_ONEDNN_ISA_MASKS = {"SSE41": 0x1, "AVX": 0x3, "AVX2": 0x7, "AVX2_VNNI": 0xF, "AVX2_VNNI_2": 0x1F,
                     "AVX512_CORE": 0x27, "AVX512_CORE_VNNI": 0x67, "AVX512_CORE_BF16": 0xE7,
                     "AVX10_1_512": 0x1EF, "AVX512_CORE_FP16": 0x1EF, "AVX10_1_512_AMX": 0xFEF,
                     "AVX512_CORE_AMX": 0xFEF, "AVX10_1_512_AMX_FP16": 0x1FEF, "AVX512_CORE_AMX_FP16": 0x1FEF}


def onednn_caps_out_bf16() -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` (or its old name ``DNNL_MAX_CPU_ISA``) keeps oneDNN below AVX512-BF16.

    torch's bf16 matrix products on a CPU run in oneDNN, so such a cap makes them emulated (measured: a 16-row bf16
    linear ran 7.5x slower under ``AVX2`` on an AVX512-BF16 CPU, fp32 unchanged) even though the CPU has the units;
    containers set it, and it is how this project emulates an AVX2-only machine (docs/benchmarks.md).
    """
    import os

    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    if cap not in _ONEDNN_ISA_MASKS:  # unset, ALL, DEFAULT, or a name oneDNN ignores too
        return False
    bf16 = _ONEDNN_ISA_MASKS["AVX512_CORE_BF16"]
    return _ONEDNN_ISA_MASKS[cap] & bf16 != bf16


def preferred_dtype(device: str) -> str:
    """``"bf16"`` on an accelerator or a CPU with bf16 units, else ``"fp32"``: the faster exact-enough choice for a
    real target (``--dtype auto`` in bench/compare, and the Space)."""
    return "bf16" if not device.startswith("cpu") or cpu_runs_bf16_fast() else "fp32"


def auto_dtype(device="cpu"):
    """The torch dtype ``--dtype auto`` picks for ``device``: bfloat16 on an accelerator or a CPU with bf16 units,
    float32 on a CPU without them (where bf16 products are emulated and a wide verify costs ~10 single steps)."""
    import torch

    return torch.bfloat16 if preferred_dtype(str(device)) == "bf16" else torch.float32


_WARNED_SLOW_BF16 = False


def warn_if_bf16_is_emulated(model) -> None:
    """Warn once per process when a speculative call runs a bf16 model on a CPU without bf16 units."""
    global _WARNED_SLOW_BF16
    import torch

    if _WARNED_SLOW_BF16 or model.device.type != "cpu" or model.get_input_embeddings().weight.dtype != torch.bfloat16:
        return
    if not cpu_runs_bf16_fast():
        import warnings

        _WARNED_SLOW_BF16 = True
        warnings.warn("This CPU has no bf16 units (AVX512-BF16 / AMX): torch emulates bf16 products, so a multi-token "
                      "verify costs about as much as 10 single steps and speculative decoding runs slower than plain "
                      "decoding. Load the model in float32 (hf_specgen.auto_dtype() picks the right dtype).",
                      stacklevel=3)
