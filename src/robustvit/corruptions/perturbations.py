"""ImageNet-P / CIFAR-10-P perturbation sequences, batched in PyTorch.

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261), section 4 / ImageNet-P. Each clean image becomes a sequence of T frames
(T = 31 for most perturbations) whose perturbation changes a little from frame to frame; a stable model
keeps its prediction along the sequence (see :mod:`robustvit.metrics.perturbation`).

The frames follow the reference generators ``make_imagenet_p.py`` (preset ``imagenet``, 224 px) and
``make_cifar_p.py`` (preset ``cifar``, 32 px) of ``hendrycks/robustness``:

* noise (gaussian_noise, shot_noise, speckle_noise): frame 0 is the clean image, frames 1…30 independent
  draws at one fixed level; ``difficulty`` 2 and 3 pick the stronger levels of the ``_2``/``_3`` folders;
* motion_blur (angle sweep), zoom_blur (running average of zooms), snow (one flake layer blurred along a
  sweeping angle), brightness (HSV value shift), gaussian_blur and spatter (validation);
* geometric: translate, rotate, tilt (3-D perspective), scale, shear, all as batched ``grid_sample`` warps
  with black (zero) fill, like PIL's ``affine`` / OpenCV's ``warpPerspective``.

All frames of all images are computed batched on the input's device; :func:`iter_perturbation_frames`
yields them in blocks of frames so that N × 31 frames at 224 px need not fit in memory at once.

>>> import torch
>>> x = torch.rand(4, 3, 32, 32)
>>> perturbation_sequence(x, "rotate", seed=0).shape
torch.Size([4, 31, 3, 32, 32])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from robustvit.corruptions.color import rgb_to_gray
from robustvit.corruptions.filters import gaussian_filter
from robustvit.corruptions.geometry import clipped_zoom, motion_blur
from robustvit.corruptions.params import PRESET_SIZES, resolve_preset
from robustvit.corruptions.sampling import poisson, randn
from robustvit.corruptions.spatter import water_layer
from robustvit.errors import RobustvitError, unknown_name

#: The 10 test perturbations of ImageNet-P, over which mFR / mT5D average.
TEST_PERTURBATIONS: tuple[str, ...] = ("gaussian_noise", "shot_noise", "motion_blur", "zoom_blur", "snow",
                                       "brightness", "translate", "rotate", "tilt", "scale")
#: CIFAR-10-P's test set: the reference evaluation averages over spatter where ImageNet-P has snow.
CIFAR_P_TEST_PERTURBATIONS: tuple[str, ...] = tuple("spatter" if n == "snow" else n for n in TEST_PERTURBATIONS)
#: The 4 validation perturbations.
VALIDATION_PERTURBATIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "shear")
PERTURBATION_GROUPS: dict[str, tuple[str, ...]] = {
    "test": TEST_PERTURBATIONS,
    "validation": VALIDATION_PERTURBATIONS,
    "all": TEST_PERTURBATIONS + VALIDATION_PERTURBATIONS,
    "noise": ("gaussian_noise", "shot_noise", "speckle_noise"),
    "geometric": ("translate", "rotate", "tilt", "scale", "shear"),
}
#: Sequences whose frames are compared with frame 0 (the reference tests ``'noise' in name``).
NOISE_PERTURBATIONS: frozenset[str] = frozenset(PERTURBATION_GROUPS["noise"])

# Per preset: frames, and parameters (lengths in pixels at the preset's native size).
_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "imagenet": {
        "gaussian_noise": {"frames": 31, "level": (0.03, 0.05, 0.08)},
        "shot_noise": {"frames": 31, "level": (300.0, 120.0, 60.0)},
        "speckle_noise": {"frames": 31, "level": (0.05, 0.10, 0.15)},
        "motion_blur": {"frames": 31, "radius": 10.0, "sigma": 3.0, "angle0": -30 * 4.0, "angle_step": 4.0},
        "zoom_blur": {"frames": 31, "step": 0.004},
        "snow": {"frames": 31, "mean": 0.05, "std": 0.3, "zoom": 3.0, "threshold": 0.5, "radius": 14.0,
                 "sigma": 4.0, "angle0": -150.0, "angle_step": 4.0, "blend": 0.85},
        "brightness": {"frames": 31, "step": 0.02},
        "translate": {"frames": 41, "shift0": -20.0, "shift_step": 1.0},
        "rotate": {"frames": 31, "step": 1.0},
        "tilt": {"frames": 31, "step": 1.0},
        "scale": {"frames": 31, "start": 0.40, "step": 0.025},
        "gaussian_blur": {"frames": 31, "sigma0": 0.25, "sigma_step": 0.035, "truncate": 6.0},
        "spatter": {"frames": 31, "mean": 0.65, "std": 0.27, "sigma": 3.7, "threshold": 0.69,
                    "drip": (0.05, 0.1, 0.15, 0.7), "intensity": 0.6},
        "shear": {"frames": 31, "step": 1.0},
    },
    "cifar": {
        "gaussian_noise": {"frames": 31, "level": (0.02, 0.04, 0.06)},
        "shot_noise": {"frames": 31, "level": (700.0, 400.0, 200.0)},
        "speckle_noise": {"frames": 31, "level": (0.05, 0.07, 0.10)},
        "motion_blur": {"frames": 21, "radius": 6.0, "sigma": 1.8, "angle0": -20 * 9.0, "angle_step": 9.0},
        "zoom_blur": {"frames": 31, "step": 0.004},
        "snow": {"frames": 31, "mean": 0.05, "std": 0.3, "zoom": 2.0, "threshold": 0.5, "radius": 10.0,
                 "sigma": 2.0, "angle0": -150.0, "angle_step": 4.0, "blend": 0.85},
        "brightness": {"frames": 31, "step": 0.015},
        "translate": {"frames": 16, "shift0": -7.0, "shift_step": 1.0},
        "rotate": {"frames": 31, "step": 1.0},
        "tilt": {"frames": 31, "step": 0.75},
        "scale": {"frames": 31, "start": 0.70, "step": 0.02},
        "gaussian_blur": {"frames": 31, "sigma0": 0.3, "sigma_step": 0.015, "truncate": 7.0},
        "spatter": {"frames": 31, "mean": 0.6, "std": 0.265, "sigma": 1.75, "threshold": 0.7,
                    "drip": (0.2, 0.8), "intensity": 0.6},
        "shear": {"frames": 31, "step": 1.0},
    },
}
# Keys multiplied by k = size / native size (lengths in pixels); everything else is size-free.
_LENGTH_KEYS = frozenset({"radius", "sigma", "zoom", "shift0", "shift_step", "sigma0", "sigma_step"})

#: Default pixel budget of one block of frames (N · t · H · W); about 400 MB of float32 frames.
DEFAULT_BLOCK_PIXELS = 1 << 25


def list_perturbations(group: str = "all") -> list[str]:
    """Perturbation names of a group: ``test`` (10), ``validation`` (4), ``all``, ``noise``, ``geometric``."""
    if group not in PERTURBATION_GROUPS:
        raise unknown_name("perturbation group", group, PERTURBATION_GROUPS)
    return list(PERTURBATION_GROUPS[group])


def is_noise(name: str) -> bool:
    """Whether ``name`` is a noise sequence (frames compared with frame 0, not consecutively)."""
    return name in NOISE_PERTURBATIONS


def _check_name(name: str) -> str:
    if name not in PERTURBATION_GROUPS["all"]:
        raise unknown_name("perturbation", str(name), PERTURBATION_GROUPS["all"],
                           hint="see robustvit.corruptions.perturbations.list_perturbations()")
    return name


def _check_difficulty(difficulty: int) -> int:
    if isinstance(difficulty, bool) or not isinstance(difficulty, int) or not 1 <= difficulty <= 3:
        raise RobustvitError(f"difficulty must be 1, 2 or 3, got {difficulty!r}")
    return difficulty


def num_frames(name: str, preset: str = "imagenet") -> int:
    """Frames T of a sequence (31; translate 41 for ImageNet-P, 16 for CIFAR-P; CIFAR-P motion_blur 21)."""
    return int(_PARAMS[_preset(preset)][_check_name(name)]["frames"])


def _preset(preset: str) -> str:
    if preset not in _PARAMS:
        raise unknown_name("preset", str(preset), _PARAMS)
    return preset


@dataclass(frozen=True)
class PerturbationParams:
    """The parameters of one sequence after size scaling (``values``) and the frame count."""

    name: str
    preset: str
    frames: int
    scale: float
    values: dict[str, Any]


def perturbation_params(name: str, preset: str = "imagenet", size: int | None = None) -> PerturbationParams:
    """The parameters used for ``name`` with ``preset``, lengths scaled by k = ``size`` / native size."""
    table = dict(_PARAMS[_preset(preset)][_check_name(name)])
    k = 1.0 if size is None else float(size) / PRESET_SIZES[preset]
    frames = int(table.pop("frames"))
    values = {key: (v * k if key in _LENGTH_KEYS else v) for key, v in table.items()}
    return PerturbationParams(name, preset, frames, k, values)


# ---------------------------------------------------------------- randomness
def _generator(x: torch.Tensor, seed: int | None, generator: torch.Generator | None) -> torch.Generator:
    if generator is not None:
        return generator
    g = torch.Generator(device=x.device)
    g.manual_seed(0 if seed is None else int(seed))
    return g


# ---------------------------------------------------------------- warps
def _affine_frames(x: torch.Tensor, mats: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Warp every image with every forward affine map p ↦ A(p − c) + c + t; returns (N, t, C, H, W).

    ``mats`` (t, 2, 2) and ``shifts`` (t, 2) in pixel units (x right, y down), about the image centre c;
    bilinear sampling, zero fill (PIL ``affine`` with ``fillcolor=0``).
    """
    n, c, h, w = x.shape
    t = mats.shape[0]
    inv = torch.linalg.inv(mats.to(torch.float64))                           # (t, 2, 2)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    cx, cy = (w - 1) / 2, (h - 1) / 2
    q = torch.stack((xs - cx, ys - cy), -1).reshape(1, h * w, 2) - shifts.to(torch.float64).reshape(t, 1, 2)
    src = q @ inv.transpose(1, 2)                                           # (t, HW, 2)
    return _sample(x, src[..., 0] + cx, src[..., 1] + cy)


