"""Patch occlusion: replace a fraction ρ of an image's patches with uniform noise (or zeros).

The random patch corruption of AFAT / RSPC (Guo et al., "Improving Robustness of Vision Transformers by Reducing
Sensitivity to Patch Corruptions", CVPR 2023, arXiv:2306.07881; code guoyongcs/RSPC): ``round(ρ·P)`` of an
image's ``P`` patches (the model's patch grid) are chosen uniformly at random and replaced by noise δ,
``x̂ = M·x + (1 − M)·δ`` (M = 1 on kept patches); AFAT Fig. 1 plots accuracy for ρ from 0.1 to 0.5.

The noise (:func:`occlusion_noise`, shared by ``afat`` training, the ``patch_occlusion`` suite and the
``attention_stability`` analysis): RSPC draws δ ~ U[0, 1) on the model's *normalised* input, so in pixel space
δ = u·std + mean (``noise_space="normalized"``, the default); ``"pixel"`` draws U[0, 1) in pixel space (the
same for a model without normalisation). Mode ``"drop"`` zeroes the patch pixels instead, for ViTs and CNNs
alike: the "patch drop" of Naseer et al. ("Intriguing Properties of Vision Transformers", arXiv:2105.10497),
who also zero pixels; removing tokens is not what AFAT measures and would make ViTs and CNNs incomparable.

Sampling (:func:`sample_patch_masks`, all images × all draws from one ``rand``/``topk``) is separate from
application (:func:`apply_patch_masks`); :func:`occlude_patches` does both. The patch grid is a patch model's
``spec.patch_size`` (:func:`occlusion_patch_size`), for CNNs 16 px at ≥ 224 px, else ``image_size // 8``.

>>> x = torch.rand(8, 3, 32, 32)
>>> xo, m = occlude_patches(x, 0.25, 4, num_masks=3, generator=torch.Generator().manual_seed(0))
>>> xo.shape, m.shape, int(m[0, 0].sum())        # 16 of the 64 patches of every image
(torch.Size([3, 8, 3, 32, 32]), torch.Size([3, 8, 8, 8]), 16)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robustvit.errors import RobustvitError

OCCLUSION_MODES = ("noise", "drop")
#: Where the occlusion noise is U[0, 1): the model's normalised input (RSPC) or pixel space.
NOISE_SPACES = ("normalized", "pixel")


def model_normalization(model: nn.Module | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` of a robustvit model's input normalisation (``spec``); (0, 1) for a bare module."""
    spec = getattr(model, "spec", None)
    if spec is None:
        return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return tuple(float(v) for v in spec.mean), tuple(float(v) for v in spec.std)


