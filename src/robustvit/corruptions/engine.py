"""The corruption engine: ``corrupt`` and ``list_corruptions`` (Hendrycks & Dietterich, ICLR 2019,
arXiv:1903.12261), batched in PyTorch on the input's device.

Random corruptions draw every random number for the whole batch from one generator, *then* apply them: the
same seed, batch and device give the same output bit for bit; a deterministic corruption gives each image
what it gets on its own (``corrupt(x)[i] == corrupt(x[i:i+1])[0]``); a random one draws an image's noise by
its position in the batch, so to replay one image, replay its batch with the same seed.
"""

from __future__ import annotations

import torch

from robustvit.corruptions.jpeg import jpeg_roundtrip
from robustvit.corruptions.params import check_name, check_severity, corruption_groups, resolve_preset
from robustvit.corruptions.spec import CORRUPTIONS
from robustvit.errors import RobustvitError, unknown_name
from robustvit.utils import check_images, default_generator, make_generator


def list_corruptions(group: str | None = None) -> list[str]:
    """Corruption names, benchmark ones first. ``group``: noise, blur, weather, digital, extra, benchmark,
    all (every group but imagenet_c_bar), imagenet_c_bar (ImageNet-C̄), the group of a corruption registered
    with :func:`register_corruption`, or ``variants`` (``elastic_transform@imagecorruptions``).

    >>> list_corruptions("noise")
    ['gaussian_noise', 'shot_noise', 'impulse_noise']
    """
    group = "all" if group is None else group
    if group == "variants":
        return [s.name for s in CORRUPTIONS.values() if s.variant_of is not None]
    groups = corruption_groups()
    if group not in groups:
        raise unknown_name("corruption group", str(group), [*groups, "variants"])
    return list(groups[group])


def is_random(name: str) -> bool:
    """Whether corruption ``name`` draws random numbers (deterministic ones ignore the seed)."""
    return CORRUPTIONS.get(check_name(name)).random


def _check_quality(q: int | None) -> int | None:
    if q is None:
        return None
    if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
        raise RobustvitError(f"jpeg_quality must be an integer from 1 to 100 or None, got {q!r}")
    return q


def corrupt(x: torch.Tensor, name: str, severity: int, *, seed: int | None = None,
            generator: torch.Generator | None = None, preset: str | None = None,
            jpeg_quality: int | None = None, size_scaling: bool = True) -> torch.Tensor:
    """Apply common corruption ``name`` at ``severity`` (1–5) to a batch ``x`` (N, 3, H, W) in [0, 1].

    Args:
        x: float images (N, 3, H, W) in [0, 1], on any device.
        name: one of :func:`list_corruptions` (e.g. ``"gaussian_noise"``).
        severity: 1 (mild) to 5 (strong).
        seed: seeds a new generator on ``x``'s device when ``generator`` is None.
        generator: the source of every random number (its device may differ from ``x``'s). With neither
            ``seed`` nor ``generator``, torch's global generator is used (``torch.manual_seed`` governs it),
            so successive calls draw different noise.
        preset: ``"imagenet"`` (224-px parameters) or ``"cifar"`` (32-px); default by size:
            ``cifar`` when min(H, W) ≤ 64, else ``imagenet``. Spatial parameters are scaled by
            min(H, W) / preset size (see :func:`corruption_params`).
        jpeg_quality: if given, truncate to uint8 and JPEG round trip at this quality afterwards, as the
            released ImageNet-C files (quality 85).
        size_scaling: False uses the preset's parameters unscaled at any size (what ``imagecorruptions``
            does with its ImageNet parameters).

    Returns:
        the corrupted images: same shape, dtype and device, values in [0, 1].

    Shape:
        - Input: :math:`(N, 3, H, W)`.
        - Output: :math:`(N, 3, H, W)`.

    Example:
        >>> x = torch.rand(4, 3, 64, 64)
        >>> corrupt(x, "fog", 3, seed=0).shape
        torch.Size([4, 3, 64, 64])
    """
    check_name(name)
    check_severity(severity)
    spec = CORRUPTIONS.get(name)
    check_images(x, name="x", check_range=not spec.checks_range)
    quality = _check_quality(jpeg_quality)
    n, _, h, w = x.shape
    preset = resolve_preset(preset, h, w)
    if n == 0:
        return x.clone()
    params = spec.params(severity, preset, size=(h, w) if size_scaling else None)
    g = generator if generator is not None else (default_generator(x.device) if seed is None
                                                   else make_generator(seed, x.device))
    work = x if x.dtype in (torch.float32, torch.float64) else x.float()
    with torch.no_grad():
        draw = spec.sample(n, (h, w), params, g, device=x.device, dtype=work.dtype)
        y = spec.apply(work, params, draw)
        if quality is not None:     # the released ImageNet-C files: uint8 then JPEG quality 85
            y = jpeg_roundtrip(y, quality, rounding="floor")
    return y.to(x.dtype)