def _sample(x: torch.Tensor, sx: torch.Tensor, sy: torch.Tensor) -> torch.Tensor:
    """Sample all N images at the t source grids (t, H·W) (pixel coords) → (N, t, C, H, W), zero fill."""
    n, c, h, w = x.shape
    t = sx.shape[0]
    gx = 2 * sx / max(w - 1, 1) - 1
    gy = 2 * sy / max(h - 1, 1) - 1
    grid = torch.stack((gx, gy), -1).reshape(t, h, w, 2).to(device=x.device, dtype=x.dtype)
    # one grid_sample call over the (t · N) frame images, the grid repeated for the N images
    xs = x.unsqueeze(0).expand(t, n, c, h, w).reshape(t * n, c, h, w)
    grid = grid.unsqueeze(1).expand(t, n, h, w, 2).reshape(t * n, h, w, 2)
    out = F.grid_sample(xs, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return out.reshape(t, n, c, h, w).transpose(0, 1)


def _rotation_shear(angle_deg: torch.Tensor, shear_deg: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torchvision 0.2's affine matrix RSS = scale·[[cos a, −sin(a+s)], [sin a, cos(a+s)]] (t, 2, 2)."""
    a = torch.deg2rad(angle_deg.to(torch.float64))
    s = torch.deg2rad(shear_deg.to(torch.float64))
    m = torch.stack((torch.stack((torch.cos(a), -torch.sin(a + s)), -1),
                     torch.stack((torch.sin(a), torch.cos(a + s)), -1)), -2)
    return m * scale.to(torch.float64).reshape(-1, 1, 1)


def tilt_homography(theta_deg: float, width: int, height: int) -> torch.Tensor:
    """The reference's 3×3 forward homography ``P2 @ T @ RX(θ) @ RY(θ) @ P1`` (float64), f = √(w² + h²)."""
    th = math.radians(theta_deg)
    w, h = float(width), float(height)
    f = math.sqrt(w ** 2 + h ** 2)
    p1 = torch.tensor([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1], [0, 0, 1]], dtype=torch.float64)
    c, s = math.cos(th), math.sin(th)
    rx = torch.tensor([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1]], dtype=torch.float64)
    ry = torch.tensor([[c, 0, -s, 0], [0, 1, 0, 0], [s, 0, c, 0], [0, 0, 0, 1]], dtype=torch.float64)
    tr = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, f], [0, 0, 0, 1]], dtype=torch.float64)
    p2 = torch.tensor([[f, 0, w / 2, 0], [0, f, h / 2, 0], [0, 0, 1, 0]], dtype=torch.float64)
    return p2 @ tr @ rx @ ry @ p1