def occlusion_noise(shape: tuple[int, ...], *, noise_space: str = "normalized",
                    mean: tuple[float, ...] = (0.0, 0.0, 0.0), std: tuple[float, ...] = (1.0, 1.0, 1.0),
                    generator: torch.Generator | None = None, device: torch.device | str | None = None,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Occlusion fill of ``shape`` (…, 3, H, W) in pixel space: U[0, 1) in the model's normalised input space
    (u·std + mean, ``"normalized"``, as RSPC) or in pixel space (``"pixel"``); one ``rand`` of ``generator``."""
    if noise_space not in NOISE_SPACES:
        raise RobustvitError(f"unknown noise space {noise_space!r}; choose from {', '.join(NOISE_SPACES)}")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    gdev = generator.device if generator is not None else dev
    u = torch.rand(shape, generator=generator, device=gdev, dtype=dtype).to(dev)
    if noise_space == "pixel":
        return u
    m = torch.tensor(mean, device=dev, dtype=dtype).view(-1, 1, 1)
    s = torch.tensor(std, device=dev, dtype=dtype).view(-1, 1, 1)
    return u * s + m


def num_occluded(rho: float, num_patches: int) -> int:
    """``round(ρ·P)`` with halves rounded up (not Python's banker's rounding)."""
    if not 0.0 <= rho <= 1.0:
        raise RobustvitError(f"the occluded fraction rho must be in [0, 1], got {rho}")
    return min(num_patches, int(math.floor(rho * num_patches + 0.5)))


def default_patch_size(image_size: int) -> int:
    """Patch size for models without patches: 16 px at ≥ 224 px, else ``max(1, image_size // 8)``."""
    return 16 if image_size >= 224 else max(1, image_size // 8)


def occlusion_patch_size(model: nn.Module, image_size: int | None = None, patch_size: int | None = None) -> int:
    """The patch size to occlude for ``model``: an explicit ``patch_size``, else the model's
    ``spec.patch_size``, else :func:`default_patch_size` of its input size."""
    if patch_size is not None:
        return int(patch_size)
    spec = getattr(model, "spec", None)
    if spec is not None and spec.patch_size:
        return int(spec.patch_size)
    size = image_size or (spec.image_size if spec is not None else 224)
    return default_patch_size(int(size))


def _grid(h: int, w: int, patch_size: int) -> tuple[int, int]:
    if patch_size < 1 or h % patch_size or w % patch_size:
        raise RobustvitError(f"images of {h}×{w} px cannot be cut into {patch_size}-px patches; "
                             "give a patch size that divides the image size")
    return h // patch_size, w // patch_size


def sample_patch_masks(num_images: int, grid: tuple[int, int], rho: float, *, num_masks: int = 1,
                       generator: torch.Generator | None = None, device: torch.device | str | None = None
                       ) -> torch.Tensor:
    """Bool masks (num_masks, num_images, gh, gw), True = occluded; exactly ``round(ρ·P)`` True per
    image and mask, the set chosen uniformly at random (the ``topk`` of i.i.d. uniform scores)."""
    if num_masks < 1:
        raise RobustvitError(f"num_masks must be >= 1, got {num_masks}")
    gh, gw = grid
    p = gh * gw
    m = num_occluded(rho, p)
    dev = device if device is not None else (generator.device if generator is not None else "cpu")
    scores = torch.rand(num_masks, num_images, p, generator=generator, device=dev)
    mask = torch.zeros(num_masks, num_images, p, dtype=torch.bool, device=dev)
    if m:
        mask.scatter_(2, scores.topk(m, dim=2).indices, True)
    return mask.view(num_masks, num_images, gh, gw)


def apply_patch_masks(x: torch.Tensor, masks: torch.Tensor, patch_size: int, *, mode: str = "noise",
                      generator: torch.Generator | None = None, noise_space: str = "normalized",
                      mean: tuple[float, ...] = (0.0, 0.0, 0.0), std: tuple[float, ...] = (1.0, 1.0, 1.0)
                      ) -> torch.Tensor:
    """Occlude ``x`` (N, 3, H, W) in [0, 1] with ``masks`` (K, N, gh, gw) → (K, N, 3, H, W); the noise as
    :func:`occlusion_noise` (``mean``/``std``: the model's normalisation, :func:`model_normalization`)."""
    if mode not in OCCLUSION_MODES:
        raise RobustvitError(f"unknown occlusion mode {mode!r}; choose from {', '.join(OCCLUSION_MODES)}")
    if x.ndim != 4:
        raise RobustvitError(f"images must have shape (N, 3, H, W), got {tuple(x.shape)}")
    gh, gw = _grid(x.shape[-2], x.shape[-1], patch_size)
    if masks.ndim != 4 or tuple(masks.shape[1:]) != (x.shape[0], gh, gw):
        raise RobustvitError(f"masks must have shape (K, {x.shape[0]}, {gh}, {gw}), got {tuple(masks.shape)}")
    pix = masks.to(x.device).repeat_interleave(patch_size, 2).repeat_interleave(patch_size, 3)[:, :, None]
    if mode == "noise":
        fill = occlusion_noise((masks.shape[0], *x.shape), noise_space=noise_space, mean=mean, std=std,
                               generator=generator, device=x.device, dtype=x.dtype)
    else:
        fill = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(pix, fill, x.unsqueeze(0))


def occlude_patches(x: torch.Tensor, rho: float, patch_size: int, *, mode: str = "noise",
                    num_masks: int | None = None, generator: torch.Generator | None = None,
                    noise_space: str = "normalized", mean: tuple[float, ...] = (0.0, 0.0, 0.0),
                    std: tuple[float, ...] = (1.0, 1.0, 1.0)) -> tuple[torch.Tensor, torch.Tensor]:
    """Occlude ``round(ρ·P)`` random patches of every image (AFAT, arXiv:2306.07881).

    ``x``: float (N, 3, H, W) in [0, 1]; ``patch_size`` must divide H and W (a model's:
    :func:`occlusion_patch_size`); ``noise_space``, ``mean``, ``std``: see :func:`occlusion_noise` (pass the
    model's :func:`model_normalization`). Returns ``(images, masks)``: with ``num_masks=None`` images
    (N, 3, H, W) and bool masks (N, gh, gw); with an int K, K independent masks per image: images
    (K, N, 3, H, W) and masks (K, N, gh, gw). True in a mask = occluded.
    """
    grid = _grid(x.shape[-2], x.shape[-1], patch_size)
    k = 1 if num_masks is None else int(num_masks)
    masks = sample_patch_masks(x.shape[0], grid, rho, num_masks=k, generator=generator,
                               device=generator.device if generator is not None else x.device)
    out = apply_patch_masks(x, masks, patch_size, mode=mode, generator=generator, noise_space=noise_space,
                            mean=mean, std=std)
    masks = masks.to(x.device)
    return (out[0], masks[0]) if num_masks is None else (out, masks)


__all__ = ["NOISE_SPACES", "OCCLUSION_MODES", "apply_patch_masks", "default_patch_size", "model_normalization",
           "num_occluded", "occlude_patches", "occlusion_noise", "occlusion_patch_size", "sample_patch_masks"]
