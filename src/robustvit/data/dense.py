"""Dense-prediction data: semantic segmentation (``cityscapes:``, ``ade20k:``, stored Cityscapes-C-style
corruptions) and object detection (``coco:``), plus the COCO ground truth of any detection data set; the layouts
are documented in docs/dense.md ("Data").

A *segmentation* data set is an :class:`ImageDataset` with ``get_masks(index) -> long (n, H, W)`` (class
indices, ``ignore_index`` 255 unlabelled) at its images' size. A *detection* data set has ``get_images(index)``
(float (3, H, W), native sizes), ``get_targets(index)`` (per image ``boxes`` (m, 4) ``[x0, y0, x1, y1]`` in
pixels, ``labels`` (m,) COCO category ids) and ``image_sizes(index)``. ``synthshapes:…,masks=1`` / ``boxes=1``
are both, generated. Cityscapes labels map to the 19 train ids (cityscapesScripts ``labels.py``), ADE20K's
0 → 255 and 1–150 → 0–149 (mmseg's ``reduce_zero_label``). Stored corruptions, in FAN's layout (its
``gen_coco_c.py``: ``DIR/<corruption>_<severity>/<relative path>``) or Kamann & Rother's (Cityscapes-C,
arXiv:1908.05005: ``DIR/<corruption>/<severity>/<relative path>``), keep the clean data set's masks and boxes.

The dense suites read at native resolution (``get_native``). Items and ``get_batch`` (training, previews) bring
segmentation images to the model's square input (bilinear, antialiased; masks nearest) so that a batch has one
size; ``size=N`` sets that size and the size the suites read at (no longer the benchmark's native resolution).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from robustvit.data.base import ImageDataset, Resize
from robustvit.data.sources import register_source
from robustvit.errors import RobustvitError
from robustvit.options import option

IGNORE_INDEX = 255
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".ppm")

CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
                      "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle",
                      "bicycle")
#: Cityscapes label id → train id (cityscapesScripts ``labels.py``); every other id is ignored (255).
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12,
                        26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


def _lut(mapping: dict[int, int]) -> torch.Tensor:
    lut = torch.full((256,), IGNORE_INDEX, dtype=torch.long)
    for k, v in mapping.items():
        lut[k] = v
    return lut


def _ids(index: torch.Tensor) -> list[int]:
    return torch.as_tensor(index).long().reshape(-1).tolist()


def _read_rgb(path: str | Path, size: int | None) -> torch.Tensor:
    import torchvision.transforms.functional as TF
    with Image.open(path) as im:
        im = im.convert("RGB")
        if size is not None and im.size != (size, size):
            im = im.resize((size, size), Image.BILINEAR, reducing_gap=None)
        return TF.pil_to_tensor(im).float().div_(255)


def _read_mask(path: str | Path, size: int | None, lut: torch.Tensor | None) -> torch.Tensor:
    with Image.open(path) as im:
        if im.mode not in ("L", "P", "I", "I;16"):
            im = im.convert("L")
        if size is not None and im.size != (size, size):
            im = im.resize((size, size), Image.NEAREST)
        m = torch.from_numpy(np.asarray(im).astype(np.int64))
    return m if lut is None else lut[m.clamp(0, 255)]


class SegmentationFileDataset(ImageDataset):
    """Image files with per-pixel label files: ``samples`` = [(image path, mask path)], ``relpaths`` the
    images' paths relative to the split folder (for stored corruptions). Item label: 0 (no image label)."""

    ignore_index = IGNORE_INDEX
    has_masks = True

    def __init__(self, samples: list[tuple[str, str]], relpaths: list[str], classes: list[str], spec: str,
                 size: int | None, lut: torch.Tensor | None, native_size: int | None = None) -> None:
        if not samples:
            raise RobustvitError(f"{spec}: no image/label pairs found; check the folder layout (see docs/dense.md)")
        self.samples, self.relpaths, self.classes, self.spec = samples, relpaths, list(classes), spec
        self.size, self.lut, self.native_size = size, lut, native_size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return _read_rgb(self.samples[i][0], self.size), 0

    def get_masks(self, index: torch.Tensor) -> torch.Tensor:
        """Class masks (n, H, W), long, 255 = ignore."""
        return torch.stack([_read_mask(self.samples[i][1], self.size, self.lut) for i in _ids(index)])

    def get_native(self, index: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Images float (3, H, W) and masks long (H, W) at their native size (or the ``size=N`` given)."""
        ids = _ids(index)
        return ([_read_rgb(self.samples[i][0], self.native_size) for i in ids],
                [_read_mask(self.samples[i][1], self.native_size, self.lut) for i in ids])


def segmentation_samples(ds: Any, index: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A segmentation data set's images and masks at native size (``get_native``, else ``get_batch``, ``get_masks``)."""
    if hasattr(ds, "get_native"):
        return ds.get_native(index)
    index = torch.as_tensor(index).long().reshape(-1)
    return list(ds.get_batch(index)[0]), list(ds.get_masks(index))


def _size(options: dict[str, Any], resize: Resize | None) -> tuple[int | None, int | None]:
    """(the item size: ``size=N``, else the model's; the size the dense suites read at: ``size=N`` or native)."""
    size = options.pop("size", None)
    if size is not None:
        return int(size), int(size)
    return (resize.size if resize is not None else None), None


def _no_more(options: dict[str, Any], source: str) -> None:
    if options:
        raise RobustvitError(f"data source {source!r} has no option {next(iter(options))!r}")


@dataclass
class SegmentationOptions:
    split: str | None = option(None, help="the split's folder")
    size: int | None = option(None, min=1, help="image side (default: the model's)")


@dataclass
class CocoOptions:
    split: str | None = option(None, help="the split (default val2017)")
    ann: str | None = option(None, help="an instances JSON file (the argument is then the image folder)")
    size: int | None = option(None, min=1, help="image side (default: as stored)")


def _pairs(source: str, arg: str, options: dict[str, Any], split: str, folders: tuple[str, str], layout: str,
           images: Callable[[Path], Iterable[Path]], mask_of: Callable[[Path, Path, Path], Path], what: str,
           ) -> tuple[str, list[tuple[str, str]], list[str]]:
    """The ``split``'s (image, mask) paths below ``ROOT/<folders[0]>/<split>`` and ``ROOT/<folders[1]>/<split>``
    (``mask_of(image, image_dir, mask_dir)``; one-line errors for a missing folder or mask) and the images'
    relative paths; ``options`` must hold nothing but ``split`` once ``size`` is taken."""
    split = str(options.pop("split", split))
    _no_more(options, source)
    img_dir, mask_dir = Path(arg) / folders[0] / split, Path(arg) / folders[1] / split
    if not img_dir.is_dir() or not mask_dir.is_dir():
        raise RobustvitError(f"{source}:{arg} needs {img_dir} and {mask_dir} ({layout})")
    samples, rel = [], []
    for p in sorted(images(img_dir)):
        m = mask_of(p, img_dir, mask_dir)
        if not m.is_file():
            raise RobustvitError(f"{source}: no {what} {m} for {p}")
        samples.append((str(p), str(m)))
        rel.append(str(p.relative_to(img_dir)))
    return split, samples, rel


@register_source("cityscapes", options=SegmentationOptions)
def cityscapes(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``cityscapes:ROOT[,split=val,size=N]`` — Cityscapes fine annotations, 19 train-id classes."""
    size, native = _size(options, resize)
    split, samples, rel = _pairs(
        "cityscapes", arg, options, "val", ("leftImg8bit", "gtFine"), "torchvision's Cityscapes layout",
        lambda d: d.rglob("*_leftImg8bit.png"),
        lambda p, _, gt: gt / p.parent.name / f"{p.name[: -len('_leftImg8bit.png')]}_gtFine_labelIds.png", "label file")
    return SegmentationFileDataset(samples, rel, list(CITYSCAPES_CLASSES), f"cityscapes:{arg},split={split}", size,
                                   _lut(CITYSCAPES_TRAIN_IDS), native)


def _ade_names(root: Path) -> list[str]:
    """The 150 class names of ``objectInfo150.txt`` / ``.csv`` (first synonym), else ``class_1`` … ``class_150``."""
    for name in ("objectInfo150.txt", "objectInfo150.csv"):
        p = root / name
        if p.is_file():
            rows = [r for r in p.read_text().splitlines()[1:] if r.strip()]
            sep = "\t" if "\t" in rows[0] else ","
            names = [r.split(sep)[-1].strip().strip('"').split(",")[0].split(";")[0].strip() for r in rows]
            if len(names) == 150:
                return names
    return [f"class_{i + 1}" for i in range(150)]


@register_source("ade20k", options=SegmentationOptions)
def ade20k(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``ade20k:ROOT[,split=validation,size=N]`` — ADE20K SceneParsing, 150 classes (0 = other → ignored)."""
    size, native = _size(options, resize)
    split, samples, rel = _pairs(
        "ade20k", arg, options, "validation", ("images", "annotations"), "the ADEChallengeData2016 layout",
        lambda d: (q for q in d.rglob("*") if q.suffix.lower() in IMAGE_EXTENSIONS),
        lambda p, img, ann: ann / p.relative_to(img).with_suffix(".png"), "annotation")
    lut = _lut({k: k - 1 for k in range(1, 151)})
    spec = f"ade20k:{arg},split={split}"
    return SegmentationFileDataset(samples, rel, _ade_names(Path(arg)), spec, size, lut, native)


# ---------------------------------------------------------------- stored corruptions
_FAN_DIR = re.compile(r"^(?P<name>[a-z_]+)_(?P<severity>[1-5])$")


class StoredCorruptions:
    """A tree of corrupted copies of a clean data set: FAN's ``DIR/<corruption>_<severity>/<relative path>``
    (``layout = "fan"``) or ``DIR/<corruption>/<severity>/<relative path>`` (``"nested"``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise RobustvitError(f"corruption folder {self.root} does not exist")
        self.dirs: dict[tuple[str, int], Path] = {}
        for p in sorted(q for q in self.root.iterdir() if q.is_dir()):
            m = _FAN_DIR.match(p.name)
            if m:
                self.dirs[(m["name"], int(m["severity"]))] = p
            for q in p.iterdir():
                if q.is_dir() and q.name.isdigit():
                    self.dirs[(p.name, int(q.name))] = q
        if not self.dirs:
            raise RobustvitError(f"{self.root} holds no <corruption>_<severity>/ (FAN's COCO-C / Cityscapes-C) or "
                                 "<corruption>/<severity>/ folders")
        fan = {k for k, v in self.dirs.items() if v.parent == self.root}
        if fan and len(fan) != len(self.dirs):
            raise RobustvitError(f"{self.root} mixes <corruption>_<severity>/ and <corruption>/<severity>/ folders; "
                                 "keep one layout")
        self.layout = "fan" if fan else "nested"
        self.corruptions = sorted({n for n, _ in self.dirs})

    def path(self, name: str, severity: int, relpath: str) -> Path:
        self.check(name, severity)
        base = self.dirs[(name, int(severity))] / relpath
        for p in (base, *(base.with_suffix(ext) for ext in IMAGE_EXTENSIONS)):
            if p.is_file():
                return p
        raise RobustvitError(f"stored corruption {name}/{severity} has no image for {relpath} under {self.root}")

    def images(self, name: str, severity: int, rel: list[str], size: int | None) -> list[torch.Tensor]:
        """The stored corrupted images of the relative paths ``rel`` (float (3, H, W); resized to ``size``)."""
        return [_read_rgb(self.path(name, severity, r), size) for r in rel]

    def check(self, name: str, severity: int) -> None:
        if (name, int(severity)) not in self.dirs:
            folder = f"{name}_{severity}/" if self.layout == "fan" else f"{name}/{severity}/"
            raise RobustvitError(f"{self.root} has no {folder} folder; corruptions there: "
                                 f"{', '.join(self.corruptions)}")


def relpaths(ds: Any) -> list[str]:
    """The images' relative paths of a file-backed dense data set (to find their stored corruptions)."""
    rel = getattr(ds, "relpaths", None)
    if rel is None:
        raise RobustvitError(f"{getattr(ds, 'spec', 'the data')} is generated, not read from files: stored corruptions "
                             "(source=DIR) need the clean files (cityscapes:, ade20k:, coco:)")
    return list(rel)


# ---------------------------------------------------------------- detection (COCO layout)
class CocoDetectionDataset(ImageDataset):
    """Images and boxes of a COCO instances file. ``classes[c]`` is the name of category id ``c`` (index 0
    ``__background__``, gaps ``N/A``, as torchvision's COCO categories). Item label: 0."""

    has_boxes = True

    def __init__(self, image_dir: str | Path, ann: dict[str, Any], spec: str, size: int | None = None) -> None:
        self.image_dir, self.spec, self.size = Path(image_dir), spec, size
        try:
            self.images = sorted(ann["images"], key=lambda r: r["id"])
            cats = {int(c["id"]): str(c["name"]) for c in ann["categories"]}
            anns = ann.get("annotations", [])
        except (KeyError, TypeError) as e:
            raise RobustvitError(f"{spec}: not a COCO instances file ({e})") from None
        self.categories = [{"id": k, "name": v} for k, v in sorted(cats.items())]
        self.classes = ["__background__"] + [cats.get(i, "N/A") for i in range(1, max(cats, default=0) + 1)]
        self.by_image: dict[int, list[dict[str, Any]]] = {int(r["id"]): [] for r in self.images}
        for a in anns:
            self.by_image.setdefault(int(a["image_id"]), []).append(a)
        self.relpaths = [str(r["file_name"]) for r in self.images]

    def __len__(self) -> int:
        return len(self.images)

    def _read(self, i: int, size: int | None) -> torch.Tensor:
        return _read_rgb(self.image_dir / self.images[i]["file_name"], size)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self._read(i, self.size or 64), 0

    def get_images(self, index: torch.Tensor) -> list[torch.Tensor]:
        """Images at their native size, float (3, H, W) in [0, 1]."""
        return [self._read(i, None) for i in _ids(index)]

    def image_ids(self, index: torch.Tensor) -> list[int]:
        return [int(self.images[i]["id"]) for i in _ids(index)]

    def image_sizes(self, index: torch.Tensor) -> list[tuple[int, int]]:
        return [(int(self.images[i]["height"]), int(self.images[i]["width"])) for i in _ids(index)]

    def get_targets(self, index: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        out = []
        for iid in self.image_ids(index):
            a = [r for r in self.by_image[iid] if not r.get("iscrowd", 0)]
            b = torch.tensor([r["bbox"] for r in a], dtype=torch.float32).reshape(-1, 4)
            b[:, 2:] += b[:, :2]
            out.append({"boxes": b, "labels": torch.tensor([int(r["category_id"]) for r in a], dtype=torch.long)})
        return out

    def coco_annotations(self, index: torch.Tensor) -> list[dict[str, Any]]:
        return [a for iid in self.image_ids(index) for a in self.by_image[iid]]


@register_source("coco", options=CocoOptions)
def coco(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``coco:ROOT[,split=val2017]`` or ``coco:IMAGES,ann=FILE.json`` — a COCO-layout detection set."""
    root, split = Path(arg), str(options.pop("split", "val2017"))
    ann_file, size = options.pop("ann", None), options.pop("size", None)
    _no_more(options, "coco")
    if ann_file is None:
        ann_path, image_dir = root / "annotations" / f"instances_{split}.json", root / split
    else:
        ann_path, image_dir = Path(ann_file), root
    if not ann_path.is_file() or not image_dir.is_dir():
        raise RobustvitError(f"coco:{arg} needs {ann_path} and the image folder {image_dir} (COCO layout), "
                             "or give ann=FILE.json with the image folder")
    try:
        ann = json.loads(ann_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RobustvitError(f"cannot read {ann_path} ({type(e).__name__}); give a COCO instances JSON file") from None
    spec = f"coco:{arg}" + (f",ann={ann_file}" if ann_file else f",split={split}")
    return CocoDetectionDataset(image_dir, ann, spec, None if size is None else int(size))


def detection_images(ds: Any, index: torch.Tensor) -> list[torch.Tensor]:
    """Native-size images of a detection data set (``get_images``, else the rows of ``get_batch``)."""
    if hasattr(ds, "get_images"):
        return ds.get_images(index)
    return list(ds.get_batch(torch.as_tensor(index).long())[0])


def image_ids(ds: Any, index: torch.Tensor) -> list[int]:
    """COCO image ids (the data set's own, else the positions)."""
    if hasattr(ds, "image_ids"):
        return ds.image_ids(index)
    return [int(i) for i in torch.as_tensor(index).reshape(-1).tolist()]


def coco_ground_truth(ds: Any, index: torch.Tensor) -> dict[str, Any]:
    """COCO-format ground truth (``images``, ``annotations``, ``categories``) for the images ``index`` of a
    detection data set — what ``pycocotools.coco.COCO`` reads. Boxes are ``[x, y, w, h]`` in pixels."""
    if not hasattr(ds, "get_targets"):
        raise RobustvitError(f"{getattr(ds, 'spec', 'the data')} has no boxes; use a detection data set "
                             "(coco:ROOT or synthshapes:test,boxes=1)")
    index = torch.as_tensor(index).long().reshape(-1)
    ids, sizes = image_ids(ds, index), ds.image_sizes(index)
    images = [{"id": i, "height": h, "width": w} for i, (h, w) in zip(ids, sizes)]
    if hasattr(ds, "coco_annotations"):
        anns = [dict(a) for a in ds.coco_annotations(index)]
        for a in anns:
            a.setdefault("area", float(a["bbox"][2] * a["bbox"][3]))
            a.setdefault("iscrowd", 0)
        cats = list(ds.categories)
    else:
        anns = []
        for iid, t in zip(ids, ds.get_targets(index)):
            for b, c in zip(t["boxes"].tolist(), t["labels"].tolist()):
                w, h = b[2] - b[0], b[3] - b[1]
                anns.append({"id": len(anns) + 1, "image_id": iid, "category_id": int(c),
                             "bbox": [b[0], b[1], w, h], "area": float(w * h), "iscrowd": 0})
        cats = [{"id": c, "name": n} for c, n in enumerate(ds.classes) if c > 0]
    return {"images": images, "annotations": anns, "categories": cats}


__all__ = ["CITYSCAPES_CLASSES", "CITYSCAPES_TRAIN_IDS", "IGNORE_INDEX", "CocoDetectionDataset",
           "SegmentationFileDataset", "StoredCorruptions", "ade20k", "cityscapes", "coco", "coco_ground_truth",
           "detection_images", "image_ids", "relpaths", "segmentation_samples"]
