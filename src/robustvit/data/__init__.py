"""Data sets from spec strings: ``create_dataset("synthshapes:test")``, ``"folder:/path"``, ``"npz:/x.npz"``,
``"cifar10:test"``, ``"imagenet:/val"``, options as ``:key=value`` (or ``,key=value``), e.g.
``synthshapes:train:size=64:count=100``. The grammar and :class:`DataSource` are in :mod:`robustvit.data.sources`;
``list_sources()`` names every source (``SOURCES`` imports every module of this package before its first lookup,
so a ``@register_source`` here needs no list to edit). Images are float (3, H, W) in [0, 1] (``data.base``).
"""

from __future__ import annotations

from typing import Any

import torch

from robustvit.data.base import UNREADABLE, FileImageDataset, ImageDataset, Resize, ResizedDataset, TensorImageDataset
from robustvit.data.classmap import load_class_map
from robustvit.data.sources import SOURCES, DataSource, SourceFn, parse_data_spec, register_source  # noqa: F401
from robustvit.data.subset import SUBSET_METHODS, SubsetDataset, select_subset


def list_sources(pattern: str | None = None) -> list[str]:
    """Registered data source names, optionally filtered by a shell-style pattern (``"imagenet*"``)."""
    return SOURCES.list(pattern)


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
           "model_resize", "select_subset", "DataSource", "SOURCES",
           "list_sources", "parse_data_spec", "register_source"]
