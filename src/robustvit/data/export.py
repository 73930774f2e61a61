"""Write a corrupted copy of a data set in the official ImageNet-C or CIFAR-10-C layout (``robustvit corrupt``).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261); layouts and options in docs/corruptions.md ("Writing ImageNet-C / CIFAR-C copies"):
``imagenet-c`` ``OUT/<corruption>/<severity>/<class folder>/<name>.JPEG``, each image truncated to uint8
(``np.uint8(255·x)``, as the reference) and saved at JPEG quality 85 like the release (or PNG); ``cifar-c``
``OUT/<corruption>.npy`` uint8 (5·N, H, W, 3), severity-major, and ``OUT/labels.npy`` (5·N,). ``OUT/classes.txt``
lists the classes in label order, ``OUT/corrupt.json`` the settings, ``OUT/subset.txt`` the images ``limit`` /
``subset`` drew (as ``robustvit eval`` does; written in data-set order).

Resumable: a finished unit is skipped (marker ``<corruption>/<severity>/.done``; CIFAR-C: ``.partial/`` files
assembled once a corruption's 5 severities exist); files are written atomically. Batch ``c`` of a unit uses the
seed ``derive_seed(seed, corruption, severity, c)``: reproducible for the same seed, batch size and device kind.

>>> export_corrupted(ExportConfig(data="synthshapes:test,count=20", out="/tmp/ssc", layout="cifar-c",
...                               corruptions="fog", progress=False))          # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustvit.corruptions.engine import corrupt
from robustvit.corruptions.frost import frost_source
from robustvit.corruptions.jpeg import to_uint8
from robustvit.corruptions.params import parse_corruptions, parse_severities, resolve_preset
from robustvit.data import UNREADABLE, create_dataset
from robustvit.data.base import FileImageDataset, ImageDataset, Resize
from robustvit.data.corrupted import CLASSES_FILE, LAYOUTS, read_classes_file
from robustvit.data.subset import SubsetDataset, dataset_labels, make_subset
from robustvit.errors import RobustvitError
from robustvit.progress import progress_bar
from robustvit.protocols import sample_entry
from robustvit.runs.atomic import replacing, write_bytes, write_json, write_text
from robustvit.utils import derive_seed, resolve_device

IMAGE_FORMATS = {"jpeg": ("JPEG", "JPEG"), "png": ("png", "PNG")}   # → (file extension, PIL format)
META_FILE = "corrupt.json"
SUBSET_FILE = "subset.txt"
DONE_FILE = ".done"
THREADS = 8


@dataclass
class ExportConfig:
    data: str
    out: str
    layout: str = "imagenet-c"             # or "cifar-c"
    corruptions: str = "all"               # group or names joined by + or ,
    severities: str = "1-5"
    preset: str | None = None              # imagenet / cifar; default by image size
    seed: int = 0
    batch_size: int = 64
    device: str = "auto"
    limit: int | None = None
    image_format: str = "jpeg"             # imagenet-c only: jpeg (quality ``jpeg_quality``) or png
    jpeg_quality: int = 85
    image_size: int | None = None          # file-based data: resize (shorter side, centre crop); default 224
    progress: bool = True
    subset_method: str = "stratified"      # how ``limit`` draws the images: stratified or first
    subset: str | None = None              # a file listing the images (indices or paths relative to the data root)
    subset_seed: int | None = None         # default: seed


def _safe(name: str) -> str:
    return name.replace("/", "_").replace(os.sep, "_") or "_"


def _load(ds: ImageDataset, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ds.get_batch(torch.tensor(ids))
    return x, torch.as_tensor(y).long()


def _names(ds: ImageDataset, n: int) -> list[str]:
    """File names of the images: the source files' stems when unique within each class, else the indices."""
    samples = getattr(ds, "samples", None)
    if isinstance(samples, list):
        stems = [Path(p).stem for p, _ in samples[:n]]
        if len(set(zip(stems, (label for _, label in samples[:n])))) == n:
            return stems
    return [f"{i:08d}" for i in range(n)]


def _save_image(arr: np.ndarray, path: Path, fmt: str, quality: int) -> None:
    """One image file, atomically; not fsync-ed one by one (thousands per unit): the unit's ``.done`` marker
    is written after all of them."""
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    write_bytes(path, buf.getvalue(), durable=False)


