"""The models this project ships (``hub_models/``): the tiny world, the real target's drafters, custom_generate.

In a checkout (and an editable install) they are the repository's ``hub_models/`` folder; a wheel carries the same
folders as package data under ``hf_specgen/_hub_models`` (pyproject maps one onto the other), so a non-editable
install finds them without network.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def hub_models_dir() -> Path:
    """The folder holding the shipped models: the checkout's ``hub_models/`` if there is one, else the wheel's copy."""
    for candidate in (_PACKAGE.parent / "hub_models", _PACKAGE / "_hub_models"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"hf_specgen's embedded models are missing (looked in {_PACKAGE.parent / 'hub_models'} and "
        f"{_PACKAGE / '_hub_models'}): reinstall hf-specgen from a wheel or a full checkout")


def embedded_names() -> list[str]:
    return sorted(p.name for p in hub_models_dir().iterdir() if (p / "config.json").exists()
                  or (p / "custom_generate").is_dir())


def embedded_model(name: str) -> Path:
    """The folder of a shipped model, e.g. ``embedded_model("smollm2-135m-instruct-dflash-b16")``.

    Pass the result to ``from_pretrained`` or :func:`hf_specgen.load_drafter` like any local folder.
    """
    folder = hub_models_dir() / name
    if not folder.is_dir():
        raise ValueError(f"no embedded model named {name!r}; hf_specgen ships: {', '.join(embedded_names())}")
    return folder
