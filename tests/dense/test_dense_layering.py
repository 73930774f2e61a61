"""``robustvit.dense`` sits beside ``training`` (it reuses TrainConfig): it imports the libraries, ``data`` and
``training``, never ``evaluate``, ``report``, ``analysis`` or the CLI."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "robustvit"
ALLOWED = {"registry", "utils", "errors", "progress", "models", "metrics", "corruptions", "attacks", "data",
           "training", "dense"}


def test_dense_imports_run_downwards() -> None:
    for path in sorted((SRC / "dense").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("robustvit."):
                assert node.module.split(".")[1] in ALLOWED, f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("robustvit."):
                        assert a.name.split(".")[1] in ALLOWED, f"{path.name} imports {a.name}"
