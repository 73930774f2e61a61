"""Data sets from spec strings: ``create_dataset("synthshapes:test")``, ``"folder:/path"``, ``"npz:/x.npz"``,
``"cifar10:test"``, ``"imagenet:/val"``; options follow as ``,key=value`` (e.g. ``synthshapes:train,size=64``).

Every data set yields float images (3, H, W) in [0, 1] and integer labels; see ``robustvit.data.base``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from robustvit.data import sources
from robustvit.data.base import UNREADABLE, FileImageDataset, ImageDataset, TensorImageDataset
from robustvit.errors import RobustvitError
from robustvit.registry import Registry

SourceFn = Callable[[str, dict[str, Any], "int | None", bool], ImageDataset]
#: Data sources: ``fn(arg, options, image_size, strict) -> ImageDataset`` registered under ``name:``.
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


def create_dataset(spec: str, *, image_size: int | None = None, strict: bool = False) -> ImageDataset:
    """Build a data set from a spec string. ``image_size`` resizes file-based images (the model's input
    size); ``strict`` makes unreadable image files fatal instead of counted and skipped."""
    source, arg, options = parse_data_spec(spec)
    return SOURCES.get(source)(arg, options, image_size, strict)


__all__ = ["UNREADABLE", "FileImageDataset", "ImageDataset", "TensorImageDataset", "create_dataset",
           "list_sources", "parse_data_spec", "register_source"]
