"""ImageNet-P / CIFAR-10-P perturbation sequences, batched in PyTorch.

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261), section 4 / ImageNet-P: each clean image becomes a sequence of T frames (mostly
31) whose perturbation changes a little from frame to frame; a stable model keeps its prediction along it
(:mod:`robustvit.metrics.perturbation`). Each perturbation is one registered
:class:`~robustvit.corruptions.perturbation_spec.Perturbation` (the fourteen built-in ones are in
:mod:`robustvit.corruptions.sequences`). Frames are computed batched on the input's device;
:func:`iter_perturbation_frames` yields them in blocks, so that N × 31 frames at 224 px need not fit in memory.

>>> import torch
>>> x = torch.rand(4, 3, 32, 32)
>>> perturbation_sequence(x, "rotate", seed=0).shape
torch.Size([4, 31, 3, 32, 32])
>>> list_perturbations("*blur")
['motion_blur', 'zoom_blur', 'gaussian_blur']
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

import torch

from robustvit.corruptions.frame_warps import affine_frames as _affine_frames
from robustvit.corruptions.frame_warps import tilt_homography
from robustvit.corruptions.params import resolve_preset
from robustvit.corruptions.perturbation_spec import (PERTURBATIONS, Perturbation, PerturbationOptions,
                                                     PerturbationParams, perturbation, register_perturbation)
from robustvit.errors import RobustvitError, unknown_name
from robustvit.options import parse_options, parse_spec
from robustvit.utils import make_generator


def _groups() -> dict[str, tuple[str, ...]]:
    """The groups over the registered perturbations, in registration order."""
    specs = PERTURBATIONS.values()
    return {"test": tuple(s.name for s in specs if s.split == "test"),
            "validation": tuple(s.name for s in specs if s.split == "validation"),
            "all": tuple(s.name for s in specs), "noise": tuple(s.name for s in specs if s.noise),
            "geometric": tuple(s.name for s in specs if s.family == "geometric")}


#: The built-in groups: ``test`` (the 10 of mFR / mT5D), ``validation`` (4), ``all``, ``noise``, ``geometric``.
PERTURBATION_GROUPS: dict[str, tuple[str, ...]] = _groups()
#: The 10 test perturbations of ImageNet-P, over which mFR / mT5D average.
TEST_PERTURBATIONS: tuple[str, ...] = PERTURBATION_GROUPS["test"]
#: CIFAR-10-P's test set: the reference evaluation averages over spatter where ImageNet-P has snow.
CIFAR_P_TEST_PERTURBATIONS: tuple[str, ...] = tuple("spatter" if n == "snow" else n for n in TEST_PERTURBATIONS)
#: The 4 validation perturbations.
VALIDATION_PERTURBATIONS: tuple[str, ...] = PERTURBATION_GROUPS["validation"]
#: Sequences whose frames are compared with frame 0 (the reference tests ``'noise' in name``).
NOISE_PERTURBATIONS: frozenset[str] = frozenset(PERTURBATION_GROUPS["noise"])
#: Perturbations that act on the uncropped image when ``crop`` is given (the reference warps the
#: Resize(256) image before CenterCrop(224)); the others crop first.
GEOMETRIC_ON_FULL: frozenset[str] = frozenset(s.name for s in PERTURBATIONS.values() if s.warps_full)

#: Default pixel budget of one block of frames (N · t · H · W); about 400 MB of float32 frames.
DEFAULT_BLOCK_PIXELS = 1 << 25


def list_perturbations(pattern: str | None = None) -> list[str]:
    """Perturbation names, in ImageNet-P's order: all of them (None), a group (``test``, ``validation``,
    ``all``, ``noise``, ``geometric``), or those matching a shell-style pattern such as ``"*noise"``."""
    groups = _groups()
    pattern = "all" if pattern is None else pattern
    if pattern in groups:
        return list(groups[pattern])
    if any(c in pattern for c in "*?["):
        return [n for n in groups["all"] if fnmatch.fnmatch(n, pattern)]
    if pattern in PERTURBATIONS:
        return [PERTURBATIONS.canonical(pattern)]
    raise unknown_name("perturbation group", str(pattern), list(groups) + list(groups["all"]),
                       hint="give a group, a name or a pattern such as *noise")


def get_perturbation(name: str) -> Perturbation:
    """The registered spec of ``name`` (one-line error with close matches when unknown)."""
    if not isinstance(name, str):
        raise RobustvitError(f"a perturbation name must be a string, got {type(name).__name__}")
    return PERTURBATIONS.get(name)


def parse_perturbation(spec: str) -> tuple[str, PerturbationOptions]:
    """``"gaussian_noise:difficulty=2"`` → the canonical name and its typed options (one-line errors)."""
    name, raw = parse_spec(spec, "perturbation")
    canonical = get_perturbation(name).name
    return canonical, parse_options(PerturbationOptions, raw, what=f"perturbation {canonical!r}")


def is_noise(name: str) -> bool:
    """Whether ``name`` is a noise sequence (frames compared with frame 0, not consecutively)."""
    return name in PERTURBATIONS and PERTURBATIONS.get(name).noise


def num_frames(name: str, preset: str = "imagenet") -> int:
    """Frames T of a sequence (31; translate 41 for ImageNet-P, 16 for CIFAR-P; CIFAR-P motion_blur 21)."""
    return get_perturbation(name).frames(preset)


def perturbation_params(name: str, preset: str = "imagenet", size: int | None = None) -> PerturbationParams:
    """The parameters used for ``name`` with ``preset``, lengths scaled by k = ``size`` / native size."""
    return get_perturbation(name).params(preset, size)


def _check_images(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != 3 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise RobustvitError(f"perturbation sequences need float images (N, 3, H, W) in [0, 1], got {shape}")


def _center_crop(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    h, w = x.shape[-2:]
    top, left = int(round((h - size[0]) / 2.0)), int(round((w - size[1]) / 2.0))
    return x[..., top:top + size[0], left:left + size[1]]


def iter_perturbation_frames(x: torch.Tensor, name: str, *, difficulty: int = 1, seed: int | None = None,
                             generator: torch.Generator | None = None, preset: str | None = None,
                             crop: int | tuple[int, int] | None = None, block_frames: int | None = None,
                             block_pixels: int = DEFAULT_BLOCK_PIXELS) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(first_frame, frames)`` blocks of the sequence, ``frames`` float (N, t, 3, H, W) in [0, 1].

    ``block_frames`` frames per block (default: as many as fit in ``block_pixels`` = N·t·H·W). The
    concatenated blocks equal :func:`perturbation_sequence` for any block size (random draws are made
    one frame at a time, in frame order). Arguments as in :func:`perturbation_sequence`.
    """
    _check_images(x)
    spec = get_perturbation(name)
    out_hw = tuple(x.shape[-2:]) if crop is None else ((crop, crop) if isinstance(crop, int) else tuple(crop))
    if out_hw[0] > x.shape[-2] or out_hw[1] > x.shape[-1] or min(out_hw) < 1:
        raise RobustvitError(f"crop {out_hw} must fit inside the {tuple(x.shape[-2:])} images")
    src = x if spec.warps_full else _center_crop(x, out_hw)
    preset = resolve_preset(preset, *out_hw)
    params = spec.params(preset, size=min(out_hw))
    values = params.at(difficulty)
    t_all = params.frames
    if block_frames is None:
        block_frames = max(1, int(block_pixels) // max(1, x.shape[0] * src.shape[-2] * src.shape[-1]))
    block_frames = max(1, min(int(block_frames), t_all))
    compute = src.float() if src.dtype in (torch.float16, torch.bfloat16) else src
    blocks = [list(range(s, min(t_all, s + block_frames))) for s in range(0, t_all, block_frames)]
    for idx, frames in zip(blocks, spec.blocks(compute, values, blocks, make_generator(seed, x.device, generator))):
        if spec.warps_full and crop is not None:
            frames = _center_crop(frames, out_hw)
        yield idx[0], frames.to(x.dtype).contiguous()


def perturbation_sequence(x: torch.Tensor, name: str, *, difficulty: int = 1, seed: int | None = None,
                          generator: torch.Generator | None = None, preset: str | None = None,
                          crop: int | tuple[int, int] | None = None) -> torch.Tensor:
    """The perturbation sequence of every image: float (N, T, 3, H, W) in [0, 1] on ``x``'s device.

    Args:
        x: float images (N, 3, H, W) in [0, 1].
        name: one of :func:`list_perturbations`.
        difficulty: 1, 2 or 3. For the noise sequences it selects the noise level (the ``_2``/``_3``
            folders of ImageNet-P); for the others the frames are the same and the metric uses every
            ``difficulty``-th frame (:func:`robustvit.metrics.perturbation.perturbation_stats`).
        seed / generator: every random number comes from ``generator`` (any device), or from a new
            generator on ``x``'s device seeded with ``seed`` (0 if both are None).
        preset: ``"imagenet"`` (224-px parameters) or ``"cifar"`` (32-px); default ``cifar`` when the
            output's shorter side is ≤ 64. Lengths in pixels (blur radii/σ, snow flake zoom, translation)
            are multiplied by k = size / native size, as in :func:`robustvit.corruptions.corrupt`.
        crop: output size; geometric sequences (translate, rotate, tilt, scale, shear, zoom_blur) warp
            the whole input and then centre-crop — ImageNet-P warps the Resize(256) image before
            CenterCrop(224) — the others crop first. ``None``: no crop.

    >>> perturbation_sequence(torch.rand(2, 3, 32, 32), "translate").shape   # CIFAR-P: 16 frames
    torch.Size([2, 16, 3, 32, 32])
    """
    blocks = [f for _, f in iter_perturbation_frames(x, name, difficulty=difficulty, seed=seed,
                                                       generator=generator, preset=preset, crop=crop)]
    return torch.cat(blocks, 1)


__all__ = ["TEST_PERTURBATIONS", "CIFAR_P_TEST_PERTURBATIONS", "VALIDATION_PERTURBATIONS", "PERTURBATION_GROUPS",
           "NOISE_PERTURBATIONS", "GEOMETRIC_ON_FULL", "DEFAULT_BLOCK_PIXELS", "PERTURBATIONS", "Perturbation",
           "PerturbationOptions", "PerturbationParams", "get_perturbation", "list_perturbations", "is_noise",
           "num_frames", "parse_perturbation", "perturbation", "perturbation_params", "perturbation_sequence",
           "iter_perturbation_frames", "register_perturbation", "tilt_homography", "_affine_frames"]
