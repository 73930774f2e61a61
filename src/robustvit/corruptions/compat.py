"""A drop-in for the ``imagecorruptions`` package (bethgelab): ``corrupt_image`` and ``get_corruption_names``.

Like ``imagecorruptions.corrupt``, :func:`corrupt_image` takes one uint8 image (H, W, 3), (H, W, 1) or (H, W),
uses the ImageNet (224 px) parameters unscaled at any size (by default) and returns uint8 values truncated as
``np.uint8`` does. Unlike it, randomness is seeded (``seed``), and a grayscale input keeps its layout.
"""

from __future__ import annotations

import numpy as np
import torch

from robustvit.corruptions.engine import corrupt, list_corruptions
from robustvit.corruptions.jpeg import to_uint8
from robustvit.errors import RobustvitError

_SUBSETS = {"common": "benchmark", "validation": "extra", "all": "all", "noise": "noise", "blur": "blur",
            "weather": "weather", "digital": "digital"}


def get_corruption_names(subset: str = "common") -> list[str]:
    """``imagecorruptions.get_corruption_names``: subsets common, validation, all, noise, blur, weather, digital."""
    if subset not in _SUBSETS:
        raise RobustvitError(f"subset must be one of {', '.join(_SUBSETS)}, got {subset!r}")
    return list_corruptions(_SUBSETS[subset])


def corrupt_image(image: np.ndarray, corruption_name: str | None = None, severity: int = 1, *,
                  corruption_number: int = -1, seed: int | None = None, preset: str | None = "imagenet",
                  size_scaling: bool = False, device: str | torch.device = "cpu") -> np.ndarray:
    """Corrupt one uint8 image like ``imagecorruptions.corrupt(image, severity, corruption_name)``.

    >>> img = np.zeros((32, 32, 3), np.uint8)
    >>> corrupt_image(img, "brightness", 1).shape
    (32, 32, 3)
    """
    if not isinstance(image, np.ndarray):
        raise RobustvitError(f"image must be a numpy.ndarray, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise RobustvitError(f"image must be uint8, got {image.dtype}; convert with (x * 255).astype(np.uint8)")
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (1, 3)):
        raise RobustvitError(f"image must have shape (H, W), (H, W, 1) or (H, W, 3), got {image.shape}")
    if corruption_name is None:
        names = list_corruptions()
        if not isinstance(corruption_number, int) or not 0 <= corruption_number < len(names):
            raise RobustvitError(f"pass corruption_name, or corruption_number from 0 to {len(names) - 1}")
        corruption_name = names[corruption_number]
    layout = image.shape
    rgb = image if image.ndim == 3 and image.shape[2] == 3 else np.repeat(image.reshape(*image.shape[:2], 1), 3, 2)
    x = torch.from_numpy(np.ascontiguousarray(rgb)).to(device).permute(2, 0, 1)[None].float() / 255
    y = corrupt(x, corruption_name, severity, seed=seed, preset=preset, size_scaling=size_scaling)
    out = to_uint8(y[0], "floor").permute(1, 2, 0).cpu().numpy()
    if len(layout) == 2 or layout[2] == 1:
        gray = np.round(out.astype(np.float64) @ np.array([0.2989, 0.5870, 0.1140])).clip(0, 255).astype(np.uint8)
        return gray.reshape(layout)
    return out
