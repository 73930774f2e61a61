"""Readers for the released common-corruption data sets: ImageNet-C and ImageNet-3DCC (folder trees) and
CIFAR-10-C / CIFAR-100-C (.npy).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261); Kar et al., "3D Common Corruptions and Data Augmentation", CVPR 2022
(arXiv:2203.01441). Layouts:

* **ImageNet-C**: ``ROOT/<corruption>/<severity 1-5>/<wnid>/<file>.JPEG`` (224 × 224 JPEG-85 files, 50,000 per
  unit). Labels: the lines of ``ROOT/classes.txt`` (written by ``robustvit corrupt``) when it exists; else, when
  every class folder is a wnid, its index among the 1000 sorted wnids; else the sorted folder names.
* **ImageNet-3DCC** (EPFL-VILAB/3DCommonCorruptions' ``tools/download_imagenet_3dcc.sh``, RobustBench's
  ``load_imagenet3dcc``): the same tree with the 12 corruptions of :data:`CORRUPTIONS_3DCC`.
* **CIFAR-10-C / CIFAR-100-C**: ``ROOT/<corruption>.npy`` uint8 (5·N, 32, 32, 3), rows N·(s−1) … N·s−1 severity
  s, and ``ROOT/labels.npy`` (5·N,) or (N,); optional ``ROOT/classes.txt``.

Every unit (one corruption at one severity) is an :class:`~robustvit.data.base.ImageDataset` of images in the same
order (that of ``imagenet:/path/to/val`` or ``cifar10:test``). Data specs: ``imagenet_c:ROOT,corruption=fog,severity=3``
(a 3DCC tree too: ``corruption=fog_3d``) and ``cifar_c:ROOT,corruption=fog,severity=3``.

>>> src = open_corrupted("/data/CIFAR-10-C")                      # doctest: +SKIP
>>> x, y = src.unit("fog", 3).get_batch(torch.arange(8))          # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustvit.corruptions.params import CORRUPTION_GROUPS
from robustvit.data.base import BatchedImageDataset, FileImageDataset, ImageDataset, Resize
from robustvit.data.shift import imagenet_wnids
from robustvit.data.sources import register_source
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.protocols import CORRUPTIONS_3DCC

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".tif", ".tiff", ".webp")
#: The layouts ``robustvit corrupt`` writes; ``imagenet-3dcc`` is read only (:data:`READ_LAYOUTS`).
LAYOUTS = ("imagenet-c", "cifar-c")
READ_LAYOUTS = (*LAYOUTS, "imagenet-3dcc")
CLASSES_FILE = "classes.txt"
SEVERITIES = (1, 2, 3, 4, 5)


def _all_corruptions() -> list[str]:
    """The corruption folders a tree may hold: ImageNet-C's 19 and ImageNet-C̄'s 10 (the same layout)."""
    return list(CORRUPTION_GROUPS["all"] + CORRUPTION_GROUPS["imagenet_c_bar"])


def read_classes_file(root: Path) -> list[str] | None:
    """``ROOT/classes.txt`` (one class name a line, in label order), or None."""
    f = Path(root) / CLASSES_FILE
    return [line.strip() for line in f.read_text().splitlines() if line.strip()] if f.is_file() else None


def detect_layout(root: str | Path) -> str:
    """``"imagenet-c"``, ``"imagenet-3dcc"`` or ``"cifar-c"`` from what ROOT holds; a one-line error otherwise."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise RobustvitError(f"corruption data folder {root} does not exist; give the root of an ImageNet-C tree "
                             "(ROOT/<corruption>/<severity>/<class>/) or a CIFAR-10-C folder (ROOT/<corruption>.npy)")
    names = set(_all_corruptions())
    if (root / "labels.npy").is_file() or any((root / f"{n}.npy").is_file() for n in names):
        return "cifar-c"
    c2d, c3d = any((root / n).is_dir() for n in names), any((root / n).is_dir() for n in CORRUPTIONS_3DCC)
    if c2d and c3d:
        raise RobustvitError(f"{root} holds both ImageNet-C and ImageNet-3DCC corruption folders; give each tree "
                             "its own folder (e.g. ImageNet-C/ and ImageNet-3DCC/)")
    if c2d or c3d:
        return "imagenet-3dcc" if c3d else "imagenet-c"
    raise RobustvitError(f"{root} holds neither ImageNet-C / ImageNet-3DCC folders (<corruption>/<severity>/<class>/) "
                         f"nor CIFAR-C files (<corruption>.npy + labels.npy); corruptions are "
                         f"{', '.join(sorted(names))}; ImageNet-3DCC's are {', '.join(CORRUPTIONS_3DCC)}")


