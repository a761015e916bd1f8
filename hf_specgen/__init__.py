"""hf_specgen: fast, exact speculative decoding for Hugging Face transformers' generate()."""

from .config import SPECULATIVE_MODES, SpeculativeConfig
from .engine.loop import SpeculativeGenerateOutput
from .engine.stats import SpeculativeStats
from .loading import load_drafter
from .mixin import SpecGenMixin, enable
from .models.dflash import DFlashDraftModel
from .models.eagle3 import Eagle3DraftModel
from .models.whiflash import WhiFlash, WhiFlashRouter
from .targets import load_target, prepare_target

__version__ = "0.1.0"

__all__ = [
    "SPECULATIVE_MODES", "SpeculativeConfig", "SpeculativeGenerateOutput", "SpeculativeStats", "load_drafter",
    "SpecGenMixin", "enable", "DFlashDraftModel", "Eagle3DraftModel", "WhiFlash", "WhiFlashRouter",
    "load_target", "prepare_target", "__version__",
]
