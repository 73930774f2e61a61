"""Data sources: ``folder:``, ``npz:``, ``cifar10:``/``cifar100:`` (torchvision), ``imagenet:`` and
``synthshapes:``. Each takes the argument after the colon and ``key=value`` options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robustvit.data.base import FileImageDataset, ImageDataset, Resize, TensorImageDataset
from robustvit.data.synthshapes import MAX_CLASSES, SPLITS, SynthShapesDataset
from robustvit.errors import RobustvitError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def cache_root(options: dict[str, Any]) -> Path:
    """Download/cache folder: option ``root=``, else $ROBUSTVIT_DATA, else ~/.cache/robustvit."""
    return Path(options.get("root") or os.environ.get("ROBUSTVIT_DATA") or Path.home() / ".cache" / "robustvit")


def synthshapes(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``synthshapes:train|test|cue_conflict[,size=32,count=N,seed=S,classes=K,texture_correlation=p,masks=1,boxes=1]``."""
    split = arg or "train"
    if split not in SPLITS:
        raise RobustvitError(f"unknown synthshapes split {split!r}; use train, test or cue_conflict")
    count, seed = SPLITS[split]
    size = int(options.pop("size", resize.size if resize is not None else 32))     # rendered at the model's size
    count, seed = int(options.pop("count", count)), int(options.pop("seed", seed))
    k = int(options.pop("classes", 10))
    tc = float(options.pop("texture_correlation", 0.5))
    masks = str(options.pop("masks", "0")) not in ("0", "false", "no")      # dense prediction: per-pixel masks
    boxes = str(options.pop("boxes", "0")) not in ("0", "false", "no")      # … and/or COCO-style boxes
    _no_more(options, "synthshapes")
    spec = f"synthshapes:{split},size={size},count={count},seed={seed},classes={k},texture_correlation={tc:g}"
    spec += ",masks=1" if masks else ""
    spec += ",boxes=1" if boxes else ""
    return SynthShapesDataset(count, size=size, seed=seed, classes=k, texture_correlation=tc,
                              cue_conflict=split == "cue_conflict", spec=spec, masks=masks, boxes=boxes)


def folder(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``folder:/path[,size=S,crop_pct=P,interpolation=I]`` — torchvision ImageFolder layout
    ``<root>/<class>/<image>``; classes sorted. Images are brought to the model's input with its own
    preprocessing (``resize``); the options override it."""
    root = Path(arg).expanduser()
    if not root.is_dir():
        raise RobustvitError(f"folder {root} does not exist; give the root of an ImageFolder tree (<root>/<class>/<image>)")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise RobustvitError(f"folder {root} has no class sub-folders; expected <root>/<class>/<image>")
    samples = [(str(p), i) for i, c in enumerate(classes) for p in sorted((root / c).rglob("*"))
               if p.suffix.lower() in IMG_EXTENSIONS]
    if not samples:
        raise RobustvitError(f"folder {root} has no images with extensions {', '.join(IMG_EXTENSIONS)}")
    resize = override_resize(resize, options)
    _no_more(options, "folder")
    return FileImageDataset(samples, classes, f"folder:{root}", resize, strict)


def override_resize(resize: Resize | None, options: dict[str, Any]) -> Resize | None:
    """``resize`` with the data options ``size``, ``crop_pct`` and ``interpolation`` applied (popped)."""
    size, crop, interp = options.pop("size", None), options.pop("crop_pct", None), options.pop("interpolation", None)
    if size is None and resize is None:
        return None
    base = resize or Resize(int(size))
    return Resize(int(size or base.size), float(crop or base.crop_pct), str(interp or base.interpolation))


def npz(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``npz:/path.npz`` with arrays ``x`` uint8 (N, H, W, 3) and ``y`` (N,) (optional ``classes``)."""
    path = Path(arg).expanduser()
    if not path.is_file():
        raise RobustvitError(f"npz file {path} does not exist")
    _no_more(options, "npz")
    try:
        with np.load(path, allow_pickle=False) as f:
            if "x" not in f or "y" not in f:
                raise RobustvitError(f"{path} must hold arrays 'x' (uint8 N×H×W×3) and 'y' (N,); found {', '.join(f.files)}")
            x, y = f["x"], f["y"]
            classes = [str(c) for c in f["classes"]] if "classes" in f else None
    except (OSError, ValueError) as e:
        raise RobustvitError(f"cannot read {path} as .npz ({e})") from None
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[-1] != 3:
        raise RobustvitError(f"{path}: 'x' must be uint8 of shape (N, H, W, 3), got {x.dtype} {x.shape}")
    classes = classes or [str(i) for i in range(int(y.max()) + 1)]
    return TensorImageDataset(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y.astype(np.int64)),
                              classes, f"npz:{path}")


def _torchvision_cifar(name: str, arg: str, options: dict[str, Any]) -> ImageDataset:
    import torchvision

    split = arg or "test"
    if split not in ("train", "test"):
        raise RobustvitError(f"unknown {name} split {split!r}; use train or test")
    root = cache_root(options)
    download = str(options.pop("download", "1")) not in ("0", "false", "no")
    options.pop("root", None)
    _no_more(options, name)
    cls = torchvision.datasets.CIFAR10 if name == "cifar10" else torchvision.datasets.CIFAR100
    try:
        ds = cls(str(root), train=split == "train", download=download)
    except RuntimeError as e:
        raise RobustvitError(f"{name} not found under {root} ({e}); connect to the internet once or pass root=DIR") from None
    x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
    return TensorImageDataset(x, torch.tensor(ds.targets), list(ds.classes), f"{name}:{split}")


def cifar10(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``cifar10:train|test[,root=DIR]`` — torchvision's CIFAR-10 (downloaded on first use)."""
    return _torchvision_cifar("cifar10", arg, options)


def cifar100(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``cifar100:train|test[,root=DIR]`` — torchvision's CIFAR-100 (downloaded on first use)."""
    return _torchvision_cifar("cifar100", arg, options)


def imagenet(arg: str, options: dict[str, Any], resize: Resize | None, strict: bool) -> ImageDataset:
    """``imagenet:/path/to/val`` — the validation set in ImageFolder layout (1000 wnid folders),
    brought to the model's input with its own preprocessing (default Resize(256) + CenterCrop(224))."""
    ds = folder(arg, options, resize or Resize(224), strict)
    if ds.num_classes != 1000:
        raise RobustvitError(f"imagenet:{arg} has {ds.num_classes} class folders, expected 1000 wnid folders; "
                             "use folder: for other layouts")
    ds.spec = f"imagenet:{arg}"
    return ds


def _no_more(options: dict[str, Any], source: str) -> None:
    if options:
        raise RobustvitError(f"data source {source!r} has no option {next(iter(options))!r}")


__all__ = ["synthshapes", "folder", "npz", "cifar10", "cifar100", "imagenet", "MAX_CLASSES"]