def _tilt_frames(x: torch.Tensor, thetas: list[float]) -> torch.Tensor:
    """OpenCV ``warpPerspective(x, H, (w, h))``: dst(q) = src(H⁻¹q), bilinear, zero border."""
    n, c, h, w = x.shape
    inv = torch.stack([torch.linalg.inv(tilt_homography(t, w, h)) for t in thetas])    # (t, 3, 3)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    q = torch.stack((xs, ys, torch.ones_like(xs)), -1).reshape(1, h * w, 3)
    src = q @ inv.transpose(1, 2)
    z = src[..., 2]
    z = torch.where(z.abs() < 1e-12, torch.full_like(z, 1e-12), z)
    return _sample(x, src[..., 0] / z, src[..., 1] / z)


# ---------------------------------------------------------------- frame makers
# A maker gets the images, the sequence's parameters, the blocks of frame indices (in order) and the
# generator, and yields one (N, t, C, H, W) tensor per block. What a sequence carries from block to block
# (zoom_blur's running sum, spatter's dripping liquid) lives in the maker's local variables; its random
# draws are made once, before the first frame (snow, spatter) or one frame at a time (noise).
Blocks = list[list[int]]
Maker = Callable[[torch.Tensor, dict[str, Any], Blocks, torch.Generator], Iterator[torch.Tensor]]
FrameFn = Callable[[torch.Tensor, list[int], dict[str, Any]], torch.Tensor]


