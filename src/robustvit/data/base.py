"""Data-set types shared by every source: images come out as float (3, H, W) in [0, 1] with an int label.

An unreadable image (a truncated, empty or non-image file, a symlink loop, an image over Pillow's pixel limit)
yields label ``-1`` and a zero image so that batches keep their shape; the evaluation runner drops and counts such
samples (``data.num_unreadable``). With ``strict=True`` it raises a one-line :class:`RobustvitError` instead.
"""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
import torch.nn.functional as F
from PIL import Image
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
        return _stack(_read_items(self.__getitem__, index), self.spec)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``index`` as they travel to the device (``robustvit.data.loader``): uint8 (n, 3, H, W) where the
        data set holds 8-bit images, so that ``to_float(read_batch(i)[0])`` equals ``get_batch(i)[0]`` bit for
        bit; float in [0, 1] where its images are intrinsically float (this default: ``get_batch``)."""
        return self.get_batch(index)


class BatchedImageDataset(ImageDataset):
    """A data set that reads whole batches: its own ``read_batch`` (uint8, which ``get_batch`` makes float) or
    ``get_batch``; one item is a batch of one."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.get_batch(torch.tensor([int(i)]))
        return x[0], int(y[0])

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.read_batch(index)
        return to_float(x), y


def _read_items(read: Any, index: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """``read(i)`` for every index: on :data:`READ_THREADS` threads in the main process, serially in a DataLoader
    worker (threads there lose to the GIL on small images: 32-px JPEGs read 1.5× slower on two threads)."""
    from torch.utils.data import get_worker_info
    ids = torch.as_tensor(index).long().reshape(-1).tolist()
    if not ids:
        raise RobustvitError("get_batch needs at least one index")
    threads = 1 if get_worker_info() is not None else min(READ_THREADS, len(ids))
    if threads == 1:
        return [read(i) for i in ids]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(read, ids))


def _stack_images(images: list[torch.Tensor], spec: str) -> torch.Tensor:
    """The images as one batch; a one-line error when their sizes differ."""
    shapes = {tuple(x.shape) for x in images}
    if len(shapes) > 1:
        raise RobustvitError(f"images of different sizes {sorted(shapes)[:2]} in one batch of {spec}; "
                             "give the data set a size (e.g. folder:/path,size=224 or --image-size)")
    return torch.stack(images)


