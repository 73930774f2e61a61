"""The 14 ImageNet-P / CIFAR-10-P perturbations, each one registered :class:`Perturbation` spec.

Hendrycks & Dietterich, ICLR 2019 (arXiv:1903.12261): frames and numbers of ``make_imagenet_p.py`` (preset
``imagenet``, 224 px) and ``make_cifar_p.py`` (``cifar``, 32 px) of ``hendrycks/robustness``; ``lengths`` in
pixels at the preset's native size. Noise: frame 0 clean, then one independent batched draw per frame at a
fixed level (``difficulty`` 2 and 3: the ``_2``/``_3`` folders' levels). Blur and weather: motion_blur (angle
sweep), zoom_blur (running mean of zooms), snow (one flake layer, blurred along a sweeping angle), brightness
(HSV value shift), gaussian_blur, spatter (one liquid layer dripping down frame by frame). Geometric:
translate, rotate, tilt (3-D perspective), scale, shear, batched ``grid_sample`` warps with black fill.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from robustvit.corruptions.color import rgb_to_gray
from robustvit.corruptions.filters import gaussian_filter
from robustvit.corruptions.frame_warps import affine_frames, rotation_shear, tilt_frames
from robustvit.corruptions.geometry import clipped_zoom, motion_blur
from robustvit.corruptions.perturbation_spec import State, perturbation
from robustvit.corruptions.sampling import poisson, randn
from robustvit.corruptions.spatter import water_layer

Values = Mapping[str, Any]
_NOISE = {"split": "test", "family": "noise", "levels": ("level",), "random": True, "sequential": True}


# ---------------------------------------------------------------- noise: frame 0 clean, then one draw per frame
def _noise_frames(x: torch.Tensor, idx: list[int], draw: Any) -> torch.Tensor:
    # one batched draw per frame: the stream does not depend on the block size
    return torch.stack([x if i == 0 else draw() for i in idx], 1)


@perturbation("gaussian_noise", tables={"imagenet": {"frames": 31, "level": (0.03, 0.05, 0.08)},
                                        "cifar": {"frames": 31, "level": (0.02, 0.04, 0.06)}}, **_NOISE)
def _gaussian_noise(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    return _noise_frames(x, idx, lambda: (x + p["level"] * randn(tuple(x.shape), g, x)).clamp(0, 1))


@perturbation("shot_noise", tables={"imagenet": {"frames": 31, "level": (300.0, 120.0, 60.0)},
                                    "cifar": {"frames": 31, "level": (700.0, 400.0, 200.0)}}, **_NOISE)
def _shot_noise(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    level = p["level"]

    def draw() -> torch.Tensor:
        rate = (x * level).to(device=g.device, dtype=torch.float32)
        return (poisson(rate, g).to(device=x.device, dtype=x.dtype) / level).clamp(0, 1)
    return _noise_frames(x, idx, draw)


def _scaled(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """:func:`affine_frames` scaling by each frame's factor ``s`` (t,) about the centre."""
    mats = torch.eye(2, dtype=torch.float64).expand(len(s), 2, 2) * s.reshape(-1, 1, 1)
    return affine_frames(x, mats, torch.zeros(len(s), 2, dtype=torch.float64))


# ---------------------------------------------------------------- blur and weather (test split)
@perturbation("motion_blur", "test", "blur", {
    "imagenet": {"frames": 31, "radius": 10.0, "sigma": 3.0, "angle0": -30 * 4.0, "angle_step": 4.0},
    "cifar": {"frames": 21, "radius": 6.0, "sigma": 1.8, "angle0": -20 * 9.0, "angle_step": 9.0}},
    lengths=("radius", "sigma"))
