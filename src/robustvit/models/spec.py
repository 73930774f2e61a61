"""``ModelSpec``: what robustvit knows about a model besides its weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ModelSpec:
    """Metadata of a wrapped model.

    ``input_size`` is (C, H, W); ``mean``/``std`` are the normalisation applied *inside* the wrapper;
    ``crop_pct`` and ``interpolation`` how images are brought to the input (timm's evaluation transform:
    shorter side to size / crop_pct, centre crop);
    ``family`` is e.g. "vit", "resnet", "convnext", "swin", "fan" or "other"; ``patch_size`` is set for
    patch-based models. ``architecture`` and ``kwargs`` rebuild the network (checkpoint ``spec.json``).

    ``adaptations`` is the ordered record of the model surgery done after construction (JSON objects with an
    ``op`` key: ``reset_head``, ``adapt_input`` with the stem's convolution strides, …; see
    :mod:`robustvit.models.finetune`). ``load_checkpoint`` re-applies it to the rebuilt network *before* loading the
    weights, so an adapted model reloads as the same network; a spec.json without it loads as an empty list.
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
        known = {f for f in cls.__dataclass_fields__}
        d = {k: v for k, v in d.items() if k in known}
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