def _stack(items: list[tuple[torch.Tensor, int]], spec: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _stack_images([x for x, _ in items], spec), torch.tensor([int(y) for _, y in items], dtype=torch.long)


class TensorImageDataset(ImageDataset):
    """In-memory images: uint8 (N, 3, H, W) (or float in [0, 1]) and labels (N,)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes: list[str], spec: str = "",
                 extra: dict[str, torch.Tensor] | None = None) -> None:
        if images.ndim != 4 or images.shape[1] != 3:
            raise RobustvitError(f"images must have shape (N, 3, H, W), got {tuple(images.shape)}")
        if len(images) != len(labels):
            raise RobustvitError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels, self.classes, self.spec = images, labels.long(), list(classes), spec
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

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The stored images (uint8, or float when stored as float) and labels."""
        return self.images[index], self.labels[index]


def to_float(images: torch.Tensor) -> torch.Tensor:
    return images.float().div_(255) if images.dtype == torch.uint8 else images.float()


@dataclass(frozen=True)
class Resize:
    """How images reach a model's input, as timm's evaluation transform (less its Normalize, which robustvit's models
    apply inside): the shorter side resized to ``floor(size / crop_pct)`` with ``interpolation`` (PIL, antialiased),
    then a centre crop ``size`` × ``size``; ``crop_pct=0.875`` at 224 px is Resize(256) + CenterCrop(224)."""

    size: int
    crop_pct: float = 0.875
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        if not 0 < self.crop_pct <= 1 or self.size < 1:
            raise RobustvitError(f"resize needs size >= 1 and 0 < crop_pct <= 1, got size={self.size}, "
                                 f"crop_pct={self.crop_pct}")
        if self.interpolation not in ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"):
            raise RobustvitError(f"unknown interpolation {self.interpolation!r}; use bilinear, bicubic, "
                                 "nearest, box, hamming or lanczos")

    def __call__(self, im: Image.Image) -> Image.Image:
        import torchvision.transforms.functional as TF
        mode = TF.InterpolationMode(self.interpolation)
        im = TF.resize(im, math.floor(self.size / self.crop_pct), interpolation=mode)
        return TF.center_crop(im, [self.size, self.size])

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        """In-memory images (N, 3, H, W) of another size: resized whole to size × size (no crop: a CIFAR
        image is already the object), antialiased, in the same interpolation (bilinear for box/hamming)."""
        if tuple(x.shape[-2:]) == (self.size, self.size):
            return x
        mode = self.interpolation if self.interpolation in ("nearest", "bicubic") else "bilinear"
        y = F.interpolate(x, size=(self.size, self.size), mode=mode,
                          **({} if mode == "nearest" else {"align_corners": False, "antialias": True}))
        return y.clamp_(0, 1)


#: Pillow modes of 16-bit (and 32-bit integer) grey images: scaled to 8 bits (``v / 257``), not clipped at 255.
WIDE_GREY_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


class UnreadableImage(ValueError):
    """An image file that cannot be used: truncated, not an image, or larger than Pillow's pixel limit."""


def check_pixel_limit(im: Image.Image, path: str | Path) -> None:
    """Refuse an image over ``PIL.Image.MAX_IMAGE_PIXELS`` (a possible decompression bomb) before decoding it;
    ``MAX_IMAGE_PIXELS = None`` lifts the limit."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit and im.width * im.height > limit:
        raise UnreadableImage(f"{im.width}x{im.height} pixels exceed Pillow's limit of {limit} "
                              "(PIL.Image.MAX_IMAGE_PIXELS; a possible decompression bomb)")


def to_rgb(im: Image.Image) -> Image.Image:
    """Any Pillow image as 8-bit RGB: 16-bit grey scaled to 8 bits (Pillow's own conversion clips it, turning it
    white), palette images with transparency through RGBA (same colours, without Pillow's warning), CMYK, grey,
    1-bit and alpha modes by Pillow's conversion (alpha dropped, as torchvision's ImageFolder loader does)."""
    import numpy as np
    if im.mode in WIDE_GREY_MODES:
        a = np.asarray(im, dtype=np.float64)
        im = Image.fromarray(np.clip(np.rint(a / 257.0), 0, 255).astype(np.uint8), "L")
    elif im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    return im if im.mode == "RGB" else im.convert("RGB")


def load_image(path: str | Path, resize: Resize | None = None) -> torch.Tensor:
    """An image file as float RGB (3, H, W) in [0, 1], brought to a model's input by ``resize``; images over
    Pillow's pixel limit raise :class:`UnreadableImage` before decoding (modes: :func:`to_rgb`)."""
    return to_float(load_image_uint8(path, resize))


def load_image_uint8(path: str | Path | BinaryIO, resize: Resize | None = None) -> torch.Tensor:
    """:func:`load_image` before its division by 255: uint8 RGB (3, H, W) (Pillow resizes and crops in 8 bits, so
    ``load_image == to_float(load_image_uint8)`` exactly). ``path`` may be an open binary file (bytes read already)."""
    import torchvision.transforms.functional as TF
    with Image.open(path) as im:
        check_pixel_limit(im, path if isinstance(path, (str, Path)) else "<bytes>")
        im = to_rgb(im)
        return TF.pil_to_tensor(im if resize is None else resize(im))


def _reason(e: BaseException) -> str:
    """``Type: first line of the message`` (160 characters at most)."""
    text = str(e).splitlines()[0][:160] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class FileImageDataset(ImageDataset):
    """Images read from files on demand (ImageFolder-style lists of (path, label))."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], spec: str = "",
                 resize: Resize | None = None, strict: bool = False) -> None:
        self.samples, self.classes, self.spec, self.resize, self.strict = samples, list(classes), spec, resize, strict

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, label = self.read_item(i)
        return to_float(x), label

    def read_item(self, i: int, read: Any = load_image_uint8) -> tuple[torch.Tensor, int]:
        """Image ``i`` as uint8 (3, H, W) and its label, decoded by ``read(path, resize)``; an unreadable file gives
        a zero image and :data:`UNREADABLE` (``strict``: a one-line error)."""
        path, label = self.samples[i]
        try:
            return read(path, self.resize), label
        except Exception as e:  # noqa: BLE001  truncated, empty, not an image, a bomb, a symlink loop, …
            return self.unreadable(path, e), UNREADABLE

    def unreadable(self, path: str, e: BaseException) -> torch.Tensor:
        """What an unreadable file gives: a one-line error with ``strict``, else a warning and a zero uint8 image."""
        if self.strict:
            raise RobustvitError(f"cannot read image {path} ({_reason(e)}); remove or replace it, "
                                 "or run without --strict to skip unreadable files") from None
        warnings.warn(f"skipping unreadable image {path} ({_reason(e)})", stacklevel=3)
        side = self.resize.size if self.resize is not None else 32
        return torch.zeros(3, side, side, dtype=torch.uint8)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images (files decoded on a few threads; one after the other in a loader worker) and labels."""
        return _stack(_read_items(self.read_item, index), self.spec)

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.read_batch(index)
        return to_float(x), y


class ResizedDataset(ImageDataset):
    """Another data set's images resized whole to a model's input size on reading (:meth:`Resize.batch`):
    in-memory images (CIFAR, npz) evaluated with a model of another input size."""

    def __init__(self, ds: ImageDataset, resize: Resize) -> None:
        self.ds, self.resize, self.classes, self.spec = ds, resize, ds.classes, ds.spec

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.ds[i]
        return self.resize.batch(x[None])[0], y

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.ds.get_batch(index)
        return self.resize.batch(x), y

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 as stored when no resizing is needed; else resized in float (antialiased: not 8-bit values)."""
        x, y = self.ds.read_batch(index)
        if tuple(x.shape[-2:]) == (self.resize.size, self.resize.size):
            return x, y
        return self.resize.batch(to_float(x)), y