class _Exporter:
    def __init__(self, cfg: ExportConfig) -> None:
        if cfg.layout not in LAYOUTS:
            raise RobustvitError(f"unknown --format {cfg.layout!r}; use {' or '.join(LAYOUTS)}")
        if cfg.image_format not in IMAGE_FORMATS:
            raise RobustvitError(f"unknown image format {cfg.image_format!r}; use jpeg or png")
        if not 1 <= int(cfg.jpeg_quality) <= 100:
            raise RobustvitError(f"JPEG quality must be 1-100, got {cfg.jpeg_quality}")
        if cfg.batch_size < 1:
            raise RobustvitError(f"--batch-size must be >= 1, got {cfg.batch_size}")
        if cfg.limit is not None and cfg.limit < 1:
            raise RobustvitError(f"--limit must be >= 1, got {cfg.limit}")
        if cfg.preset is not None:
            resolve_preset(cfg.preset, 0, 0)   # checks the name
        self.cfg = cfg
        self.names = parse_corruptions(cfg.corruptions)
        self.severities = parse_severities(cfg.severities)
        if cfg.layout == "cifar-c" and self.severities != [1, 2, 3, 4, 5]:
            raise RobustvitError("a CIFAR-C file holds all 5 severities; drop --severities or use --format imagenet-c")
        self.device = resolve_device(cfg.device)
        self.ds = create_dataset(cfg.data, image_size=cfg.image_size)
        if isinstance(self.ds, FileImageDataset) and self.ds.resize is None:
            self.ds.resize = Resize(224)           # ImageNet-C convention: Resize(256) + CenterCrop(224)
        if len(self.ds) == 0:
            raise RobustvitError(f"{cfg.data} has no images")
        seed = cfg.seed if cfg.subset_seed is None else cfg.subset_seed
        self.images = make_subset(self.ds, limit=cfg.limit, method=cfg.subset_method, seed=seed, file=cfg.subset)
        if not self.images.whole:         # written in data-set order
            self.ds = SubsetDataset(self.ds, self.images.indices.sort().values)
        self.n = len(self.ds)
        self.out = Path(cfg.out).expanduser()
        self.out.mkdir(parents=True, exist_ok=True)
        self.h, self.w = _load(self.ds, [0])[0].shape[-2:]
        self.preset = resolve_preset(cfg.preset, self.h, self.w)
        self._check_meta()

    # ---------------------------------------------------------------- bookkeeping
    def _meta(self) -> dict[str, Any]:
        c = self.cfg
        return {"data": c.data, "layout": c.layout, "num_images": self.n, "image_size": [self.h, self.w],
                "preset": self.preset, "seed": c.seed, "batch_size": c.batch_size, "device_type": self.device.type,
                "image_format": c.image_format if c.layout == "imagenet-c" else "npy",
                "jpeg_quality": c.jpeg_quality if c.layout == "imagenet-c" and c.image_format == "jpeg" else None,
                "frost_source": frost_source() if "frost" in self.names else None, "subset": self.images.record()}

    def _check_meta(self) -> None:
        """Refuse to mix two different exports in one folder; write classes.txt and corrupt.json."""
        f = self.out / META_FILE
        meta = self._meta()
        if f.is_file():
            old = json.loads(f.read_text())
            fixed = ("data", "layout", "num_images", "image_size", "preset", "seed", "image_format", "jpeg_quality",
                     "frost_source", "subset")
            diff = [k for k in fixed if old.get(k) != meta.get(k)]
            if diff:
                raise RobustvitError(f"{self.out} holds an export with other settings ({diff[0]}: {old.get(diff[0])!r} "
                                     f"vs {meta.get(diff[0])!r}); use another --out or the same settings to resume")
            listed = list(old.get("corruptions", []))    # the earlier runs' order, then this run's new ones
            meta["corruptions"] = listed + [n for n in self.names if n not in listed]
        else:
            meta["corruptions"] = list(self.names)
        classes = [_safe(c) for c in self.ds.classes]
        listed = read_classes_file(self.out)
        if listed is not None and listed != classes:
            raise RobustvitError(f"{self.out / CLASSES_FILE} lists other classes; use another --out")
        if len(set(classes)) != len(classes):
            raise RobustvitError(f"{self.cfg.data} has duplicate class names; cannot make one folder per class")
        self.classes = classes
        meta.update(sample_entry(self.images.record()))
        if not self.images.whole:
            ids = self.images.indices.sort().values.tolist()
            write_text(self.out / SUBSET_FILE, "".join(f"{i}\n" for i in ids))
            meta["subset_file"] = SUBSET_FILE
        write_text(self.out / CLASSES_FILE, "\n".join(classes) + "\n")
        write_json(f, meta)

    def _batches(self) -> list[list[int]]:
        b = self.cfg.batch_size
        return [list(range(i, min(i + b, self.n))) for i in range(0, self.n, b)]

    def _corrupt(self, x: torch.Tensor, name: str, severity: int, chunk: int) -> np.ndarray:
        """uint8 (n, H, W, 3) of the corrupted batch (truncated like ``np.uint8(255·x)``)."""
        g = torch.Generator(device=self.device)
        g.manual_seed(derive_seed(self.cfg.seed, name, severity, chunk))
        y = corrupt(x.to(self.device, non_blocking=True), name, severity, generator=g, preset=self.preset)
        return to_uint8(y, "floor").permute(0, 2, 3, 1).cpu().numpy()

    # ---------------------------------------------------------------- imagenet-c
    def _unit_dir(self, name: str, severity: int) -> Path:
        return self.out / name / str(severity)

    def _imagenet_c_todo(self) -> list[tuple[str, int]]:
        return [(n, s) for n in self.names for s in self.severities if not (self._unit_dir(n, s) / DONE_FILE).is_file()]

    def _imagenet_c_unit(self, name: str, severity: int, tick: Any) -> int:
        d = self._unit_dir(name, severity)
        ext, fmt = IMAGE_FORMATS[self.cfg.image_format]
        stems = _names(self.ds, self.n)
        bad = 0
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            for c, ids in enumerate(self._batches()):
                x, y = _load(self.ds, ids)
                arr = self._corrupt(x, name, severity, c)
                jobs = []
                for k, (i, label) in enumerate(zip(ids, y.tolist())):
                    if label == UNREADABLE:
                        bad += 1
                        continue
                    folder = d / self.classes[label]
                    folder.mkdir(parents=True, exist_ok=True)
                    path = folder / f"{stems[i]}.{ext}"
                    jobs.append(pool.submit(_save_image, arr[k], path, fmt, self.cfg.jpeg_quality))
                for j in jobs:
                    j.result()
                tick(f"{name} {severity}")
        write_json(d / DONE_FILE, {"images": self.n - bad, "unreadable": bad}, indent=None)
        return bad

    # ---------------------------------------------------------------- cifar-c
    def _partial(self, name: str, severity: int) -> Path:
        return self.out / ".partial" / f"{name}_{severity}.npy"

    def _cifar_c_todo(self) -> list[tuple[str, int]]:
        return [(n, s) for n in self.names if not (self.out / f"{n}.npy").is_file()
                for s in self.severities if not self._partial(n, s).is_file()]

    def _cifar_c_labels(self) -> None:
        labels = dataset_labels(self.ds)
        if labels is None:
            labels = torch.cat([_load(self.ds, ids)[1] for ids in self._batches()])
        if bool((labels == UNREADABLE).any()):
            raise RobustvitError(f"{self.cfg.data} has unreadable images; the cifar-c layout needs every image "
                                 "(fix or remove them, or use --format imagenet-c)")
        y = labels.numpy()
        tiled = np.tile(y.astype(np.uint8) if y.max(initial=0) < 256 else y.astype(np.int64), 5)
        f = self.out / "labels.npy"
        if f.is_file():
            if not np.array_equal(np.load(f), tiled):
                raise RobustvitError(f"{f} holds other labels; use another --out")
            return
        with replacing(f, suffix=".npy") as tmp:
            np.save(tmp, tiled)

    def _cifar_c_unit(self, name: str, severity: int, tick: Any) -> int:
        p = self._partial(name, severity)
        with replacing(p, suffix=".npy") as tmp:
            mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(self.n, self.h, self.w, 3))
            for c, ids in enumerate(self._batches()):
                x, y = _load(self.ds, ids)
                if bool((y == UNREADABLE).any()):
                    raise RobustvitError(f"{self.cfg.data} has unreadable images; the cifar-c layout needs every image")
                mm[ids[0]: ids[-1] + 1] = self._corrupt(x, name, severity, c)
                tick(f"{name} {severity}")
            mm.flush()
            del mm
        self._assemble(name)
        return 0

    def _assemble(self, name: str) -> None:
        parts = [self._partial(name, s) for s in range(1, 6)]
        if not all(p.is_file() for p in parts):
            return
        with replacing(self.out / f"{name}.npy", suffix=".npy") as tmp:
            mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(5 * self.n, self.h, self.w, 3))
            for s, p in enumerate(parts):
                mm[s * self.n:(s + 1) * self.n] = np.load(p, mmap_mode="r")
            mm.flush()
            del mm
        for p in parts:
            p.unlink()
        try:
            (self.out / ".partial").rmdir()
        except OSError:
            pass

    # ---------------------------------------------------------------- run
    def run(self) -> dict[str, Any]:
        imagenet = self.cfg.layout == "imagenet-c"
        if not imagenet:
            self._cifar_c_labels()
            for n in self.names:             # units finished before an interruption during assembly
                self._assemble(n)
        todo = self._imagenet_c_todo() if imagenet else self._cifar_c_todo()
        total = len(self.names) * len(self.severities)
        write_unit = self._imagenet_c_unit if imagenet else self._cifar_c_unit
        bad, steps = 0, len(todo) * len(self._batches())
        with progress_bar(self.cfg.progress, f"corrupt → {self.cfg.layout}", steps) as tick:
            for name, s in todo:
                bad = max(bad, write_unit(name, s, tick))
        if bad:
            warnings.warn(f"skipped {bad} unreadable images of {self.cfg.data}", stacklevel=2)
        return {"out": str(self.out), "layout": self.cfg.layout, "num_images": self.n - bad, "units_written": len(todo),
                "units_skipped": total - len(todo), "preset": self.preset, "corruptions": list(self.names),
                "severities": list(self.severities)}


def export_corrupted(cfg: ExportConfig) -> dict[str, Any]:
    """Write the corrupted copy ``cfg`` describes; returns a summary (``out``, ``num_images``, ``units_written``, …)."""
    return _Exporter(cfg).run()


__all__ = ["ExportConfig", "IMAGE_FORMATS", "export_corrupted"]
