"""Data-set types shared by every source: images come out as float (3, H, W) in [0, 1] with an int label.

An unreadable image (corrupt file) yields label ``-1`` and a zero image so that batches keep their shape;
the evaluation runner drops and counts such samples. With ``strict=True`` it raises instead.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import warnings
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from robustvit.errors import RobustvitError

UNREADABLE = -1


#: Threads decoding image files in :meth:`ImageDataset.get_batch`.
READ_THREADS = 8


class ImageDataset(Dataset):
    """Base: ``ds[i] -> (float image (3, H, W) in [0, 1], int label)``; ``classes``, ``spec``, ``info()``."""

    spec: str = ""
    classes: list[str]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def info(self) -> dict[str, Any]:
        return {"spec": self.spec, "num_images": len(self), "num_classes": self.num_classes}

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``index`` as (float (n, 3, H, W) in [0, 1], long labels (n,)). This default reads the items
        on a few threads (file decoding releases the GIL); in-memory data sets override it with a gather."""
        ids = torch.as_tensor(index).long().reshape(-1).tolist()
        if not ids:
            raise RobustvitError("get_batch needs at least one index")
        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(ids))) as pool:
            items = list(pool.map(self.__getitem__, ids))
        shapes = {tuple(it[0].shape) for it in items}
        if len(shapes) > 1:
            raise RobustvitError(f"images of different sizes {sorted(shapes)[:2]} in one batch of {self.spec}; "
                                 "give the data set a size (e.g. folder:/path,size=224 or --image-size)")
        return torch.stack([it[0] for it in items]), torch.tensor([int(it[1]) for it in items], dtype=torch.long)


class TensorImageDataset(ImageDataset):
    """In-memory images: uint8 (N, 3, H, W) (or float in [0, 1]) and labels (N,)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes: list[str], spec: str = "",
                 extra: dict[str, torch.Tensor] | None = None) -> None:
        if images.ndim != 4 or images.shape[1] != 3:
            raise RobustvitError(f"images must have shape (N, 3, H, W), got {tuple(images.shape)}")
        if len(images) != len(labels):
            raise RobustvitError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, labels.long()
        self.classes, self.spec = list(classes), spec
        self.extra = extra or {}
        if len(labels) and (int(self.labels.max()) >= len(classes) or int(self.labels.min()) < 0):
            raise RobustvitError(f"labels must lie in [0, {len(classes) - 1}] for {len(classes)} classes, "
                                 f"got [{int(self.labels.min())}, {int(self.labels.max())}]")

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return to_float(self.images[i]), int(self.labels[i])

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fast path for in-memory data: a whole batch without a DataLoader."""
        return to_float(self.images[index]), self.labels[index]


def to_float(images: torch.Tensor) -> torch.Tensor:
    return images.float().div_(255) if images.dtype == torch.uint8 else images.float()


def load_image(path: str | Path, size: int | None, crop_pct: float = 0.875) -> torch.Tensor:
    """Read an RGB image as float (3, H, W) in [0, 1]; with ``size``: resize the shorter side to
    ``size / crop_pct`` (bilinear) and centre-crop ``size`` (the ImageNet evaluation convention).
    ``crop_pct=1`` resizes the whole image to size×size without cropping (Bhojanapalli et al.)."""
    import torchvision.transforms.functional as TF

    with Image.open(path) as im:
        im = im.convert("RGB")
        x = TF.pil_to_tensor(im)
    if size is not None:
        if crop_pct >= 1.0:
            x = TF.resize(x, [size, size], antialias=True)
        elif min(x.shape[-2:]) != size or max(x.shape[-2:]) != size:
            x = TF.resize(x, int(size / crop_pct), antialias=True)
            x = TF.center_crop(x, [size, size])
    return x.float().div_(255)


class FileImageDataset(ImageDataset):
    """Images read from files on demand (ImageFolder-style lists of (path, label))."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], spec: str = "",
                 size: int | None = None, crop_pct: float = 0.875, strict: bool = False) -> None:
        self.samples, self.classes, self.spec = samples, list(classes), spec
        self.size, self.crop_pct, self.strict = size, crop_pct, strict
        self.bad_files: list[str] = []

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[i]
        try:
            return load_image(path, self.size, self.crop_pct), label
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as e:
            if self.strict:
                raise RobustvitError(f"cannot read image {path} ({type(e).__name__}); remove or replace it, "
                                     "or run without --strict to skip unreadable files") from None
            warnings.warn(f"skipping unreadable image {path}: {type(e).__name__}", stacklevel=2)
            s = self.size or 32
            return torch.zeros(3, s, s), UNREADABLE