def _motion_blur(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    n, c, h, w = x.shape
    angles = torch.tensor([p["angle0"] + p["angle_step"] * i for i in idx], dtype=torch.float64)
    xs = x.unsqueeze(1).expand(n, len(idx), c, h, w).reshape(-1, c, h, w)
    out = motion_blur(xs, p["radius"], p["sigma"], angles.repeat(n))
    return out.clamp(0, 1).reshape(n, len(idx), c, h, w)


def _zoom_start(x: torch.Tensor, p: Values, g: torch.Generator) -> State:
    return {"total": x.clone()}


@perturbation("zoom_blur", "test", "blur", {"imagenet": {"frames": 31, "step": 0.004},
                                            "cifar": {"frames": 31, "step": 0.004}},
              sample=_zoom_start, warps_full=True, sequential=True)
def _zoom_blur(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    # frame i = mean(x, zoom(1 + step·1), …, zoom(1 + step·i)): a running sum over the frames
    total = state["total"]
    zs = [i for i in idx if i > 0]
    warped = _scaled(x, torch.tensor([1 + p["step"] * i for i in zs], dtype=torch.float64)) if zs else None
    out = []
    for i in idx:
        if i > 0:
            total = total + warped[:, zs.index(i)]
        out.append(total / (i + 1))
    state["total"] = total
    return torch.stack(out, 1).clamp(0, 1)


def _snow_start(x: torch.Tensor, p: Values, g: torch.Generator) -> State:
    n, c, h, w = x.shape
    # one flake layer per image, drawn once (as the reference), 8-bit like its PNG
    layer = randn((n, 1, h, w), g, x) * p["std"] + p["mean"]
    layer = clipped_zoom(layer, max(1.0, p["zoom"]))
    layer = torch.where(layer < p["threshold"], torch.zeros_like(layer), layer).clamp(0, 1)
    base = p["blend"] * x + (1 - p["blend"]) * torch.maximum(x, rgb_to_gray(x) * 1.5 + 0.5)
    return {"layer": torch.floor(layer * 255) / 255, "base": base}


@perturbation("snow", "test", "weather", {
    "imagenet": {"frames": 31, "mean": 0.05, "std": 0.3, "zoom": 3.0, "threshold": 0.5, "radius": 14.0,
                 "sigma": 4.0, "angle0": -150.0, "angle_step": 4.0, "blend": 0.85},
    "cifar": {"frames": 31, "mean": 0.05, "std": 0.3, "zoom": 2.0, "threshold": 0.5, "radius": 10.0,
              "sigma": 2.0, "angle0": -150.0, "angle_step": 4.0, "blend": 0.85}},
    sample=_snow_start, lengths=("zoom", "radius", "sigma"), random=True)
def _snow(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    n, c, h, w = x.shape
    t = len(idx)
    angles = torch.tensor([p["angle0"] + p["angle_step"] * i for i in idx], dtype=torch.float64)
    layers = state["layer"].unsqueeze(1).expand(n, t, 1, h, w).reshape(n * t, 1, h, w)
    moving = motion_blur(layers, p["radius"], p["sigma"], angles.repeat(n))
    moving = (torch.round(moving.clamp(0, 1) * 255) / 255).reshape(n, t, 1, h, w)
    return (state["base"].unsqueeze(1) + moving + moving.flip(-2, -1)).clamp(0, 1)


@perturbation("brightness", "test", "weather", {"imagenet": {"frames": 31, "step": 0.02},
                                                "cifar": {"frames": 31, "step": 0.015}})
def _brightness(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    # HSV V ← clip(V + c) with H, S kept: RGB ∝ V, so x·V'/V (grey V' where V = 0), scikit-image conventions
    cs = torch.tensor([(i - 15) * p["step"] for i in idx], device=x.device, dtype=x.dtype).reshape(1, -1, 1, 1, 1)
    v = x.amax(1, keepdim=True).unsqueeze(1)                                 # (N, 1, 1, H, W)
    v2 = (v + cs).clamp(0, 1)
    ratio = v2 / torch.where(v > 0, v, torch.ones_like(v))
    return torch.where(v > 0, x.unsqueeze(1) * ratio, v2.expand(-1, -1, x.shape[1], -1, -1)).clamp(0, 1)


# ---------------------------------------------------------------- geometric (test split)
_GEOMETRIC = {"family": "geometric", "warps_full": True}


@perturbation("translate", "test", tables={"imagenet": {"frames": 41, "shift0": -20.0, "shift_step": 1.0},
                                           "cifar": {"frames": 16, "shift0": -7.0, "shift_step": 1.0}},
              lengths=("shift0", "shift_step"), **_GEOMETRIC)
def _translate(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    shifts = torch.tensor([[p["shift0"] + p["shift_step"] * i, 0.0] for i in idx], dtype=torch.float64)
    return affine_frames(x, torch.eye(2, dtype=torch.float64).expand(len(idx), 2, 2), shifts)


@perturbation("rotate", "test", tables={"imagenet": {"frames": 31, "step": 1.0},
                                        "cifar": {"frames": 31, "step": 1.0}}, **_GEOMETRIC)
def _rotate(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    a = torch.tensor([(i - 15) * p["step"] for i in idx], dtype=torch.float64)
    mats = rotation_shear(a, torch.zeros_like(a), torch.ones_like(a))
    return affine_frames(x, mats, torch.zeros(len(idx), 2, dtype=torch.float64))


@perturbation("tilt", "test", tables={"imagenet": {"frames": 31, "step": 1.0},
                                      "cifar": {"frames": 31, "step": 0.75}}, **_GEOMETRIC)
def _tilt(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    return tilt_frames(x, [(i - 15) * p["step"] for i in idx])


@perturbation("scale", "test", tables={"imagenet": {"frames": 31, "start": 0.40, "step": 0.025},
                                       "cifar": {"frames": 31, "start": 0.70, "step": 0.02}}, **_GEOMETRIC)
def _scale(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    return _scaled(x, torch.tensor([p["start"] + p["step"] * i for i in idx], dtype=torch.float64))


# ---------------------------------------------------------------- the validation split
@perturbation("speckle_noise", tables={"imagenet": {"frames": 31, "level": (0.05, 0.10, 0.15)},
                                       "cifar": {"frames": 31, "level": (0.05, 0.07, 0.10)}},
              **{**_NOISE, "split": "validation"})
def _speckle_noise(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    return _noise_frames(x, idx, lambda: (x + x * p["level"] * randn(tuple(x.shape), g, x)).clamp(0, 1))


@perturbation("gaussian_blur", "validation", "blur", {
    "imagenet": {"frames": 31, "sigma0": 0.25, "sigma_step": 0.035, "truncate": 6.0},
    "cifar": {"frames": 31, "sigma0": 0.3, "sigma_step": 0.015, "truncate": 7.0}},
    lengths=("sigma0", "sigma_step"))
def _gaussian_blur(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    # scikit-image gaussian(sigma, truncate, mode="nearest"), one σ per frame (batched over the images)
    frames = [gaussian_filter(x, p["sigma0"] + p["sigma_step"] * i, truncate=p["truncate"], mode="nearest")
              for i in idx]
    return torch.stack(frames, 1).clamp(0, 1)


def _drip(liquid: torch.Tensor, kernel: tuple[float, ...]) -> torch.Tensor:
    """numpy ``convolve(column, kernel, mode="same")`` down every column (zero padding): liquid runs down."""
    h = liquid.shape[-2]
    start = (len(kernel) - 1) // 2
    out = torch.zeros_like(liquid)
    for j, kj in enumerate(kernel):   # same[r] = Σ_j k_j · col[r + start − j]
        off = start - j
        if off >= 0:
            out[..., : h - off, :] += kj * liquid[..., off:, :]
        else:
            out[..., -off:, :] += kj * liquid[..., : h + off, :]
    return out


def _spatter_start(x: torch.Tensor, p: Values, g: torch.Generator) -> State:
    n, c, h, w = x.shape
    liquid = gaussian_filter(randn((n, 1, h, w), g, x) * p["std"] + p["mean"], p["sigma"])
    return {"liquid": torch.where(liquid < p["threshold"], torch.zeros_like(liquid), liquid)}


@perturbation("spatter", "validation", "weather", {
    "imagenet": {"frames": 31, "mean": 0.65, "std": 0.27, "sigma": 3.7, "threshold": 0.69,
                 "drip": (0.05, 0.1, 0.15, 0.7), "intensity": 0.6},
    "cifar": {"frames": 31, "mean": 0.6, "std": 0.265, "sigma": 1.75, "threshold": 0.7,
              "drip": (0.2, 0.8), "intensity": 0.6}},
    sample=_spatter_start, lengths=("sigma",), random=True, sequential=True)
def _spatter(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    n, c, h, w = x.shape
    colour = torch.tensor([175, 238, 238], device=x.device, dtype=x.dtype).view(1, 1, 3, 1, 1) / 255
    layers = []
    for _ in idx:   # the drip is sequential; the water shading is batched
        layers.append(state["liquid"])
        state["liquid"] = _drip(state["liquid"], p["drip"])
    t = len(layers)
    m = (water_layer(torch.stack(layers, 1).reshape(n * t, 1, h, w)) * p["intensity"]).reshape(n, t, 1, h, w)
    return (x.unsqueeze(1) + m * colour).clamp(0, 1)


@perturbation("shear", "validation", tables={"imagenet": {"frames": 31, "step": 1.0},
                                             "cifar": {"frames": 31, "step": 1.0}}, **_GEOMETRIC)
def _shear(x: torch.Tensor, p: Values, idx: list[int], state: State, g: torch.Generator) -> torch.Tensor:
    s = torch.tensor([(i - 15) * p["step"] for i in idx], dtype=torch.float64)
    mats = rotation_shear(torch.zeros_like(s), s, torch.ones_like(s))
    return affine_frames(x, mats, torch.zeros(len(idx), 2, dtype=torch.float64))
