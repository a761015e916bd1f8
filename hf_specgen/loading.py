"""Loading drafters: our classes for any checkpoint in a supported format, wherever it came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import PretrainedConfig

from .models.dflash import DFlashDraftModel


def _is_dflash_config(config_dict: dict) -> bool:
    return "DFlashDraftModel" in (config_dict.get("architectures") or []) or "dflash_config" in config_dict


def load_drafter(path_or_repo: str | os.PathLike, **from_pretrained_kwargs):
    """Load a drafter folder or Hub repo with hf_specgen's model class.

    Works for checkpoints saved by hf_specgen and by z-lab's own code alike: only config.json and the
    weights are read; any modeling file in the folder (z-lab's ``dflash.py``) is ignored, so no remote code
    runs. Extra keyword arguments go to ``from_pretrained`` (``dtype=``, ``device_map=``, ``revision=``...).
    """
    path_or_repo = _checked_source(path_or_repo)
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(path_or_repo, **{
            k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")
        })
    except OSError as error:  # only Hub ids get here: local folders were checked above
        raise OSError(f"{path_or_repo} is not a local folder, and the Hub repo of that name could not be read "
                      f"({str(error).splitlines()[0]})") from error
    try:
        return _load_by_config(path_or_repo, config_dict, from_pretrained_kwargs)
    except SafetensorError as error:
        files = sorted(str(p) for p in Path(path_or_repo).glob("*.safetensors")) if os.path.isdir(path_or_repo) else []
        raise ValueError(f"a weights file of {path_or_repo} is damaged ({error}): {', '.join(files) or 'its weights'}"
                         " cannot be read; the download or copy was probably cut short, so fetch it again") from error


def plainly_local(text: str) -> bool:
    """Whether a model argument that is no folder here names a local path, not a Hub repo: a Hub id is "name" or
    "namespace/name"; anything else (an existing file, absolute, ./relative, deeper paths) is meant locally."""
    return (Path(text).expanduser().exists() or text.startswith((".", "/", "~")) or text.count("/") > 1
            or os.sep != "/" and os.sep in text)


def _checked_source(path_or_repo) -> str:
    """A local folder (checked: it exists and has a config.json) or a Hub repo id, as a string.

    Without this check a mistyped local path reaches huggingface_hub and comes back as a repo-id error.
    """
    text = os.fspath(path_or_repo)
    folder = Path(text).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            present = ", ".join(sorted(p.name for p in folder.iterdir())[:8]) or "nothing"
            raise ValueError(f"{folder} has no config.json (it holds: {present}): a drafter folder needs the "
                             "config.json saved with its weights")
        return str(folder)
    if plainly_local(text):
        raise FileNotFoundError(f"no drafter folder at {folder}" + ("" if folder.exists() else
                                f" ({folder.resolve()} does not exist)") + ": check the path")
    return text


def _load_by_config(path_or_repo: str, config_dict: dict, from_pretrained_kwargs: dict):
    if _is_dflash_config(config_dict):
        return DFlashDraftModel.from_pretrained(path_or_repo, **from_pretrained_kwargs)
    if config_dict.get("model_type") == "whiflash":
        from .models.whiflash import WhiFlash

        if config_dict.get("drafter_paths"):
            return _load_linked_whiflash(path_or_repo, config_dict, from_pretrained_kwargs)
        return WhiFlash.from_pretrained(path_or_repo, **from_pretrained_kwargs)
    if _is_eagle3_config(config_dict):
        return load_eagle3(path_or_repo, config_dict, **from_pretrained_kwargs)
    raise ValueError(
        f"{path_or_repo} is not a drafter hf_specgen knows (architectures={config_dict.get('architectures')}). "
        "Supported: DFlash drafters (config with `dflash_config` / architectures ['DFlashDraftModel']) and EAGLE-3 "
        "drafters (one-layer Llama-style config with `draft_vocab_size`, EAGLE / SpecForge / vLLM tensor names)."
    )


def _load_linked_whiflash(folder: str, config_dict: dict, kwargs: dict):
    """A bundle written by ``WhiFlash.save_linked``: load both drafters from their folders, then the router."""
    from safetensors.torch import load_file

    from .models.whiflash import WhiFlash, WhiFlashConfig, WhiFlashRouter

    def resolve(path: str) -> str:
        local = os.path.normpath(os.path.join(folder, path))
        return local if os.path.isdir(folder) and os.path.exists(local) else path

    paths = config_dict["drafter_paths"]
    ar, parallel = load_drafter(resolve(paths["ar"]), **kwargs), load_drafter(resolve(paths["parallel"]), **kwargs)
    # The links are how this folder was read, not a setting: a bundle saved from it again is self-contained.
    settings = {k: v for k, v in config_dict.items()
                if k not in ("architectures", "model_type", "transformers_version", "drafter_paths")}
    config = WhiFlashConfig(**settings)
    router = None
    if config.neural_router_hidden_size:
        router = WhiFlashRouter(config.neural_router_hidden_size)
        weights = load_file(os.path.join(folder, "model.safetensors"))
        router.load_state_dict({k.removeprefix("neural_router."): v for k, v in weights.items()})
        router = router.to(next(parallel.parameters()).dtype).eval()
    bundle = WhiFlash(ar=ar, parallel=parallel, router=config.router, neural_router=router,
                      entropy_threshold=config.entropy_threshold, neural_threshold=config.neural_threshold,
                      lazy=config.lazy)
    bundle.config.entropy_thresholds = dict(config.entropy_thresholds)
    bundle.config.drafter_paths = dict(paths)
    return bundle.eval()


def _is_eagle3_config(config_dict: dict) -> bool:
    architectures = config_dict.get("architectures") or []
    return any("Eagle3" in a for a in architectures) or (
        config_dict.get("num_hidden_layers") == 1 and "draft_vocab_size" in config_dict)


# vLLM's names for the EAGLE / SpecForge tensors.
_EAGLE3_RENAMES = (("layers.0.", "midlayer."), ("draft_id_to_target_id", "d2t"), ("model.", ""))


def _eagle3_state_dict(path_or_repo: str, hub_kwargs: dict) -> dict[str, torch.Tensor]:
    from huggingface_hub import hf_hub_download
    from safetensors.torch import load_file

    def fetch(name: str):
        local = os.path.join(path_or_repo, name)
        if os.path.isdir(path_or_repo):
            return local if os.path.exists(local) else None
        try:
            return hf_hub_download(path_or_repo, name, **hub_kwargs)
        except Exception:  # noqa: BLE001 (absent file: try the next format)
            return None

    if (file := fetch("model.safetensors")) is not None:
        tensors = load_file(file)
    elif (index := fetch("model.safetensors.index.json")) is not None:  # sharded (save_pretrained's max_shard_size)
        with open(index) as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            if (file := fetch(shard)) is None:
                raise ValueError(f"{path_or_repo} lists the shard {shard} in model.safetensors.index.json, but it is "
                                 "missing: download the whole folder")
            tensors.update(load_file(file))
    elif (file := fetch("pytorch_model.bin")) is not None:
        tensors = torch.load(file, map_location="cpu", weights_only=True)
    else:
        raise ValueError(f"{path_or_repo} has neither model.safetensors nor pytorch_model.bin")
    renamed = {}
    for name, tensor in tensors.items():
        for old, new in _EAGLE3_RENAMES:
            if name.startswith(old) or name == old:
                name = new + name[len(old):]
        renamed[name] = tensor
    return renamed


def load_eagle3(path_or_repo: str, config_dict: dict | None = None, target_layer_ids: list[int] | None = None,
                dtype=None, **hub_kwargs):
    """An EAGLE-3 drafter from the EAGLE / SpecForge / vLLM layouts (safetensors or pytorch_model.bin).

    ``target_layer_ids`` (decoder-layer outputs, 0-based: hidden_states index - 1) overrides the default taps
    [1, L//2-1, L-4]. Configs that name taps in an engine-specific convention (``eagle_config``) are refused unless
    this is given, because engines disagree by one and a shift silently lowers acceptance.
    """
    from transformers import LlamaConfig

    from .models.eagle3 import Eagle3DraftModel

    hub_kwargs = {k: v for k, v in hub_kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")}
    if config_dict is None:
        config_dict, _ = PretrainedConfig.get_config_dict(path_or_repo, **hub_kwargs)
    config_dict = dict(config_dict)
    aux = (config_dict.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if target_layer_ids is not None:
        config_dict["target_layer_ids"] = list(target_layer_ids)
    elif aux is not None and not config_dict.get("target_layer_ids"):
        raise ValueError(
            f"{path_or_repo} names its target taps as eagle_aux_hidden_state_layer_ids={aux}, whose index convention "
            "differs between engines. Pass target_layer_ids=[...] (0-based decoder-layer outputs, i.e. "
            "output_hidden_states index - 1) to load_drafter."
        )
    for key in ("architectures", "auto_map", "model_type"):
        config_dict.pop(key, None)
    model = Eagle3DraftModel(LlamaConfig(**config_dict))
    state = _eagle3_state_dict(path_or_repo, hub_kwargs)
    state.pop("embed_tokens.weight", None)  # the target's embedding table is used
    if "d2t" not in state:  # no reduced vocabulary: draft ids are target ids
        if model.draft_vocab_size != model.vocab_size:
            raise ValueError(f"{path_or_repo} has a {model.draft_vocab_size}-token draft vocabulary but no d2t mapping")
        state["d2t"] = torch.zeros(model.draft_vocab_size, dtype=torch.long)
        state["t2d"] = torch.ones(model.vocab_size, dtype=torch.bool)
    elif "t2d" not in state:
        t2d = torch.zeros(model.vocab_size, dtype=torch.bool)
        t2d[torch.arange(model.draft_vocab_size) + state["d2t"]] = True
        state["t2d"] = t2d
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary_emb")]
    if missing or unexpected:
        raise ValueError(f"{path_or_repo} does not match the EAGLE-3 layout: missing {missing}, unexpected {unexpected}")
    if dtype is None or dtype == "auto":  # like from_pretrained's default: keep the checkpoint's dtype
        dtype = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    return model.to(dtype).eval()


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
