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
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def machine_description(device: str = "cpu") -> str:
    """The kind of machine a measurement ran on, as tables and cards name it: "2-core AMD EPYC with AVX512-BF16",
    "8-core Intel Xeon without bf16 units (AVX2)", or the accelerator's name. Speed ratios differ several-fold between
    CPUs with and without bf16 units, so a figure without this line cannot be compared."""
    import os
    import platform

    import torch

    device = str(device)
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    if not device.startswith("cpu"):
        return device
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    name = ""
    try:
        with open("/proc/cpuinfo") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:  # not Linux
        pass
    name = " ".join(name.split()) or platform.processor() or "CPU"
    kernels = torch.backends.cpu.get_cpu_capability()  # the vector kernels torch runs (ATEN_CPU_CAPABILITY caps it)
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        units = "with AMX"
    elif getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        units = "with AVX512-BF16"
    else:
        return f"{cores}-core {name} without bf16 units ({kernels})"
    # a CPU with bf16 units whose torch kernels were capped lower (emulating an older CPU) says so
    capped = "" if kernels.startswith(("AVX512", "AMX")) else f", kernels capped at {kernels}"
    return f"{cores}-core {name} {units}{capped}"


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
