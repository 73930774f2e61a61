"""Imports run downwards only and no module imports itself back (docs/design.md#layout-and-layering).

Every module of ``robustvit`` (``robustvit/__init__.py`` included) is read with ``ast``; every ``robustvit``
import counts, at module level or inside a function. Two rules:

* **layers**: a module imports only from its own package and the packages its layer may use (:data:`ALLOWED`);
* **no cycles**: the graph of imports between modules (``from robustvit.a import b`` is an edge to the module
  ``a.b`` when there is one, else to the package ``a``) has no cycle.

A registry's ``package=`` argument names the package to load as a string: it is no import edge (a registry loads
its components; the components import the registry).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "robustvit"
BASE = {"_version", "registry", "utils", "errors", "options", "plotting", "protocols", "runs"}
LIBRARIES = {"models", "metrics", "corruptions", "attacks", "certify"}
MIDDLE = BASE | LIBRARIES | {"data", "progress", "analysis", "training"}
COMPOSED = MIDDLE | {"evaluation", "report", "leaderboard"}
#: layer (a top-level package or module; ``robustvit`` is the package's ``__init__``) → what it may import.
ALLOWED: dict[str, set[str]] = {
    "robustvit": {"_version", "errors"},
    "_version": set(),
    "protocols": set(),
    "errors": set(),
    "plotting": set(),
    "options": {"errors"},
    "utils": {"errors"},
    "registry": {"errors", "options"},
    "runs": {"_version", "registry", "utils", "errors", "options", "protocols"},
    "progress": BASE,
    "models": BASE,
    "metrics": BASE,
    "corruptions": BASE,
    "attacks": BASE | {"models"},
    "certify": BASE | {"models"},
    "certify": BASE | {"models"},
    "data": BASE | LIBRARIES | {"progress"},
    "analysis": BASE | LIBRARIES | {"data", "progress"},
    "training": BASE | LIBRARIES | {"data", "progress"},
    "evaluation": MIDDLE,
    "report": MIDDLE | {"evaluation"},
    "dense": MIDDLE | {"evaluation"},
    "leaderboard": MIDDLE | {"evaluation", "report"},
    "capabilities": COMPOSED,
    "facade": COMPOSED,
    "study": COMPOSED,
    "demo": COMPOSED | {"capabilities", "facade", "study"},
    "cli": COMPOSED | {"capabilities", "dense", "facade", "study", "demo"},
}
def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """The robustvit modules ``path`` imports anywhere (module level and inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m in MODULES}


GRAPH = {m: imports(p) for m, p in MODULES.items()}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "robustvit"


def test_every_module_has_a_layer() -> None:
    assert {layer(m) for m in MODULES} <= set(ALLOWED), "add the new top-level module or package to ALLOWED"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_downwards(module: str) -> None:
    own = layer(module)
    ok = ALLOWED[own] | {own, "robustvit"}          # the package's __init__ sits at the bottom (errors, _version)
    bad = sorted(t for t in GRAPH[module] if layer(t) not in ok)
    assert not bad, f"{module} ({own}) imports {bad}; see docs/design.md#layout-and-layering"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e", "d"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    assert cycles(GRAPH) == [], "modules that import each other (directly or round a circle)"

