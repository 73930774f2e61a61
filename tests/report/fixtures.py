"""Hand-made run folders: schema-1 files as robustvit wrote them and schema-2 files (``kind`` + payload)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def eval_result(name: str, clean: float, pgd: dict[float, float], aa: float | None = None, corr: float | None = None,
                params: int = 1_000_000, schema: int = 1, comparable: bool = True, **extra: Any) -> dict[str, Any]:
    suites: dict[str, Any] = {"clean": {"top1": clean, "top5": min(1.0, clean + 0.1), "num_images": 100}}
    for eps, acc in pgd.items():
        suites[f"pgd:eps={round(eps * 255)}/255"] = {"attack": "pgd", "eps": eps, "norm": "linf", "steps": 10,
                                                      "accuracy": acc, "clean_accuracy": clean, "flags": {}}
    if aa is not None:
        suites["autoattack"] = {"attack": "autoattack", "eps": 4 / 255, "norm": "linf", "accuracy": aa,
                                "clean_accuracy": clean, "per_attack": {"apgd-ce": aa + 0.05, "apgd-t": aa}}
    if corr is not None:
        suites["corruptions"] = {"corruption_accuracy": {"fog": corr - 0.1, "snow": corr + 0.1}, "clean_accuracy": clean,
                                 "severity_accuracy": {"1": corr + 0.05, "3": corr - 0.05}, "mean_accuracy": corr,
                                 "mce": 55.5, "severities": [1, 3], "num_images": 100}
    suites.update(extra.pop("suites", {}))
    res = {"schema": schema, "run": {"device": "cpu", "seed": 0, "finished": extra.pop("finished", "2026-01-01T00:00:00")},
           "model": {"name": name, "params": params, "spec": {"family": "vit", "input_size": [3, 32, 32]},
                     "weights": {"source": "checkpoint:x", "sha256": name}},
           "data": {"spec": "cifar10:test", "num_images": 100, "subset": None if comparable else
                    {"method": "stratified", "seed": 0, "num_images": 100, "num_classes": 10, "of": 10000}},
           "comparable": comparable,
           "notes": [] if comparable else ["100 of 10000 images (a class-stratified sample)"], "suites": suites}
    if schema == 2:
        res["kind"] = "eval"
    res.update(extra)
    return res


def write_run(folder: Path, result: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(result))
    return folder
