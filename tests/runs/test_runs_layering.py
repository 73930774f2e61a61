"""``robustvit.runs`` is a base layer: it imports only the other base modules (and torch / the standard library)."""

import ast
from pathlib import Path

import pytest

RUNS = Path(__file__).resolve().parents[2] / "src" / "robustvit" / "runs"
BASE = {"_version", "errors", "utils", "registry", "options", "protocols", "runs"}


def _robustvit_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        else:
            continue
        names |= {m.split(".")[1] for m in mods if m.startswith("robustvit.")}
    return names


@pytest.mark.parametrize("path", sorted(RUNS.glob("*.py")), ids=lambda p: p.name)
def test_runs_imports_only_the_base(path):
    assert _robustvit_imports(path) <= BASE, f"{path.name} imports {sorted(_robustvit_imports(path) - BASE)}"


def test_evaluate_and_analysis_keep_no_store_of_their_own():
    src = RUNS.parent
    assert not (src / "evaluate" / "store.py").exists() and not (src / "analysis" / "store.py").exists()
    for f in [*(src / "evaluation").glob("*.py"), *(src / "analysis").glob("*.py"), src / "data" / "export.py"]:
        text = f.read_text()
        assert "sqlite3" not in text and "os.replace" not in text, f"{f.name}: use robustvit.runs"
