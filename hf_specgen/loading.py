"""Loading drafters: our classes for any checkpoint in a supported format, wherever it came from."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from .models.dflash import DFlashDraftModel


def _is_dflash_config(config_dict: dict) -> bool:
    return "DFlashDraftModel" in (config_dict.get("architectures") or []) or "dflash_config" in config_dict


def load_drafter(path_or_repo: str, **from_pretrained_kwargs):
    """Load a drafter folder or Hub repo with hf_specgen's model class.

    Works for checkpoints saved by hf_specgen and by z-lab's own code alike: only config.json and the
    weights are read; any modeling file in the folder (z-lab's ``dflash.py``) is ignored, so no remote code
    runs. Extra keyword arguments go to ``from_pretrained`` (``dtype=``, ``device_map=``, ``revision=``...).
    """
    config_dict, _ = PretrainedConfig.get_config_dict(path_or_repo, **{
        k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")
    })
    if _is_dflash_config(config_dict):
        return DFlashDraftModel.from_pretrained(path_or_repo, **from_pretrained_kwargs)
    raise ValueError(
        f"{path_or_repo} is not a drafter hf_specgen knows (architectures={config_dict.get('architectures')}). "
        "Supported: DFlash drafters (config with `dflash_config` / architectures ['DFlashDraftModel'])."
    )


def is_dflash_drafter(model) -> bool:
    """Ours, or z-lab's remote-code class (same name and tensor layout)."""
    return isinstance(model, DFlashDraftModel) or (
        type(model).__name__ == "DFlashDraftModel" and hasattr(model, "fc") and hasattr(model, "layers"))


def as_dflash_drafter(model) -> DFlashDraftModel:
    """Our DFlashDraftModel for ``model``: itself, or a weight-sharing twin of a z-lab remote-code instance."""
    if isinstance(model, DFlashDraftModel):
        return model
    if is_dflash_drafter(model):
        twin = getattr(model, "_hf_specgen_twin", None)
        if twin is None:
            # Same tensor names as z-lab's class: rebuild ours around the very same parameters (no copy).
            with torch.device("meta"):
                twin = DFlashDraftModel(model.config)
            twin.load_state_dict(model.state_dict(), strict=True, assign=True)
            device = next(model.parameters()).device
            with torch.device(device):  # rotary buffers are not in the state dict: rebuild them for real
                twin.rotary_emb = type(twin.rotary_emb)(config=model.config)
            twin.eval()
            model._hf_specgen_twin = twin
        return twin
    raise ValueError(
        f"speculative_mode='dflash' needs a DFlash drafter as assistant_model, got {type(model).__name__}. "
        "Load one with hf_specgen.load_drafter(path) or AutoModel.from_pretrained(path, trust_remote_code=True)."
    )
