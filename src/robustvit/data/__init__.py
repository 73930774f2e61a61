"""Data sets from spec strings: ``create_dataset("synthshapes:test")``, ``"folder:/path"``, ``"npz:/x.npz"``,
``"cifar10:test"``, ``"imagenet:/val"``; options follow as ``,key=value`` (e.g. ``synthshapes:train,size=64``).

Every data set yields float images (3, H, W) in [0, 1] and integer labels; see ``robustvit.data.base``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from robustvit.data import sources
from robustvit.data.base import UNREADABLE, FileImageDataset, ImageDataset, Resize, ResizedDataset, TensorImageDataset
from robustvit.data.classmap import load_class_map
from robustvit.data.subset import SUBSET_METHODS, SubsetDataset, select_subset
from robustvit.errors import RobustvitError
from robustvit.registry import Registry

SourceFn = Callable[[str, dict[str, Any], "Resize | None", bool], ImageDataset]
#: Data sources: ``fn(arg, options, resize, strict) -> ImageDataset`` registered under ``name:``; ``resize``
#: (None: images as stored) is the model's preprocessing, applied to file images as they are read.
SOURCES: Registry[SourceFn] = Registry("data source", hint="write SOURCE:ARG, e.g. synthshapes:test")
register_source = SOURCES.register


for _name in ("synthshapes", "folder", "npz", "cifar10", "cifar100", "imagenet"):
    register_source(_name)(getattr(sources, _name))

from robustvit.data import shift as _shift  # noqa: E402  (ImageNet-R/-A/-Sketch/-V2)

for _name in _shift.SHIFT_SETS:
    register_source(_name)(getattr(_shift, _name))

from robustvit.data import corrupted as _corrupted  # noqa: E402  (ImageNet-C / CIFAR-10-C units)

for _name in ("imagenet_c", "cifar_c"):
    register_source(_name)(getattr(_corrupted, _name))

from robustvit.data import dense as _dense  # noqa: E402  (segmentation / detection layouts)

for _name in ("cityscapes", "ade20k", "coco"):
    register_source(_name)(getattr(_dense, _name))


def list_sources(pattern: str | None = None) -> list[str]:
    return SOURCES.list(pattern)


def parse_data_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"synthshapes:train,size=64"`` → ``("synthshapes", "train", {"size": "64"})``.

    Trailing comma-separated ``key=value`` items are options; the rest (which may contain commas or
    colons, e.g. a path) is the argument.
    """
    if ":" not in spec:
        raise RobustvitError(f"data spec {spec!r} must look like SOURCE:ARG (sources: {', '.join(list_sources())}), "
                             "e.g. synthshapes:test or folder:/path/to/images")
    source, rest = spec.split(":", 1)
    parts = rest.split(",")
    options: dict[str, str] = {}
    while len(parts) > 1 and "=" in parts[-1] and "/" not in parts[-1].split("=", 1)[0]:
        k, v = parts.pop().split("=", 1)
        options[k.strip()] = v.strip()
    return source.strip(), ",".join(parts), dict(reversed(list(options.items())))


def create_dataset(spec: str, *, image_size: int | Resize | None = None, strict: bool = False) -> ImageDataset:
    """Build a data set from a spec string. ``image_size``: the model's input size or its whole
    preprocessing (a :class:`Resize`), applied to file images as they are read; ``strict`` makes
    unreadable image files fatal instead of counted and skipped."""
    source, arg, options = parse_data_spec(spec)
    resize = Resize(image_size) if isinstance(image_size, int) else image_size
    return SOURCES.get(source)(arg, options, resize, strict)


def model_resize(model_spec: Any) -> Resize:
    """A model's preprocessing (its ``ModelSpec``: input size, crop_pct, interpolation) as a :class:`Resize`."""
    return Resize(int(model_spec.image_size), float(model_spec.crop_pct), str(model_spec.interpolation))


def dataset_for_model(spec: str, model_spec: Any, *, strict: bool = False) -> ImageDataset:
    """The data set ``spec`` as the model sees it: file images read with the model's own preprocessing
    (timm's evaluation transform), in-memory images of another size resized whole to its input."""
    resize = model_resize(model_spec)
    ds = create_dataset(spec, image_size=resize, strict=strict)
    if len(ds) and tuple(ds.get_batch(torch.tensor([0]))[0].shape[-2:]) != (resize.size, resize.size):
        ds = ResizedDataset(ds, resize)
    return ds


__all__ = ["UNREADABLE", "FileImageDataset", "ImageDataset", "Resize", "ResizedDataset", "SUBSET_METHODS",
           "SubsetDataset", "TensorImageDataset", "create_dataset", "dataset_for_model", "load_class_map",
           "model_resize", "select_subset",
           "list_sources", "parse_data_spec", "register_source"]