class NpyImageDataset(BatchedImageDataset):
    """Rows ``start … start+n−1`` of a memory-mapped uint8 (M, H, W, 3) array, with labels."""

    def __init__(self, array: np.ndarray, start: int, n: int, labels: torch.Tensor, classes: list[str],
                 spec: str = "") -> None:
        self.array, self.start, self.n = array, int(start), int(n)
        self.labels, self.classes, self.spec = labels.long(), list(classes), spec

    def __len__(self) -> int:
        return self.n

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images (n, 3, H, W) as stored, and labels."""
        idx = torch.as_tensor(index).long().reshape(-1)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            raise RobustvitError(f"index out of range for {self.n} images of {self.spec}")
        rows = np.ascontiguousarray(self.array[idx.numpy() + self.start])
        return torch.from_numpy(rows).permute(0, 3, 1, 2), self.labels[idx]


class CorruptedSource:
    """A released (or ``robustvit corrupt``-written) corruption data set: ``layout``, ``corruptions``,
    ``severities(name)``, ``unit(name, severity)``, ``num_images`` (per unit), ``classes``, ``imagenet_like``."""

    layout: str
    root: Path
    corruptions: list[str]
    classes: list[str]

    def severities(self, name: str) -> list[int]:
        raise NotImplementedError

    def unit(self, name: str, severity: int) -> ImageDataset:
        raise NotImplementedError

    @property
    def num_images(self) -> int:
        """Images per (corruption, severity) unit; checks that every available unit has the same count."""
        counts = {(c, s): len(self.unit(c, s)) for c in self.corruptions for s in self.severities(c)}
        if not counts:
            raise RobustvitError(f"{self.root} has no corruption × severity data")
        values = list(counts.values())
        n = max(set(values), key=lambda v: (values.count(v), v))      # the count most units have
        odd = [(k, v) for k, v in counts.items() if v != n]
        if odd:
            (c, s), v = odd[0]
            raise RobustvitError(f"{self.root}: {c} severity {s} has {v} images but other units have {n}; "
                                 "every corruption × severity must hold the same images (re-export or re-download it)")
        return n

    @property
    def imagenet_like(self) -> bool:
        """True for a 1000-class ImageNet-C or -3DCC tree (the AlexNet normalisation of mCE applies)."""
        return self.layout in ("imagenet-c", "imagenet-3dcc") and len(self.classes) == 1000

    def check(self, name: str, severity: int) -> None:
        if name not in self.corruptions:
            raise RobustvitError(f"{self.root} has no data for corruption {name!r}; it holds "
                                 f"{', '.join(self.corruptions) or 'none'} (choose corruptions=... among them)")
        if severity not in self.severities(name):
            raise RobustvitError(f"{self.root} has no severity {severity} for {name} (found "
                                 f"{', '.join(map(str, self.severities(name)))}); choose severities=... among them")


class ImageNetCSource(CorruptedSource):
    """``ROOT/<corruption>/<severity>/<class>/<image>``; see the module docstring for labels."""

    layout = "imagenet-c"

    def __init__(self, root: str | Path, image_size: int | None = None, strict: bool = False) -> None:
        self.root, self.image_size, self.strict = Path(root).expanduser(), image_size, strict
        self._units: dict[tuple[str, int], FileImageDataset] = {}

    def set_image_size(self, size: int | None) -> None:
        """Resize images to size × size on reading (None: as stored)."""
        if size != self.image_size:
            self.image_size = size
            self._units.clear()

    #: The corruption folders this layout may hold.
    names: tuple[str, ...] = ()

    @cached_property
    def corruptions(self) -> list[str]:  # type: ignore[override]
        return [n for n in self.names or _all_corruptions() if (self.root / n).is_dir()]

    def severities(self, name: str) -> list[int]:
        return [s for s in SEVERITIES if (self.root / name / str(s)).is_dir()]

    @cached_property
    def classes(self) -> list[str]:  # type: ignore[override]
        listed = read_classes_file(self.root)
        if listed is not None:
            return listed
        folders = self._folders(*self._first_unit())
        wnids = imagenet_wnids()
        return list(wnids) if set(folders) <= set(wnids) else folders

    def _first_unit(self) -> tuple[str, int]:
        for c in self.corruptions:
            for s in self.severities(c):
                return c, s
        raise RobustvitError(f"{self.root} has no <corruption>/<severity>/ folders (severity 1-5)")

    def _folders(self, name: str, severity: int) -> list[str]:
        d = self.root / name / str(severity)
        folders = sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not folders:
            raise RobustvitError(f"{d} has no class folders; expected {d}/<class>/<image>")
        return folders

    def unit(self, name: str, severity: int) -> FileImageDataset:
        key = (name, int(severity))
        if key not in self._units:
            self.check(name, int(severity))
            d = self.root / name / str(severity)
            index = {c: i for i, c in enumerate(self.classes)}
            samples: list[tuple[str, int]] = []
            for f in self._folders(name, int(severity)):
                if f not in index:
                    raise RobustvitError(f"class folder {f!r} in {d} is not one of the data set's classes "
                                         f"({CLASSES_FILE} or the ImageNet wnids); is {self.root} the right tree?")
                samples += [(str(p), index[f]) for p in sorted((d / f).iterdir())
                            if p.suffix.lower() in IMG_EXTENSIONS and p.is_file()]
            if not samples:
                raise RobustvitError(f"{d} has no images with extensions {', '.join(IMG_EXTENSIONS)}")
            spec = f"imagenet_c:{self.root},corruption={name},severity={severity}"
            resize = None if self.image_size is None else Resize(self.image_size, 1.0)
            self._units[key] = FileImageDataset(samples, self.classes, spec, resize, self.strict)
        return self._units[key]


class ImageNet3DCCSource(ImageNetCSource):
    """ImageNet-3DCC (Kar et al. 2022): ImageNet-C's tree with the 12 corruptions of :data:`CORRUPTIONS_3DCC`."""

    layout = "imagenet-3dcc"
    names = CORRUPTIONS_3DCC


