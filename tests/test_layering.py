"""Imports run downwards only (docs/design.md#layout-and-layering): every ``robustvit`` import in the source,
including function-level ones, is checked against the layer table below."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "robustvit"
BASE = {"registry", "utils", "errors", "options", "plotting", "runs"}
LIBRARIES = {"models", "metrics", "corruptions", "attacks", "certify"}
#: package → the robustvit packages/modules it may import (besides itself).
ALLOWED = {
    "registry": {"errors", "options"},
    "options": {"errors"},
    "plotting": set(),
    "runs": {"registry", "utils", "errors", "options"},
    "utils": {"errors"},
    "errors": set(),
    "progress": BASE,
    "models": BASE,
    "metrics": BASE,
    "corruptions": BASE,
    "attacks": BASE | {"models"},
    "certify": BASE | {"models"},
    "data": BASE | LIBRARIES | {"progress"},
    "analysis": BASE | LIBRARIES | {"data", "progress"},
    "training": BASE | LIBRARIES | {"data", "progress"},
    "evaluate": BASE | LIBRARIES | {"data", "progress", "analysis", "training"},
    "report": BASE | LIBRARIES | {"data", "progress", "analysis", "training", "evaluate"},
}


def robustvit_imports(path: Path) -> set[str]:
    """Top-level robustvit packages imported anywhere in ``path`` (``robustvit.x.y`` → ``x``)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "robustvit" else [])
        else:
            continue
        names |= {m.split(".")[1] for m in mods if m.startswith("robustvit.")}
    return names


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


FILES = [p for p in sorted(SRC.rglob("*.py")) if layer_of(p) in ALLOWED]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_downwards(path: Path) -> None:
    layer = layer_of(path)
    bad = robustvit_imports(path) - ALLOWED[layer] - {layer}
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports {sorted(bad)}; see docs/design.md#layout-and-layering"
