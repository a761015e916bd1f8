"""The package's layering (ARCHITECTURE.md: data flows down, nothing flows back up), read from the import statements."""

from __future__ import annotations

import ast
from pathlib import Path

import hf_specgen

PACKAGE = Path(hf_specgen.__file__).parent

# Subpackages (and top-level modules) each layer must never import.
FORBIDDEN = {
    "engine": {"drafters", "mixin", "bench", "training", "cli", "loading", "hub", "targets"},
    "drafters": {"mixin", "bench", "training", "cli"},
    "training": {"bench", "cli", "mixin"},
    "models": {"engine", "drafters", "mixin", "bench", "training", "cli", "config", "loading"},
}


def _imported_parts(path: Path) -> set[str]:
    """First component under hf_specgen of every relative or absolute hf_specgen import in ``path``."""
    parts = set()
    layer_depth = len(path.relative_to(PACKAGE).parts) - 1  # 1 inside a subpackage
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # from ..engine.cache import x / from . import y
                up = node.level - 1
                if up < layer_depth:
                    continue  # a sibling module of the same subpackage
                if node.module:
                    parts.add(node.module.split(".")[0])
                else:
                    parts.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("hf_specgen."):
                parts.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            parts.update(a.name.split(".")[1] for a in node.names if a.name.startswith("hf_specgen."))
    return parts


def test_layers_import_only_downwards():
    violations = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).glob("*.py")):
            bad = _imported_parts(path) & forbidden
            if bad:
                violations.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert not violations, violations


def test_the_reader_sees_imports_that_reach_up():
    """The reader finds the relative imports that leave a subpackage (so an empty violation list means something)."""
    assert "reports" in _imported_parts(PACKAGE / "training" / "export.py")
    assert {"engine", "models"} <= _imported_parts(PACKAGE / "drafters" / "dflash.py")
    assert "mixin" in _imported_parts(PACKAGE / "bench" / "models.py")