class CifarCSource(CorruptedSource):
    """``ROOT/<corruption>.npy`` uint8 (5·N, H, W, 3), severity-major, and ``ROOT/labels.npy``."""

    layout = "cifar-c"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()
        self._arrays: dict[str, np.ndarray] = {}

    @cached_property
    def corruptions(self) -> list[str]:  # type: ignore[override]
        return [n for n in _all_corruptions() if (self.root / f"{n}.npy").is_file()]

    def severities(self, name: str) -> list[int]:
        return list(SEVERITIES) if name in self.corruptions else []

    @cached_property
    def labels(self) -> torch.Tensor:
        f = self.root / "labels.npy"
        if not f.is_file():
            raise RobustvitError(f"{f} is missing; a CIFAR-C folder holds labels.npy next to <corruption>.npy")
        try:
            y = np.load(f)
        except (OSError, ValueError) as e:
            raise RobustvitError(f"cannot read {f} as a .npy array ({e}); re-download it") from None
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise RobustvitError(f"{f} must be a 1-D integer array, got {y.dtype} {tuple(y.shape)}")
        return torch.from_numpy(y.astype(np.int64))

    @cached_property
    def classes(self) -> list[str]:  # type: ignore[override]
        listed = read_classes_file(self.root)
        if listed is not None:
            return listed
        k = int(self.labels.max()) + 1 if len(self.labels) else 0
        return [str(i) for i in range(10 if k <= 10 else 100 if k <= 100 else k)]

    def array(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            if name not in self.corruptions:
                self.check(name, 1)
            f = self.root / f"{name}.npy"
            try:
                a = np.load(f, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise RobustvitError(f"cannot read {f} as a .npy array ({e}); re-download or re-export it") from None
            if a.dtype != np.uint8 or a.ndim != 4 or a.shape[-1] != 3:
                raise RobustvitError(f"{f} holds {a.dtype} {tuple(a.shape)}; a CIFAR-C file is uint8 (5·N, H, W, 3)")
            if a.shape[0] % 5:
                raise RobustvitError(f"{f} has {a.shape[0]} rows, not a multiple of 5 "
                                     "(rows N·(s−1)…N·s−1 are severity s)")
            n = a.shape[0] // 5
            if len(self.labels) not in (n, 5 * n):
                raise RobustvitError(f"{self.root / 'labels.npy'} has {len(self.labels)} labels but {f} holds "
                                     f"{5 * n} images (5 × {n}); they must come from the same data set")
            self._arrays[name] = a
        return self._arrays[name]

    def unit(self, name: str, severity: int) -> NpyImageDataset:
        self.check(name, int(severity))
        a = self.array(name)
        n = a.shape[0] // 5
        start = n * (int(severity) - 1)
        y = self.labels[start:start + n] if len(self.labels) == 5 * n else self.labels
        spec = f"cifar_c:{self.root},corruption={name},severity={severity}"
        return NpyImageDataset(a, start, n, y, self.classes, spec)


def open_corrupted(root: str | Path, layout: str | None = None, *, image_size: int | None = None,
                   strict: bool = False) -> CorruptedSource:
    """Open an ImageNet-C / ImageNet-3DCC tree or a CIFAR-C folder (``layout`` detected when None)."""
    layout = layout or detect_layout(root)
    if layout not in READ_LAYOUTS:
        raise RobustvitError(f"unknown corruption layout {layout!r}; use {', '.join(READ_LAYOUTS)}")
    if not Path(root).expanduser().is_dir():
        raise RobustvitError(f"corruption data folder {root} does not exist")
    trees = {"imagenet-c": ImageNetCSource, "imagenet-3dcc": ImageNet3DCCSource}
    src: CorruptedSource = trees[layout](root, image_size, strict) if layout in trees else CifarCSource(root)
    if not src.corruptions:
        raise RobustvitError(f"{root} holds no {layout} data for any corruption")
    return src


def _source(layout: str, arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    name, sev, source = options.pop("corruption", None), options.pop("severity", None), layout.replace("-", "_")
    if options:
        raise RobustvitError(f"data source {source!r} has no option {next(iter(options))!r}; "
                             "it takes corruption=NAME,severity=1-5")
    if name is None or sev is None:
        raise RobustvitError(f"{source}:{arg} needs corruption=NAME,severity=1-5 (e.g. {source}:{arg},corruption=fog,"
                             f"severity=3); to evaluate every unit use the corruptions suite with source={arg}")
    try:
        severity = int(sev)
    except ValueError:
        raise RobustvitError(f"severity must be an integer 1-5, got {sev!r}") from None
    if layout == "imagenet-c" and detect_layout(arg) == "imagenet-3dcc":      # the same tree, 3DCC's names
        layout = "imagenet-3dcc"
    size = None if resize is None else resize.size
    return open_corrupted(arg, layout, image_size=size, strict=strict).unit(name, severity)


@dataclass
class CorruptedOptions:
    corruption: str | None = option(None, help="the corruption of the unit (required)")
    severity: int | None = option(None, min=1, max=5, help="its severity 1-5 (required)")


def _register(name: str, layout: str, doc: str) -> None:
    """Register ``name`` as a data source of :class:`CorruptedOptions`: one unit of a ``layout`` tree."""
    def source(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
        return _source(layout, arg, options, resize, strict)
    source.__doc__ = doc
    register_source(name, source, options=CorruptedOptions)


_register("imagenet_c", "imagenet-c", "``imagenet_c:ROOT,corruption=NAME,severity=S`` — one unit of an ImageNet-C or "
          "ImageNet-3DCC tree.")
_register("cifar_c", "cifar-c", "``cifar_c:ROOT,corruption=NAME,severity=S`` — one severity of a CIFAR-10-C / "
          "CIFAR-100-C file.")


__all__ = ["CLASSES_FILE", "CORRUPTIONS_3DCC", "CifarCSource", "CorruptedSource", "ImageNet3DCCSource",
           "ImageNetCSource", "LAYOUTS", "NpyImageDataset", "READ_LAYOUTS", "detect_layout", "open_corrupted",
           "read_classes_file"]
