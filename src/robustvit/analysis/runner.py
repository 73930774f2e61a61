"""``run_analyses``: run registered analyses on one model and data set, write ``DIR/results.json`` (schema 2,
kind ``analysis``: run, model, data and ``analyses``; the analyses an earlier run wrote there are kept), and
beside it ``DIR/<analysis>.json`` and its PNG plots; resumable through the run engine's unit store
``DIR/units.sqlite``, on the run skeleton ``robustvit eval`` uses too (:class:`robustvit.runs.folder.RunFolder`).

``limit`` draws the images as ``robustvit eval`` does (``robustvit.data.subset``): a seeded class-stratified
sample by default (``subset_method="first"``: the first N), or the images a ``subset`` file lists; the analyses
then see that sample, ranked so that any prefix of it is stratified too. A model whose class count differs from
the data's needs a ``class_map`` (``robustvit.data.classmap``), as in ``eval``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustvit.analysis.base import make_context
from robustvit.data.classmap import match_classes
from robustvit.data.subset import Subset, SubsetDataset, make_subset
from robustvit.errors import RobustvitError
from robustvit.models.wrapper import check_precision, inference_settings
from robustvit.protocols import analysis_protocol
from robustvit.registry import parse_spec
from robustvit.runs import RunFolder, weights_id, write_json


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
                 class_map: str | Path | None = None, precision: str = "fp32") -> dict[str, dict[str, Any]]:
    """Run analyses (``"name[:key=value…]"`` specs, a list or a comma-separated string) on ``model``
    (a robustvit ``Normalized`` model) over ``dataset``; returns {name: result}. With ``out_dir``, writes
    ``out_dir/results.json`` (kind analysis), ``out_dir/<name>.json`` + PNGs and resumes
    from ``units.sqlite``.
    ``limit`` / ``subset_method`` / ``subset`` (a file of indices or relative paths) / ``subset_seed`` (default
    ``seed``) choose the images; ``class_map`` maps a model's classes onto the data's. ``precision`` (fp32, tf32,
    bf16; ``auto``: fp32) is how the model's own forward computes; the probe's self-check stays float32."""
    precision = check_precision("fp32" if precision == "auto" else precision)
    from robustvit.analysis.base import check_family, family_of, get_analysis
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
    folder = RunFolder(out_dir, "analysis")
    out = folder.out
    ctx = make_context(model, view, batch_size=batch_size, seed=seed, device=device, store=folder.store,
                       progress=progress)
    subset_record = images.record() if images is not None else None
    results: dict[str, dict[str, Any]] = {}
    weights = weights_id(model, source) if out is not None else None
    with folder.store:
        for a, opts in todo:
            ctx.name = a.name
            fp = {"model": model_name, "source": source or model_name, "weights": weights,
                  "data": data_spec, "limit": limit, "seed": seed,
                  "batch_size": batch_size, "options": {k: str(v) for k, v in sorted(opts.items())}}
            if precision != "fp32":
                fp["precision"] = precision
            if images is not None and not images.whole:
                fp["subset"] = images.fingerprint()
            if class_map is not None:
                fp["class_map"] = str(class_map)
            folder.store.check_fingerprint(fp, scope=a.name)
            t0, before = time.time(), ctx.store.seconds(a.name)
            with inference_settings(model, precision=precision):
                res = a.compute(ctx, **opts)
            n = ctx.num_images if a.needs_data else 0
            head = {"analysis": a.name, "model": model_name, "family": family, "data": data_spec,
                    "num_images": res.pop("num_images", n), "paper_images": a.paper_images,
                    "subset": subset_record if a.needs_data else None, "seed": seed, "batch_size": batch_size,
                    "precision": precision, "options": opts, "notes": list(res.pop("notes", [])),
                    "seconds": round(before + time.time() - t0, 3)}
            res = {**head, **res}
            facts = {"model": {"weights": getattr(model, "weights", None)}, "data": {"subset": head["subset"]}}
            res["protocol"] = analysis_protocol(a.name, res, facts)      # comparability: robustvit.protocols
            if out is not None:
                res["figures"] = a.plot(res, out)
                write_json(out / f"{a.name}.json", _jsonable(res), indent=1)
            results[a.name] = res
        analyses = {k: _jsonable(r) for k, r in results.items()}
        figures = [f for r in analyses.values() for f in r.get("figures") or []]
        data = {"spec": data_spec, "num_images": ctx.num_images, "num_classes": getattr(dataset, "num_classes", None),
                "subset": subset_record}
        folder.write(folder.document(model, model_name, source, device=ctx.device, seed=seed, command=command,
                                     data=data, payload={**analyses, "figures": figures}, class_map=class_map,
                                     resize=getattr(dataset, "resize", None), batch_size=batch_size, limit=limit,
                                     precision=precision))
    return results