def _per_block(fn: FrameFn) -> Maker:
    """A maker for a sequence whose frames are a pure function of (x, frame indices, parameters)."""
    def make(x: torch.Tensor, p: dict[str, Any], blocks: Blocks, g: torch.Generator) -> Iterator[torch.Tensor]:
        for idx in blocks:
            yield fn(x, idx, p)
    return make


def _noise_maker(kind: str) -> Maker:
    def make(x: torch.Tensor, p: dict[str, Any], blocks: Blocks, g: torch.Generator) -> Iterator[torch.Tensor]:
        level = p["level"]
        for idx in blocks:
            frames = []
            for i in idx:   # one batched draw per frame: the stream does not depend on the block size
                if i == 0:
                    frames.append(x)
                elif kind == "gaussian":
                    frames.append((x + level * randn(tuple(x.shape), g, x)).clamp(0, 1))
                elif kind == "speckle":
                    frames.append((x + x * level * randn(tuple(x.shape), g, x)).clamp(0, 1))
                else:
                    rate = (x * level).to(device=g.device, dtype=torch.float32)
                    frames.append((poisson(rate, g).to(device=x.device, dtype=x.dtype) / level).clamp(0, 1))
            yield torch.stack(frames, 1)
    return make


def _motion_blur(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    n, c, h, w = x.shape
    angles = torch.tensor([p["angle0"] + p["angle_step"] * i for i in idx], dtype=torch.float64)
    xs = x.unsqueeze(1).expand(n, len(idx), c, h, w).reshape(-1, c, h, w)
    out = motion_blur(xs, p["radius"], p["sigma"], angles.repeat(n))
    return out.clamp(0, 1).reshape(n, len(idx), c, h, w)


def _zoom_blur(x: torch.Tensor, p: dict[str, Any], blocks: Blocks, g: torch.Generator) -> Iterator[torch.Tensor]:
    # frame i = mean(x, zoom(1 + step·1), …, zoom(1 + step·i)): a running sum over the frames
    total = x.clone()
    for idx in blocks:
        zs = [i for i in idx if i > 0]
        scales = torch.tensor([1 + p["step"] * i for i in zs], dtype=torch.float64)
        warped = _affine_frames(x, torch.eye(2, dtype=torch.float64).expand(len(zs), 2, 2) * scales.reshape(-1, 1, 1),
                                torch.zeros(len(zs), 2, dtype=torch.float64)) if zs else None
        out = []
        for i in idx:
            if i > 0:
                total = total + warped[:, zs.index(i)]
            out.append(total / (i + 1))
        yield torch.stack(out, 1).clamp(0, 1)


def _snow(x: torch.Tensor, p: dict[str, Any], blocks: Blocks, g: torch.Generator) -> Iterator[torch.Tensor]:
    n, c, h, w = x.shape
    # one flake layer per image, drawn once (as the reference), 8-bit like its PNG
    layer = randn((n, 1, h, w), g, x) * p["std"] + p["mean"]
    layer = clipped_zoom(layer, max(1.0, p["zoom"]))
    layer = torch.where(layer < p["threshold"], torch.zeros_like(layer), layer).clamp(0, 1)
    layer = torch.floor(layer * 255) / 255
    base = p["blend"] * x + (1 - p["blend"]) * torch.maximum(x, rgb_to_gray(x) * 1.5 + 0.5)
    for idx in blocks:
        t = len(idx)
        angles = torch.tensor([p["angle0"] + p["angle_step"] * i for i in idx], dtype=torch.float64)
        layers = layer.unsqueeze(1).expand(n, t, 1, h, w).reshape(n * t, 1, h, w)
        moving = motion_blur(layers, p["radius"], p["sigma"], angles.repeat(n))
        moving = (torch.round(moving.clamp(0, 1) * 255) / 255).reshape(n, t, 1, h, w)
        yield (base.unsqueeze(1) + moving + moving.flip(-2, -1)).clamp(0, 1)


def _brightness(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    # HSV V ← clip(V + c) with H, S kept: RGB ∝ V, so x·V'/V (grey V' where V = 0), scikit-image conventions
    cs = torch.tensor([(i - 15) * p["step"] for i in idx], device=x.device, dtype=x.dtype).reshape(1, -1, 1, 1, 1)
    v = x.amax(1, keepdim=True).unsqueeze(1)                                 # (N, 1, 1, H, W)
    v2 = (v + cs).clamp(0, 1)
    ratio = v2 / torch.where(v > 0, v, torch.ones_like(v))
    xs = x.unsqueeze(1)
    return torch.where(v > 0, xs * ratio, v2.expand(-1, -1, x.shape[1], -1, -1)).clamp(0, 1)


def _translate(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    t = len(idx)
    shifts = torch.tensor([[p["shift0"] + p["shift_step"] * i, 0.0] for i in idx], dtype=torch.float64)
    return _affine_frames(x, torch.eye(2, dtype=torch.float64).expand(t, 2, 2), shifts)


def _rotate(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    a = torch.tensor([(i - 15) * p["step"] for i in idx], dtype=torch.float64)
    mats = _rotation_shear(a, torch.zeros_like(a), torch.ones_like(a))
    return _affine_frames(x, mats, torch.zeros(len(idx), 2, dtype=torch.float64))


def _shear(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    s = torch.tensor([(i - 15) * p["step"] for i in idx], dtype=torch.float64)
    mats = _rotation_shear(torch.zeros_like(s), s, torch.ones_like(s))
    return _affine_frames(x, mats, torch.zeros(len(idx), 2, dtype=torch.float64))


def _scale(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    s = torch.tensor([p["start"] + p["step"] * i for i in idx], dtype=torch.float64)
    mats = torch.eye(2, dtype=torch.float64).expand(len(idx), 2, 2) * s.reshape(-1, 1, 1)
    return _affine_frames(x, mats, torch.zeros(len(idx), 2, dtype=torch.float64))


def _tilt(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    return _tilt_frames(x, [(i - 15) * p["step"] for i in idx])


def _gaussian_blur(x: torch.Tensor, idx: list[int], p: dict[str, Any]) -> torch.Tensor:
    # scikit-image gaussian(sigma, truncate, mode="nearest"), one σ per frame (batched over the images)
    frames = [gaussian_filter(x, p["sigma0"] + p["sigma_step"] * i, truncate=p["truncate"], mode="nearest")
              for i in idx]
    return torch.stack(frames, 1).clamp(0, 1)


def _drip(liquid: torch.Tensor, kernel: tuple[float, ...]) -> torch.Tensor:
    """numpy ``convolve(column, kernel, mode="same")`` down every column (zero padding): liquid runs down."""
    k = len(kernel)
    h = liquid.shape[-2]
    start = (k - 1) // 2
    out = torch.zeros_like(liquid)
    for j, kj in enumerate(kernel):   # same[r] = Σ_j k_j · col[r + start − j]
        off = start - j
        if off >= 0:
            out[..., : h - off, :] += kj * liquid[..., off:, :]
        else:
            out[..., -off:, :] += kj * liquid[..., : h + off, :]
    return out


def _spatter(x: torch.Tensor, p: dict[str, Any], blocks: Blocks, g: torch.Generator) -> Iterator[torch.Tensor]:
    n, c, h, w = x.shape
    liquid = gaussian_filter(randn((n, 1, h, w), g, x) * p["std"] + p["mean"], p["sigma"])
    liquid = torch.where(liquid < p["threshold"], torch.zeros_like(liquid), liquid)
    colour = torch.tensor([175, 238, 238], device=x.device, dtype=x.dtype).view(1, 1, 3, 1, 1) / 255
    for idx in blocks:   # the drip is sequential; the water shading is batched
        layers = []
        for _ in idx:
            layers.append(liquid)
            liquid = _drip(liquid, p["drip"])
        t = len(layers)
        m = (water_layer(torch.stack(layers, 1).reshape(n * t, 1, h, w)) * p["intensity"]).reshape(n, t, 1, h, w)
        yield (x.unsqueeze(1) + m * colour).clamp(0, 1)


_MAKERS: dict[str, Maker] = {
    "gaussian_noise": _noise_maker("gaussian"), "shot_noise": _noise_maker("shot"),
    "speckle_noise": _noise_maker("speckle"), "motion_blur": _per_block(_motion_blur), "zoom_blur": _zoom_blur,
    "snow": _snow, "brightness": _per_block(_brightness), "translate": _per_block(_translate),
    "rotate": _per_block(_rotate), "tilt": _per_block(_tilt), "scale": _per_block(_scale),
    "gaussian_blur": _per_block(_gaussian_blur), "spatter": _spatter, "shear": _per_block(_shear),
}
#: Perturbations that act on the uncropped image when ``crop`` is given (the reference warps the
#: Resize(256) image before CenterCrop(224)); the others crop first.
GEOMETRIC_ON_FULL: frozenset[str] = frozenset({"zoom_blur", "translate", "rotate", "tilt", "scale", "shear"})


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
    _check_name(name)
    _check_difficulty(difficulty)
    out_hw = tuple(x.shape[-2:]) if crop is None else ((crop, crop) if isinstance(crop, int) else tuple(crop))
    if out_hw[0] > x.shape[-2] or out_hw[1] > x.shape[-1] or min(out_hw) < 1:
        raise RobustvitError(f"crop {out_hw} must fit inside the {tuple(x.shape[-2:])} images")
    src = x if name in GEOMETRIC_ON_FULL else _center_crop(x, out_hw)
    preset = resolve_preset(preset, *out_hw)
    params = perturbation_params(name, preset, size=min(out_hw))
    g = _generator(x, seed, generator)
    values = dict(params.values)
    if name in NOISE_PERTURBATIONS:
        values["level"] = values["level"][difficulty - 1]
    n = x.shape[0]
    t_all = params.frames
    if block_frames is None:
        block_frames = max(1, int(block_pixels) // max(1, n * src.shape[-2] * src.shape[-1]))
    block_frames = max(1, min(int(block_frames), t_all))
    compute = src.float() if src.dtype in (torch.float16, torch.bfloat16) else src
    blocks = [list(range(s, min(t_all, s + block_frames))) for s in range(0, t_all, block_frames)]
    for idx, frames in zip(blocks, _MAKERS[name](compute, values, blocks, g)):
        if name in GEOMETRIC_ON_FULL and crop is not None:
            frames = _center_crop(frames, out_hw)
        yield idx[0], frames.to(x.dtype).contiguous()


def perturbation_sequence(x: torch.Tensor, name: str, *, difficulty: int = 1, seed: int | None = None,
                          generator: torch.Generator | None = None, preset: str | None = None,
                          crop: int | tuple[int, int] | None = None) -> torch.Tensor:
    """The perturbation sequence of every image: float (N, T, 3, H, W) in [0, 1] on ``x``'s device.

    Args:
        x: float images (N, 3, H, W) in [0, 1].
        name: one of :func:`list_perturbations` (``"all"``).
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


__all__ = ["TEST_PERTURBATIONS", "CIFAR_P_TEST_PERTURBATIONS", "VALIDATION_PERTURBATIONS", "PERTURBATION_GROUPS", "NOISE_PERTURBATIONS",
           "GEOMETRIC_ON_FULL", "PerturbationParams", "list_perturbations", "is_noise", "num_frames",
           "perturbation_params", "perturbation_sequence", "iter_perturbation_frames", "tilt_homography"]
