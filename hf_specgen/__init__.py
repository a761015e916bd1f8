"""hf_specgen: fast, exact speculative decoding for Hugging Face transformers' generate().

The public names are imported on first use (PEP 562), so ``import hf_specgen`` and ``specgen --help`` do not pay for
torch and transformers until something needs them.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {  # public name -> the module that defines it
    "SPECULATIVE_MODES": ".config", "SpeculativeConfig": ".config",
    "SpeculativeGenerateOutput": ".engine.loop", "SpeculativeStats": ".engine.stats",
    "load_drafter": ".loading", "SpecGenMixin": ".mixin", "enable": ".mixin", "release_compiled": ".mixin",
    "DFlashDraftModel": ".models.dflash", "Eagle3DraftModel": ".models.eagle3",
    "WhiFlash": ".models.whiflash", "WhiFlashRouter": ".models.whiflash",
    "save_costs": ".engine.width_policy", "load_costs": ".engine.width_policy",
    "load_target": ".targets", "auto_dtype": ".dtypes", "prepare_target": ".targets", "embedded_model": ".embedded",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hf_specgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
