"""``run_analyses``: run registered analyses on one model and data set, write ``DIR/<analysis>.json``, its
PNG plots and the folder's manifest ``DIR/analyses.json`` (model, data, run, the analyses done); resumable
through the unit store ``DIR/analysis_units.sqlite``.

``limit`` draws the images as ``robustvit eval`` does (``robustvit.data.subset``): a seeded class-stratified
sample by default (``subset_method="first"``: the first N), or the images a ``subset`` file lists; the analyses
then see that sample, ranked so that any prefix of it is stratified too. A model whose class count differs from
the data's needs a ``class_map`` (``robustvit.data.classmap``), as in ``eval``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import robustvit
from robustvit.analysis.base import PAPER_IMAGES, make_context
from robustvit.analysis.store import UnitStore
from robustvit.data.classmap import match_classes
from robustvit.data.subset import Subset, SubsetDataset, make_subset
from robustvit.errors import RobustvitError
from robustvit.registry import parse_spec

MANIFEST = "analyses.json"


def parse_analysis_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"lesion:samples=10"`` → ``("lesion", {"samples": "10"})``."""
    return parse_spec(spec, "analysis")


def _jsonable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def run_analyses(model: nn.Module, dataset: Any, names: list[str] | str, out_dir: str | Path | None, *,
                 limit: int | None = None, seed: int = 0, batch_size: int = 64, device: str | torch.device = "auto",
                 progress: bool = False, model_name: str | None = None, data_spec: str | None = None,
                 source: str | None = None, command: str | None = None, subset_method: str = "stratified",
                 subset: str | Path | None = None, subset_seed: int | None = None,
                 class_map: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Run analyses (``"name[:key=value…]"`` specs, a list or a comma-separated string) on ``model``
    (a robustvit ``Normalized`` model) over ``dataset``; returns {name: result}. With ``out_dir``, writes
    ``out_dir/<name>.json`` + PNGs + ``analyses.json`` and resumes from ``analysis_units.sqlite``.
    ``limit`` / ``subset_method`` / ``subset`` (a file of indices or relative paths) / ``subset_seed`` (default
    ``seed``) choose the images; ``class_map`` maps a model's classes onto the data's."""
    from robustvit.analysis import check_family, family_of, get_analysis
    from robustvit.models.factory import RANDOM_LABEL, is_comparable

    specs = [s for s in (names.split(",") if isinstance(names, str) else names) if s.strip()]
    if not specs:
        raise RobustvitError("give at least one analysis (see `robustvit list analyses`)")
    parsed = [parse_analysis_spec(s) for s in specs]
    if len({n for n, _ in parsed}) != len(parsed):
        raise RobustvitError("an analysis is listed twice")
    spec = getattr(model, "spec", None)
    model_name = model_name or (spec.architecture if spec is not None else type(model).__name__)
    data_spec = data_spec or getattr(dataset, "spec", "") or ""
    family = family_of(model)
    todo = []
    for name, raw in parsed:
        a = get_analysis(name)
        check_family(name, family, model_name)
        todo.append((a, a.parse_options(raw)))
    if spec is not None and dataset is not None and hasattr(dataset, "num_classes"):
        match_classes(model, dataset, class_map, model_name=model_name, data_spec=data_spec, command="analyze")
    if limit is not None and limit < 1:
        raise RobustvitError(f"--limit must be >= 1, got {limit}")
    images: Subset | None = None
    if dataset is not None:
        images = make_subset(dataset, limit=limit, method=subset_method, file=subset,
                             seed=seed if subset_seed is None else subset_seed)
    view = dataset          # the run's images ranked: a prefix of them (an analysis's ``images=k``) is stratified too
    if images is not None and not images.whole:
        view = SubsetDataset(dataset, images.indices if images.method == "first" else images.ranking())
    out = Path(out_dir) if out_dir is not None else None
    store = UnitStore(out) if out is not None else None
    ctx = make_context(model, view, batch_size=batch_size, seed=seed, device=device, store=store, progress=progress)
    subset_record = images.record() if images is not None else None
    subset_note = images.note() if images is not None else None
    results: dict[str, dict[str, Any]] = {}
    try:
        for a, opts in todo:
            ctx.name = a.name
            fp = {"model": model_name, "source": source or model_name, "data": data_spec, "limit": limit, "seed": seed,
                  "batch_size": batch_size, "options": {k: str(v) for k, v in sorted(opts.items())}}
            if images is not None and not images.whole:
                fp["subset"] = images.fingerprint()
            if class_map is not None:
                fp["class_map"] = str(class_map)
            ctx.store.check_fingerprint(a.name, fp)
            t0, before = time.time(), ctx.store.seconds(a.name)
            res = a.compute(ctx, **opts)
            n = ctx.num_images if a.needs_data else 0
            notes = list(res.pop("notes", []))
            paper = PAPER_IMAGES.get(a.name)
            if paper and n < paper:
                notes.append(f"{n} images (the paper used {paper})")
            if a.needs_data and subset_note:
                notes.append(subset_note)
            if not is_comparable(model):
                notes.append(RANDOM_LABEL["note"])
            head = {"analysis": a.name, "model": model_name, "family": family, "data": data_spec,
                    "num_images": res.pop("num_images", n), "subset": subset_record if a.needs_data else None,
                    "seed": seed, "batch_size": batch_size, "options": opts,
                    "comparable": not notes, "notes": notes,
                    "seconds": round(before + time.time() - t0, 3)}
            res = {**head, **res}
            if out is not None:
                tmp = out / f"{a.name}.json.tmp"
                tmp.write_text(json.dumps(_jsonable(res), indent=1))
                res["figures"] = a.plot(res, out)
                data = _jsonable(res)
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(out / f"{a.name}.json")
            results[a.name] = res
        if out is not None:
            _write_manifest(out, model, model_name, source, data_spec, dataset, ctx, results, command,
                            limit=limit, subset=subset_record, class_map=class_map)
    finally:
        ctx.store.close()
    return results


def _write_manifest(out: Path, model: nn.Module, name: str, source: str | None, data_spec: str, dataset: Any,
                    ctx: Any, results: dict[str, Any], command: str | None, *, limit: int | None = None,
                    subset: dict[str, Any] | None = None, class_map: str | Path | None = None) -> None:
    path = out / MANIFEST
    old = json.loads(path.read_text()) if path.is_file() else {}
    spec = getattr(model, "spec", None)
    man = {
        "schema": 1, "kind": "analysis",
        "run": {"robustvit": robustvit.__version__, "torch": torch.__version__, "device": str(ctx.device),
                "seed": ctx.seed, "batch_size": ctx.batch_size, "limit": limit,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command or " ".join(sys.argv)},
        "model": {"name": name, "source": source or name, "params": sum(p.numel() for p in model.parameters()),
                  "spec": spec.to_dict() if spec is not None else {"family": "other", "input_size": [3, 0, 0]},
                  "class_map": None if class_map is None else str(class_map)},
        "data": {"spec": data_spec, "num_images": ctx.num_images,
                 "num_classes": getattr(dataset, "num_classes", None), "subset": subset},
        "analyses": sorted(set(old.get("analyses", [])) | set(results)),
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(man, indent=1))
    tmp.replace(path)


def load_analysis_folder(folder: str | Path) -> dict[str, Any] | None:
    """A results-like dict (``model``, ``data``, ``run``, ``suites: {"analysis": {name: result}}``) for a
    folder written by ``run_analyses``; None when the folder holds no ``analyses.json``."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        man = json.loads(path.read_text())
        analyses = {n: json.loads((folder / f"{n}.json").read_text()) for n in man["analyses"]
                    if (folder / f"{n}.json").is_file()}
    except (json.JSONDecodeError, KeyError) as e:
        raise RobustvitError(f"{path} is not a valid analysis manifest ({e})") from None
    return {"schema": 1, "run": man["run"], "model": man["model"], "data": man["data"],
            "suites": {"analysis": {"dir": str(folder), "results": analyses}}, "_dir": str(folder)}


def attach_analyses(result: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Add the analyses written to ``folder`` to an evaluation results dict (``suites["analysis"]``), so the
    report's "Inside the models" section shows them; unchanged when the folder holds none."""
    loaded = load_analysis_folder(folder)
    if loaded is not None:
        result.setdefault("suites", {})["analysis"] = loaded["suites"]["analysis"]
    return result
