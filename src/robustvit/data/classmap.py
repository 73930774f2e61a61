"""Matching a model's classes to a data set's: the class-count check ``eval`` and ``analyze`` share, and
class-map files (``--class-map FILE``) that score a model with more classes (e.g. a 1000-class ImageNet
model) on a data set with fewer. Shipped maps are found by name when no such file exists:
``cifar_to_imagenet.json`` (CIFAR-10's classes → the ImageNet-1k classes of each: airplane → airliner, warplane;
…; deer, which ImageNet lacks, → hartebeest, impala, gazelle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError


#: The folder of the class maps shipped with robustvit.
SHIPPED = Path(__file__).parent / "classlists"


def shipped_class_maps() -> list[str]:
    """The class maps shipped with robustvit (file names for ``--class-map``)."""
    return sorted(p.name for p in SHIPPED.glob("*_to_*.json"))


def class_map_path(path: str | Path) -> Path:
    """``path`` when it exists, else the shipped map of that name (with or without ``.json``), else ``path``."""
    p = Path(path)
    if p.exists():
        return p
    name = p.name if p.suffix == ".json" else f"{p.name}.json"
    return SHIPPED / name if p.parent == Path(".") and name in shipped_class_maps() else p


def load_class_map(path: str | Path, classes: list[str]) -> list[list[int]]:
    """A class map file (or a shipped one by name, :func:`class_map_path`) → for each data class (in order), its
    model class indices. JSON: a list with one entry per data class, or an object keyed by data class name; an
    entry is an index or a list of indices (the data class then scores as the best of them)."""
    path = class_map_path(path)
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RobustvitError(f"cannot read the class map {path} ({type(e).__name__}); "
                             "give a JSON list or object") from None
    if isinstance(raw, dict):
        missing = [c for c in classes if c not in raw]
        if missing:
            raise RobustvitError(f"class map {path} has no entry for data class {missing[0]!r} "
                                 f"({len(missing)} missing)")
        raw = [raw[c] for c in classes]
    if not isinstance(raw, list) or len(raw) != len(classes):
        raise RobustvitError(f"class map {path} must have one entry per data class ({len(classes)})")
    groups = [[v] if isinstance(v, int) else v for v in raw]
    if not all(isinstance(g, list) and g and all(isinstance(c, int) for c in g) for g in groups):
        raise RobustvitError(f"class map {path}: each entry must be a model class index or a list of them")
    return groups


def match_classes(model: Any, dataset: Any, class_map: str | Path | None, *, model_name: str, data_spec: str,
                  command: str = "evaluate") -> None:
    """Check the model's class count against the data's; with ``class_map``, map the model's classes onto the
    data's (``model.map_classes``, see :func:`load_class_map`). A mismatch without a map is an error."""
    have, want = model.spec.num_classes, dataset.num_classes
    if class_map is not None:
        model.map_classes(load_class_map(class_map, list(dataset.classes)), list(dataset.classes))
    elif have != want:
        raise RobustvitError(
            f"model {model_name} has {have} classes but {data_spec} has {want}; give --class-map FILE (JSON: for each "
            f"data class, the model class index or indices) or {command} a model trained on these classes "
            f"(robustvit finetune --model {model_name} --data ...)")


__all__ = ["class_map_path", "load_class_map", "match_classes", "shipped_class_maps"]
