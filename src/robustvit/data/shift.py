"""Natural distribution-shift test sets of ImageNet: ImageNet-R, ImageNet-A, ImageNet-Sketch, ImageNet-V2.

* **ImageNet-R** (Hendrycks et al., "The Many Faces of Robustness", arXiv:2006.16241) and **ImageNet-A**
  (Hendrycks et al., "Natural Adversarial Examples", arXiv:1907.07174): ``ROOT/<wnid>/<image>``, 200 wnid
  folders each (86 shared). A 1000-class model keeps only those 200 logits, as the official ``eval.py`` scripts
  (``imagenet_r_mask`` in hendrycks/imagenet-r, ``indices_in_1k`` in hendrycks/natural-adv-examples), whose
  lists ``classlists/imagenet_{r,a}_wnids.txt`` copy; a label is the wnid's index among the 200 (sorted).
* **ImageNet-Sketch** (Wang et al., arXiv:1905.13549): ``ROOT/<wnid>/<image>``, 1000 wnid folders (a ROOT
  holding only the archive's ``sketch/`` is accepted).
* **ImageNet-V2** (Recht et al., arXiv:1902.10811), e.g. ``imagenetv2-matched-frequency-format-val``: folders
  ``0`` … ``999``, the label the folder's *integer*, not its sorted-string position ("10" < "2").

ImageNet class i is the i-th wnid of ``classlists/imagenet_wnids.txt`` (sorted); folders may be missing, not
unknown. Data specs ``imagenet_r:/path`` etc. (docs/natural-shift.md) label with the ImageNet-1k index, so that any
suite scores a 1000-class model's argmax; the ``imagenet_r`` / ``imagenet_a`` *suites* mask the logits instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from robustvit.data.base import FileImageDataset, ImageDataset, Resize
from robustvit.data.sources import register_source
from robustvit.errors import RobustvitError
from robustvit.options import option

CLASSLIST_DIR = Path(__file__).parent / "classlists"
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
SHIFT_SETS = ("imagenet_r", "imagenet_a", "imagenet_sketch", "imagenet_v2")
#: Folder under ``$ROBUSTVIT_DATA`` used when no root is given (the names the archives unpack to).
DEFAULT_FOLDERS = {"imagenet_r": "imagenet-r", "imagenet_a": "imagenet-a", "imagenet_sketch": "imagenet-sketch",
                   "imagenet_v2": "imagenetv2-matched-frequency-format-val"}
PRETTY = {"imagenet_r": "ImageNet-R", "imagenet_a": "ImageNet-A", "imagenet_sketch": "ImageNet-Sketch",
          "imagenet_v2": "ImageNet-V2"}


@lru_cache(maxsize=None)
def load_classlist(name: str) -> tuple[str, ...]:
    """A shipped class list (``imagenet_wnids``, ``imagenet_r_wnids``, ``imagenet_a_wnids``), one wnid a line."""
    path = CLASSLIST_DIR / f"{name}.txt"
    if not path.is_file():
        raise RobustvitError(f"no class list {name!r}; shipped: "
                             + ", ".join(sorted(p.stem for p in CLASSLIST_DIR.glob('*.txt'))))
    return tuple(line.strip() for line in path.read_text().splitlines() if line.strip())


def imagenet_wnids() -> tuple[str, ...]:
    """The 1000 ImageNet-1k wnids in class-index order (sorted)."""
    return load_classlist("imagenet_wnids")


def subset_wnids(name: str) -> tuple[str, ...]:
    """The 200 wnids (sorted) of ``imagenet_r`` or ``imagenet_a``."""
    if name not in ("imagenet_r", "imagenet_a"):
        raise RobustvitError(f"only imagenet_r and imagenet_a are 200-class subsets, not {name!r}")
    return load_classlist(f"{name}_wnids")


def subset_indices(name: str) -> list[int]:
    """Indices into the 1000 ImageNet classes of the 200 classes of ``imagenet_r``/``imagenet_a`` (ascending:
    logit j of ``logits[:, subset_indices(name)]`` is class j of the subset)."""
    pos = {w: i for i, w in enumerate(imagenet_wnids())}
    return [pos[w] for w in subset_wnids(name)]


@dataclass
class ShiftInfo:
    """What an evaluation needs besides the images: the model-logit indices to keep (None: all 1000)."""

    name: str
    logit_indices: list[int] | None
    num_found_classes: int


def resolve_root(name: str, arg: str | None, options: dict[str, Any] | None = None) -> Path:
    """The data root: ``arg``, else option ``root=``, else ``$ROBUSTVIT_DATA/<DEFAULT_FOLDERS[name]>``."""
    options = options or {}
    given = arg or options.get("root")
    if given:
        root = Path(str(given)).expanduser()
    elif os.environ.get("ROBUSTVIT_DATA"):
        root = Path(os.environ["ROBUSTVIT_DATA"]).expanduser() / DEFAULT_FOLDERS[name]
    else:
        raise RobustvitError(f"{PRETTY[name]}: give its folder (root=/path/to/{DEFAULT_FOLDERS[name]}) or set "
                             f"ROBUSTVIT_DATA to the folder that holds {DEFAULT_FOLDERS[name]}/")
    if not root.is_dir():
        raise RobustvitError(f"{PRETTY[name]} folder {root} does not exist; download and unpack it, then pass "
                             "its path (root=...)")
    if name == "imagenet_sketch" and (root / "sketch").is_dir() and not any(
            d.name.startswith("n") for d in root.iterdir() if d.is_dir() and d.name != "sketch"):
        root = root / "sketch"
    return root


def _class_folders(root: Path) -> list[Path]:
    folders = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not folders:
        raise RobustvitError(f"{root} has no class folders; expected ROOT/<class>/<image>")
    return folders


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS and p.is_file())


def shift_samples(name: str, root: Path, labels: str = "subset") -> tuple[list[tuple[str, int]], list[str], int]:
    """(samples [(path, label)], class names, number of class folders found) for one shift set.

    ``labels="subset"``: -R/-A labels index their 200 classes; ``"imagenet"``: every label is the
    ImageNet-1k class index (classes = the 1000 wnids)."""
    folders = _class_folders(root)
    if name == "imagenet_v2":
        classes = list(imagenet_wnids())
        for d in folders:
            if not d.name.isdigit() or not 0 <= int(d.name) < 1000:
                raise RobustvitError(f"ImageNet-V2 folder {d} is not a class index 0..999; give the root of the "
                                     "matched-frequency format (folders 0 … 999)")
        folder_label = {d: int(d.name) for d in folders}
    else:
        if labels not in ("subset", "imagenet"):
            raise RobustvitError(f"labels must be 'subset' or 'imagenet', got {labels!r}")
        own = subset_wnids(name) if name in ("imagenet_r", "imagenet_a") else imagenet_wnids()
        for d in folders:
            if d.name not in own:
                raise RobustvitError(f"{PRETTY[name]} folder {d.name!r} in {root} is not one of its "
                                     f"{len(own)} wnids; is {root} the right data set?")
        classes = list(imagenet_wnids() if labels == "imagenet" else own)
        index = {w: i for i, w in enumerate(classes)}
        folder_label = {d: index[d.name] for d in folders}
    samples = [(str(p), folder_label[d]) for d in folders for p in _images(d)]
    if not samples:
        raise RobustvitError(f"{root} has no images with extensions {', '.join(IMG_EXTENSIONS)}")
    return samples, classes, len(folders)


def load_shift_dataset(name: str, root: str | Path | None = None, *, image_size: int | None = None,
                       crop_pct: float = 0.875, interpolation: str = "bilinear", strict: bool = False,
                       labels: str = "subset") -> FileImageDataset:
    """Build ImageNet-R/-A/-Sketch/-V2 from its folder (see the module docstring for the layouts).

    The data set has ``classes`` (with ``labels="subset"``: 200 wnids for -R/-A, 1000 for Sketch/V2;
    with ``labels="imagenet"``: always the 1000 wnids, labels = ImageNet-1k indices) and ``shift`` (a
    :class:`ShiftInfo` with the model-logit indices to keep for the 200-class evaluation).
    """
    if name not in SHIFT_SETS:
        raise RobustvitError(f"unknown shift data set {name!r}; choose from {', '.join(SHIFT_SETS)}")
    path = resolve_root(name, None if root is None else str(root))
    samples, classes, found = shift_samples(name, path, labels)
    ds = FileImageDataset(samples, classes, f"{name}:{path}", Resize(image_size or 224, float(crop_pct), interpolation),
                          strict)
    ds.shift = ShiftInfo(name, subset_indices(name) if name in ("imagenet_r", "imagenet_a") else None, found)
    return ds


def _source(name: str, arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    resize = resize or Resize(224)
    crop_pct = float(options.pop("crop_pct", resize.crop_pct))
    root = options.pop("root", None)
    if options:
        raise RobustvitError(f"data source {name!r} has no option {next(iter(options))!r}; it takes root=, crop_pct=")
    return load_shift_dataset(name, arg or root, image_size=resize.size, crop_pct=crop_pct,
                              interpolation=resize.interpolation, strict=strict, labels="imagenet")


@dataclass
class ShiftOptions:
    root: str | None = option(None, help="the data set's folder (default: the argument, else $ROBUSTVIT_DATA/…)")
    crop_pct: float | None = option(None, min=0.0, max=1.0, help="centre-crop fraction (default: the model's)")


def _register(name: str, doc: str) -> None:
    """Register ``name`` as a data source of :class:`ShiftOptions` that loads :func:`load_shift_dataset`."""
    def source(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
        return _source(name, arg, options, resize, strict)
    source.__doc__ = doc
    register_source(name, source, options=ShiftOptions)


_register("imagenet_r", "``imagenet_r:/path`` — ImageNet-R (200 wnid folders; labels = ImageNet-1k indices).")
_register("imagenet_a", "``imagenet_a:/path`` — ImageNet-A (200 wnid folders; labels = ImageNet-1k indices).")
_register("imagenet_sketch", "``imagenet_sketch:/path`` — ImageNet-Sketch (1000 wnid folders).")
_register("imagenet_v2", "``imagenet_v2:/path`` — ImageNet-V2 (folders 0 … 999; label = the folder's integer).")


__all__ = ["DEFAULT_FOLDERS", "SHIFT_SETS", "ShiftInfo", "imagenet_wnids", "load_classlist", "load_shift_dataset",
           "resolve_root", "shift_samples", "subset_indices", "subset_wnids"]
