"""`specgen hub push`: every shipped folder is a complete Hub repo; incomplete ones are refused before any upload."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hf_specgen.cli import main
from hf_specgen.hub import IncompleteRepoError, check_repo_folder, push

HUB = Path(__file__).resolve().parents[1] / "hub_models"
FOLDERS = sorted(p.name for p in HUB.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", FOLDERS)
def test_every_shipped_folder_passes_the_dry_run(name, capsys):
    main(["hub", "push", str(HUB / name), "--repo", f"hf-specgen/{name}", "--dry-run"])
    out = capsys.readouterr().out
    assert "dry run: nothing sent" in out and "README.md" in out


class RecordingApi:
    """Stands in for huggingface_hub.HfApi: records the calls instead of sending them."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs["repo_id"], kwargs))


def test_push_creates_the_repo_then_uploads_the_folder():
    api = RecordingApi()
    files = push(HUB / "specgen-tiny-dflash-b16", "me/drafter", private=True, api=api)
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][2]["private"] is True and api.calls[0][2]["exist_ok"] is True
    assert api.calls[1][2]["folder_path"].endswith("specgen-tiny-dflash-b16")
    assert {"config.json", "model.safetensors", "dflash.py", "README.md"} <= set(files)


def test_incomplete_folders_are_refused_with_what_is_missing(tmp_path):
    folder = tmp_path / "drafter"
    shutil.copytree(HUB / "specgen-tiny-dflash-b16", folder)
    (folder / "dflash.py").unlink()
    with pytest.raises(IncompleteRepoError, match="auto_map names dflash.DFlashDraftModel but dflash.py is missing"):
        check_repo_folder(folder)
    (folder / "README.md").write_text("no front matter\n")
    with pytest.raises(IncompleteRepoError, match="no `library_name`"):
        check_repo_folder(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(IncompleteRepoError, match="no weights"):
        check_repo_folder(folder)
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copy(HUB / "specgen-tiny-whiflash" / "README.md", linked / "README.md")
    (linked / "config.json").write_text(json.dumps({"model_type": "whiflash", "drafter_paths": {"ar": "../a"}}))
    (linked / "model.safetensors").write_bytes(b"")
    with pytest.raises(IncompleteRepoError, match="links its drafters by path"):
        check_repo_folder(linked)
    cg = tmp_path / "cg"
    shutil.copytree(HUB / "speculative-generate", cg)
    (cg / "custom_generate" / "requirements.txt").write_text("hf-specgen~=0.1\n")
    with pytest.raises(IncompleteRepoError, match="uses ~="):
        check_repo_folder(cg)
    api = RecordingApi()
    with pytest.raises(SystemExit, match="not ready to push"):
        main(["hub", "push", str(cg), "--repo", "me/cg"])
    with pytest.raises(ValueError, match="not ORG/NAME"):
        push(HUB / "specgen-tiny", "no-slash", api=api)
    assert api.calls == []


def _snippets(name: str) -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", (HUB / name / "README.md").read_text(), re.S)


def test_card_usage_snippets_run_as_written():
    """Every tiny-world card's last Python snippet is complete: each runs from the repository root as it stands, in a
    fresh namespace of one interpreter (the smollm2 cards: test_real_target.py)."""
    import subprocess
    import sys

    names = [n for n in FOLDERS if not n.startswith("smollm2")]
    snippets = {name: _snippets(name) for name in names}
    assert all(snippets.values()), [name for name, found in snippets.items() if not found]
    program = "\n".join(f"print('=== {name}', flush=True)\nexec({found[-1]!r}, {{}})" for name, found in snippets.items())
    result = subprocess.run([sys.executable, "-c", program], cwd=HUB.parent, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = {part.split("\n", 1)[0]: part.split("\n", 1)[1:] for part in result.stdout.split("=== ")[1:]}
    assert set(printed) == set(names) and all(text and text[0].strip() for text in printed.values()), result.stdout
