"""``specgen hub push``: check that a folder is a complete Hub repo, then create the repo and upload it.

Checked before anything is sent (all offline): a model card whose YAML front matter ``huggingface_hub.ModelCard``
parses, with ``library_name``, ``license`` and ``tags``; for a model, ``config.json``, its weights, and every
remote-code file its ``auto_map`` names; for a WhiFlash bundle that links its drafters instead of containing them, a
refusal (the Hub copy could not find them); for a ``custom_generate`` repo, ``custom_generate/generate.py`` defining
``generate`` and a ``requirements.txt`` transformers can read.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class IncompleteRepoError(ValueError):
    pass


def _card_problems(folder: Path) -> list[str]:
    from huggingface_hub import ModelCard

    readme = folder / "README.md"
    if not readme.exists():
        return ["README.md (the model card) is missing"]
    try:
        card = ModelCard.load(readme)
    except Exception as error:  # the YAML front matter does not parse
        return [f"README.md metadata does not parse: {error}"]
    meta = card.data.to_dict()
    return [f"README.md metadata has no `{key}`" for key in ("library_name", "license", "tags") if not meta.get(key)]


def _model_problems(folder: Path) -> list[str]:
    config_path = folder / "config.json"
    if not config_path.exists():
        return ["config.json is missing"]
    config = json.loads(config_path.read_text())
    problems = []
    if config.get("drafter_paths"):
        problems.append("config.json links its drafters by path (`drafter_paths`), which a Hub copy cannot follow: "
                        "save the bundle with save_pretrained (self-contained) before pushing")
    if not any((folder / name).exists() for name in WEIGHT_FILES):
        problems.append(f"no weights ({' / '.join(WEIGHT_FILES)})")
    for target in (config.get("auto_map") or {}).values():
        for reference in ([target] if isinstance(target, str) else [t for t in target if t]):
            module = reference.split("--")[-1].rsplit(".", 1)[0]
            if not (folder / f"{module}.py").exists():
                problems.append(f"auto_map names {reference} but {module}.py is missing")
    return problems


def _custom_generate_problems(folder: Path) -> list[str]:
    code = folder / "custom_generate" / "generate.py"
    problems = []
    if not code.exists():
        return ["custom_generate/generate.py is missing"]
    tree = ast.parse(code.read_text())
    if not any(isinstance(node, ast.FunctionDef) and node.name == "generate" for node in tree.body):
        problems.append("custom_generate/generate.py defines no top-level `generate` function")
    requirements = folder / "custom_generate" / "requirements.txt"
    if not requirements.exists():
        problems.append("custom_generate/requirements.txt is missing")
    else:
        for line in requirements.read_text().splitlines():
            if "~=" in line:  # transformers reads only the first specifier of a line and cannot parse this one
                problems.append(f"custom_generate/requirements.txt: `{line}` uses ~=, which transformers cannot read")
    return problems


def check_repo_folder(folder: str | Path) -> str:
    """The repo's kind ("model" or "custom_generate") when it is complete; IncompleteRepoError listing what is not."""
    folder = Path(folder)
    if not folder.is_dir():
        raise IncompleteRepoError(f"{folder} is not a folder")
    kind = "custom_generate" if (folder / "custom_generate").is_dir() else "model"
    problems = _card_problems(folder)
    problems += _custom_generate_problems(folder) if kind == "custom_generate" else _model_problems(folder)
    if problems:
        raise IncompleteRepoError(f"{folder} is not ready to push:\n- " + "\n- ".join(problems))
    return kind


def repo_files(folder: str | Path) -> list[tuple[str, int]]:
    """(path in the repo, bytes) of what upload_folder would send; caches and bytecode are left out."""
    folder = Path(folder)
    return [(str(p.relative_to(folder)), p.stat().st_size) for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")]


def push(folder: str | Path, repo_id: str, private: bool = False, dry_run: bool = False, api=None) -> list[str]:
    """Check, then create the repo (if needed) and upload the folder; ``dry_run`` stops after printing the plan."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise ValueError(f"--repo {repo_id!r} is not ORG/NAME")
    kind = check_repo_folder(folder)
    files = repo_files(folder)
    print(f"{folder}: a complete {kind} repo, {len(files)} files, {sum(s for _, s in files) / 2**20:.1f} MB")
    for name, size in files:
        print(f"  {name} ({size / 2**10:.0f} KB)")
    if dry_run:
        print(f"dry run: nothing sent; without --dry-run this creates {repo_id} "
              f"({'private' if private else 'public'}) and uploads the files above")
        return [name for name, _ in files]
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                      ignore_patterns=["**/__pycache__/**", ".*"])
    print(f"pushed {folder} to https://huggingface.co/{repo_id}")
    return [name for name, _ in files]
