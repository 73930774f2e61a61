"""Read run folders into one in-memory form, whatever wrote them; JSON only (no analysis, suite or model code).

A run folder holds ``results.json`` (schema 2): its ``kind`` (``eval`` | ``analysis`` | ``train``; none: eval)
and the kind's payload (``suites``, ``analyses`` or ``train``) beside ``run``, ``model``, ``data``,
``comparable`` and ``notes``. Every run becomes a dict with those keys, all three payloads (``analyses``'
``figures`` as absolute paths, ``train`` None when absent) and ``_dir``; every suite result gets its
``protocol`` entry (:func:`robustvit.protocols.attach`). ``merge_by_model`` joins the runs of one model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError
from robustvit.protocols import attach

RESULTS_FILE = "results.json"
KINDS = ("eval", "analysis", "train")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RobustvitError(f"{path} is not valid JSON ({e}); re-run the command that wrote it") from None
    except OSError as e:
        raise RobustvitError(f"cannot read {path} ({e.strerror})") from None


def _resolve_figures(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``result`` with its ``figures`` as absolute paths."""
    return {**result, "figures": [str(f if Path(f).is_absolute() else folder / f) for f in result.get("figures") or []]}


def _normalise(res: dict[str, Any], folder: Path) -> dict[str, Any]:
    if not isinstance(res, dict):
        raise RobustvitError(f"{folder / RESULTS_FILE} is not a results object; re-run the command that wrote it")
    kind = res.get("kind", "eval")
    if kind not in KINDS:
        raise RobustvitError(f"{folder / RESULTS_FILE}: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    run = {"schema": 2, "kind": kind, "run": {}, "model": {"name": folder.name}, "data": {}, "comparable": None,
           "notes": [], "suites": {}, "analyses": {}, "train": None, "_dir": str(folder)}
    run.update({k: res[k] for k in ("schema", "run", "model", "data", "comparable", "notes") if k in res})
    run["suites"] = {k: dict(v) if isinstance(v, dict) else v for k, v in (res.get("suites") or {}).items()}
    analyses = res.get("analyses") or {}
    run["analyses"] = {k: _resolve_figures(v, folder) for k, v in analyses.items() if isinstance(v, dict)} \
        if isinstance(analyses, dict) else {}
    if isinstance(res.get("train"), dict):
        run["train"] = res["train"]
    run["_dir"] = str(res.get("_dir") or folder)
    return attach(run)           # every number's protocol entry (recorded, else computed)


def load_run(path: str | Path) -> dict[str, Any]:
    """One run folder (or its ``results.json``) in the in-memory form described in the module docstring; an
    eval folder's ``analysis/`` and ``train/`` runs beside it are joined to it."""
    p = Path(path)
    folder = p.parent if p.is_file() else p
    f = folder / RESULTS_FILE if p.is_dir() else p
    if not f.is_file():
        raise RobustvitError(f"{p} holds no results.json; pass folders written by `robustvit eval`, `analyze` or "
                             "`train`")
    run = _normalise(_read_json(f), folder)
    if run["kind"] == "eval":
        for sub, field in (("analysis", "analyses"), ("train", "train")):
            if not run[field] and (folder / sub / RESULTS_FILE).is_file():
                run[field] = load_run(folder / sub)[field]
    return run


#: Folders below an eval run that ``load_run`` joins to it (not runs of their own when a parent folder is searched).
JOINED = ("analysis", "train")


def find_runs(path: str | Path) -> list[Path]:
    """The run folders ``path`` names: itself when it holds ``results.json`` (or is that file), else every folder
    below it holding one, sorted, except the ``JOINED`` folders of a run found. One line when there is none."""
    p = Path(path)
    if p.is_file() or (p / RESULTS_FILE).is_file():
        return [p]
    if not p.is_dir():
        raise RobustvitError(f"{p} holds no results.json (no such folder); pass folders written by `robustvit eval`, "
                             "`analyze` or `train`")
    found = sorted(f.parent for f in p.rglob(RESULTS_FILE) if f.is_file())
    runs = [f for f in found if not (f.name in JOINED and f.parent in found)]
    if not runs:
        raise RobustvitError(f"{p} holds no results.json at any depth; pass folders written by `robustvit eval`, "
                             "`analyze` or `train`")
    return runs


def load_runs(paths: list[str | Path]) -> list[dict[str, Any]]:
    """``load_run`` for each run folder the paths name (``find_runs``: a parent folder stands for every run
    below it), in order."""
    return [load_run(f) for p in paths for f in find_runs(p)]


def normalise(res: dict[str, Any]) -> dict[str, Any]:
    """An in-memory results dict (e.g. returned by ``run_eval``) in the form ``load_run`` returns."""
    if "kind" in res and "analyses" in res and "train" in res and "_dir" in res:
        return res
    return _normalise(res, Path(res.get("_dir") or "."))


def model_name(run: dict[str, Any]) -> str:
    return str((run.get("model") or {}).get("name") or Path(run.get("_dir", "?")).name)


def merge_by_model(runs: list[dict[str, Any]], by_data: bool = False) -> list[dict[str, Any]]:
    """Join the runs of one model (by model name; with ``by_data`` by model and data spec) into one entry:
    suites, analyses and training side by side; the eval run's header wins; notes are united and ``comparable``
    holds only if it holds for every run."""
    merged: dict[Any, dict[str, Any]] = {}
    order = {"eval": 0, "analysis": 1, "train": 2}
    for run in sorted(runs, key=lambda r: order.get(r.get("kind", "eval"), 3)):
        name: Any = model_name(run)
        if by_data:
            name = (name, (run.get("data") or {}).get("spec"))
        if name not in merged:
            merged[name] = {**run, "suites": dict(run.get("suites") or {}), "analyses": dict(run.get("analyses") or {}),
                            "notes": list(run.get("notes") or []), "kinds": [run.get("kind", "eval")]}
            continue
        m = merged[name]
        if set(m["suites"]) & set(run.get("suites") or {}):   # two evaluations of one name: keep both, told apart
            other = f"{model_name(run)} ({Path(run.get('_dir', '?')).name})"
            merged[(other, name[1]) if by_data else other] = {
                **run, "model": {**(run.get("model") or {}), "name": other}, "kinds": [run.get("kind", "eval")]}
            continue
        m["kinds"].append(run.get("kind", "eval"))
        for k, v in (run.get("suites") or {}).items():
            m["suites"].setdefault(k, v)
        for k, v in (run.get("analyses") or {}).items():
            m["analyses"].setdefault(k, v)
        m["train"] = m.get("train") or run.get("train")
        m["notes"] += [n for n in run.get("notes") or [] if n not in m["notes"]]
        if run.get("comparable") is False:
            m["comparable"] = False
        for k in ("model", "data", "run"):
            if not m.get(k) or m[k] == {"name": model_name(run)}:
                m[k] = run.get(k) or m.get(k)
    return [merged[n] for n in merged]
