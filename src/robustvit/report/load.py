"""Read run folders into one in-memory form, whatever wrote them.

A run folder holds ``results.json``. Schema 2 names its ``kind`` (``eval`` | ``analysis`` | ``train``) and
carries the kind's payload (``suites``, ``analyses`` or ``train``) beside ``run``, ``model``, ``data``,
``comparable`` and ``notes``. Schema 1 folders are read too: an eval ``results.json`` (with analyses in
``analysis/`` beside it), an analysis folder (``analyses.json`` + ``<name>.json``) and a training folder
(``metrics.jsonl`` + ``config.yaml``).

Every run becomes a dict with ``schema``, ``kind``, ``run``, ``model``, ``data``, ``comparable``, ``notes``,
``suites`` ({key: result}), ``analyses`` ({name: result}; each result's ``figures`` resolved to absolute
paths), ``train`` (``{"config", "epochs", "checkpoints"}`` or None) and ``_dir``. ``merge_by_model`` joins the
runs of one model (an eval, its analyses and its training) into one entry for the report.
This module reads JSON only: it imports no analysis, suite or model code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError

RESULTS_FILE = "results.json"
ANALYSIS_MANIFEST = "analyses.json"
METRICS_FILE = "metrics.jsonl"
KINDS = ("eval", "analysis", "train")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RobustvitError(f"{path} is not valid JSON ({e}); re-run the command that wrote it") from None
    except OSError as e:
        raise RobustvitError(f"cannot read {path} ({e.strerror})") from None


def _empty(kind: str, folder: Path) -> dict[str, Any]:
    return {"schema": 2, "kind": kind, "run": {}, "model": {"name": folder.name}, "data": {}, "comparable": None,
            "notes": [], "suites": {}, "analyses": {}, "train": None, "_dir": str(folder)}


def _resolve_figures(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    figs = [str(f if Path(f).is_absolute() else folder / f) for f in result.get("figures") or []]
    return {**result, "figures": figs}


def _analysis_folder(folder: Path) -> dict[str, Any] | None:
    """Schema-1 analysis folder: ``analyses.json`` (the run header) and ``<name>.json`` per analysis."""
    man_path = folder / ANALYSIS_MANIFEST
    if not man_path.is_file():
        return None
    man = _read_json(man_path)
    if not isinstance(man, dict) or not isinstance(man.get("analyses"), list):
        raise RobustvitError(f"{man_path} is not an analysis manifest (no 'analyses' list); re-run `robustvit analyze`")
    run = _empty("analysis", folder)
    run.update({k: man[k] for k in ("run", "model", "data") if isinstance(man.get(k), dict)})
    for name in man["analyses"]:
        f = folder / f"{name}.json"
        if f.is_file():
            run["analyses"][name] = _resolve_figures(_read_json(f), folder)
    notes = [n for r in run["analyses"].values() for n in r.get("notes") or []]
    run["notes"] = list(dict.fromkeys(notes))
    run["comparable"] = all(r.get("comparable", True) for r in run["analyses"].values())
    return run


def _train_payload(folder: Path) -> dict[str, Any] | None:
    """Schema-1 training folder: ``metrics.jsonl`` rows (one per epoch) and ``config.yaml``."""
    metrics = folder / METRICS_FILE
    if not metrics.is_file():
        return None
    epochs = []
    for i, line in enumerate(metrics.read_text().splitlines()):
        if line.strip():
            try:
                epochs.append(json.loads(line))
            except json.JSONDecodeError:
                raise RobustvitError(f"{metrics} line {i + 1} is not JSON; delete the line or re-run training") from None
    config: dict[str, Any] = {}
    cfg_file = folder / "config.yaml"
    if cfg_file.is_file():
        import yaml

        loaded = yaml.safe_load(cfg_file.read_text())
        config = loaded if isinstance(loaded, dict) else {}
    ckpts = sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "spec.json").is_file())
    return {"config": config, "epochs": epochs, "checkpoints": ckpts}


def _normalise(res: dict[str, Any], folder: Path) -> dict[str, Any]:
    if not isinstance(res, dict):
        raise RobustvitError(f"{folder / RESULTS_FILE} is not a results object; re-run the command that wrote it")
    kind = res.get("kind", "eval")
    if kind not in KINDS:
        raise RobustvitError(f"{folder / RESULTS_FILE}: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    run = _empty(kind, folder)
    for k in ("schema", "run", "model", "data", "comparable", "notes"):
        if k in res:
            run[k] = res[k]
    run["schema"] = res.get("schema", 1)
    suites = dict(res.get("suites") or {})
    legacy = suites.pop("analysis", None)          # schema 1: analyses attached as a pseudo-suite
    run["suites"] = suites
    analyses = res.get("analyses") or {}
    if isinstance(analyses, list):                 # a manifest's list of names
        analyses = {}
    run["analyses"] = {k: _resolve_figures(v, folder) for k, v in analyses.items()
                       if isinstance(v, dict)}
    if isinstance(legacy, dict) and isinstance(legacy.get("results"), dict):
        adir = Path(legacy.get("dir") or folder / "analysis")
        run["analyses"].update({k: _resolve_figures(v, adir) for k, v in legacy["results"].items()})
    if isinstance(res.get("train"), dict):
        run["train"] = res["train"]
    elif isinstance(res.get("training"), list):    # rows injected by older demos
        run["train"] = {"config": {}, "epochs": res["training"], "checkpoints": []}
    run["_dir"] = str(res.get("_dir") or folder)
    return run


def load_run(path: str | Path) -> dict[str, Any]:
    """One run folder (or its ``results.json``) in the in-memory form described in the module docstring."""
    p = Path(path)
    folder = p.parent if p.is_file() else p
    f = folder / RESULTS_FILE if p.is_dir() else p
    if f.is_file():
        run = _normalise(_read_json(f), folder)
        if run["kind"] == "eval" and not run["analyses"]:      # analyses written beside the evaluation
            sub_dir = folder / "analysis"
            sub = load_run(sub_dir) if (sub_dir / RESULTS_FILE).is_file() else _analysis_folder(sub_dir)
            if sub is not None:
                run["analyses"] = sub["analyses"]
        if run["train"] is None and run["kind"] == "eval":     # the model's training run beside the evaluation
            sub_dir = folder / "train"
            sub = load_run(sub_dir) if (sub_dir / RESULTS_FILE).is_file() else None
            run["train"] = sub["train"] if sub is not None else _train_payload(folder)
        elif run["train"] is None:
            run["train"] = _train_payload(folder)
        return run
    if p.is_dir():
        analysis = _analysis_folder(folder)
        if analysis is not None:
            return analysis
        train = _train_payload(folder)
        if train is not None:
            run = _empty("train", folder)
            run["train"] = train
            run["model"] = {"name": str(train["config"].get("model") or folder.name)}
            run["data"] = {"spec": train["config"].get("data")}
            return run
    raise RobustvitError(f"{p} holds no results.json; pass folders written by `robustvit eval`, `analyze` or `train`")


def load_runs(paths: list[str | Path]) -> list[dict[str, Any]]:
    """``load_run`` for each path, in order."""
    return [load_run(p) for p in paths]


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
