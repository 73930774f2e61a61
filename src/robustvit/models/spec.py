"""``ModelSpec``: what robustvit knows about a model besides its weights."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from robustvit.errors import RobustvitError

#: Constructor keywords a checkpoint's spec may not pass to the architecture: they would make the rebuild load
#: files or download weights named by the checkpoint (only its own model.safetensors is ever read).
FORBIDDEN_KWARGS = frozenset({"pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path",
                              "cache_dir", "pretrained_strict", "features_only"})
#: The largest integer constructor keyword a checkpoint may give (depth, width, classes, image size, …): a larger
#: one would build a network no file of weights fits, after minutes and gigabytes.
MAX_INT_KWARG = 100_000


@dataclass
class ModelSpec:
    """Metadata of a wrapped model.

    ``input_size`` is (C, H, W); ``mean``/``std`` the normalisation applied *inside* the wrapper; ``crop_pct`` and
    ``interpolation`` timm's evaluation transform (shorter side to size / crop_pct, centre crop); ``family`` e.g.
    "vit", "resnet", "fan" or "other"; ``patch_size`` set for patch-based models. ``architecture`` and ``kwargs``
    rebuild the network. ``adaptations``: the ordered record of the surgery done after construction (objects with an
    ``op``: ``reset_head``, ``adapt_input``, …; :mod:`robustvit.models.finetune`), re-applied by ``load_checkpoint``
    before the weights load; a spec.json without it loads as an empty list.
    """

    architecture: str
    num_classes: int
    input_size: tuple[int, int, int] = (3, 224, 224)
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    family: str = "other"
    patch_size: int | None = None
    crop_pct: float = 0.875
    interpolation: str = "bilinear"
    kwargs: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] | None = None
    adaptations: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input_size"] = list(self.input_size)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelSpec":
        """The spec of a ``spec.json``, type-checked by :func:`check_spec_fields`; unknown keys are ignored."""
        if not isinstance(d, dict):
            raise RobustvitError(f"the model spec must be a JSON object, got {type(d).__name__}")
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        check_spec_fields(d)
        for k in ("input_size", "mean", "std"):
            if k in d:
                d[k] = tuple(d[k])
        d["adaptations"] = [dict(a) for a in d.get("adaptations") or []]
        return cls(**d)

    @property
    def image_size(self) -> int:
        return int(self.input_size[-1])

    def preprocessing(self) -> dict[str, Any]:
        """What ``results.json`` records as ``model.preprocessing``."""
        return {"input_size": list(self.input_size), "crop_pct": self.crop_pct, "interpolation": self.interpolation,
                "mean": list(self.mean), "std": list(self.std)}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def check_spec_fields(d: dict[str, Any]) -> None:
    """Refuse (one line) fields of the wrong type or range; see :data:`FORBIDDEN_KWARGS`, :data:`MAX_INT_KWARG`."""
    def bad(field_: str, want: str) -> RobustvitError:
        return RobustvitError(f"spec field {field_!r} must be {want}, got {json_short(d.get(field_))}")

    if "architecture" not in d or "num_classes" not in d:
        raise RobustvitError("the model spec needs 'architecture' and 'num_classes'")
    if not isinstance(d["architecture"], str) or not d["architecture"].strip():
        raise bad("architecture", "a model name (a string)")
    if not _is_int(d["num_classes"]) or not 1 <= d["num_classes"] <= MAX_INT_KWARG:
        raise bad("num_classes", f"an integer in 1-{MAX_INT_KWARG}")
    if "input_size" in d and not (isinstance(d["input_size"], (list, tuple)) and len(d["input_size"]) == 3
                                  and all(_is_int(v) and 1 <= v <= MAX_INT_KWARG for v in d["input_size"])):
        raise bad("input_size", "three positive integers [C, H, W]")
    for k in ("mean", "std"):
        if k in d and not (isinstance(d[k], (list, tuple)) and len(d[k]) == 3 and all(_is_num(v) for v in d[k])):
            raise bad(k, "three finite numbers")
    if "std" in d and any(v <= 0 for v in d["std"]):
        raise bad("std", "three positive numbers")
    if "crop_pct" in d and not (_is_num(d["crop_pct"]) and 0 < d["crop_pct"] <= 1):
        raise bad("crop_pct", "a number in (0, 1]")
    for k in ("family", "interpolation"):
        if k in d and not isinstance(d[k], str):
            raise bad(k, "a string")
    if d.get("patch_size") is not None and not (_is_int(d["patch_size"]) and 1 <= d["patch_size"] <= MAX_INT_KWARG):
        raise bad("patch_size", "a positive integer or null")
    if d.get("class_names") is not None and not (isinstance(d["class_names"], list)
                                                 and all(isinstance(c, str) for c in d["class_names"])):
        raise bad("class_names", "a list of strings or null")
    if d.get("adaptations") is not None and not (isinstance(d["adaptations"], list) and all(
            isinstance(a, dict) and isinstance(a.get("op"), str) for a in d["adaptations"])):
        raise bad("adaptations", "a list of objects with an 'op'")
    kwargs = d.get("kwargs", {})
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise bad("kwargs", "an object of constructor keywords")
    forbidden = sorted(FORBIDDEN_KWARGS & set(kwargs))
    if forbidden:
        raise RobustvitError(f"the model spec's kwargs may not set {', '.join(forbidden)} (a checkpoint loads only "
                             "its own model.safetensors); remove them from spec.json")
    for k, v in kwargs.items():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if _is_int(x) and abs(x) > MAX_INT_KWARG or isinstance(x, float) and not math.isfinite(x):
                raise RobustvitError(f"the model spec's kwargs {k}={json_short(v)} is out of range (integers up to "
                                     f"{MAX_INT_KWARG}, finite numbers); fix spec.json")


def json_short(v: Any) -> str:
    """``v`` as at most 60 characters of JSON (for messages)."""
    import json

    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
