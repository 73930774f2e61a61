"""Frost layers: the ImageNet-C frost photographs when they are available, else a procedural texture.

The reference frost (Hendrycks & Dietterich 2019, arXiv:1903.12261) blends a random crop of one of five frost
*photographs* into the image: ``out = a·x + b·frost``. robustvit does not ship them; it uses them when
:func:`frost_photo_dir` finds them (``$ROBUSTVIT_FROST_DIR`` / ``robustvit eval --frost-dir``, else the
``frost/`` folder of an installed ``imagecorruptions``, found without importing it). Preset ``imagenet``
scales the photo as ``imagecorruptions`` 1.1.2 does (:func:`photo_scale`, then *always* ×``photo_zoom`` = 1.1,
bicubic like OpenCV's ``INTER_CUBIC``, new side ``ceil(side·f)``); preset ``cifar`` follows ``make_cifar_c.py``
(shrunk by 0.2, bilinear, rounded size, no zoom). The crop is at a uniform random position per image
(``randint(0, side′ − side)``). :func:`frost_source` names the source used; results and exports record it.

Without the photos, :func:`frost_texture` synthesises a texture per image from the generator: a cloudy
diamond-square plasma (decay 2), ice needles along three directions 120° apart (hexagonal ice, random rotation;
a scatter-add of each seed's taps, not a full-size convolution) and smoothed white grain (rime), standardised,
mixed, then given a brightness level, a cold tint and a contrast drawn so that its statistics match 224-px crops
of the reference photos (``benchmarks/corruption_fidelity.py``: channel means ≈ (0.56, 0.65, 0.69), spread of
crop means ≈ 0.13–0.19, within-crop std ≈ 0.09). ``scale`` sets the crystal size (1 at 224 px; 0.2 for CIFAR).
"""

from __future__ import annotations

import importlib.util
import math
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robustvit.corruptions.filters import gaussian_blur, next_power_of_2
from robustvit.corruptions.fractal import plasma_fractal
from robustvit.corruptions.geometry import motion_kernel, motion_offsets
from robustvit.errors import RobustvitError

#: The environment variable naming the folder of the frost photographs ("procedural" forces the texture).
FROST_ENV = "ROBUSTVIT_FROST_DIR"
#: The photographs the reference chooses from (``np.random.randint(5)``: its sixth file is never used).
FROST_FILES: tuple[str, ...] = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")


def frost_photo_dir() -> Path | None:
    """The folder of the ImageNet-C frost photographs, or None for the procedural texture.

    ``$ROBUSTVIT_FROST_DIR`` if set (``procedural`` forces the texture; a folder without the five files is an
    error), else the ``frost/`` folder of an installed ``imagecorruptions`` package, else None.
    """
    env = os.environ.get(FROST_ENV, "").strip()
    if env == "procedural":
        return None
    if env:
        folder = Path(env).expanduser()
        missing = [f for f in FROST_FILES if not (folder / f).is_file()]
        if missing:
            raise RobustvitError(f"{FROST_ENV}={env} lacks {', '.join(missing)}: point it at the ImageNet-C frost "
                                 "photographs (imagecorruptions' frost/ folder), or set it to 'procedural'")
        return folder
    spec = importlib.util.find_spec("imagecorruptions")
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(loc) / "frost"
        if all((folder / f).is_file() for f in FROST_FILES):
            return folder
    return None


def frost_source() -> str:
    """``"photos:<folder>"`` or ``"procedural"``: what the ``frost`` corruption uses now."""
    folder = frost_photo_dir()
    return "procedural" if folder is None else f"photos:{folder}"


@lru_cache(maxsize=2)
def _photos(folder: str) -> tuple[torch.Tensor, ...]:
    """The five photographs as uint8 (3, H, W) RGB (alpha dropped, as ``cv2.imread`` does)."""
    from PIL import Image

    out = []
    for f in FROST_FILES:
        with Image.open(Path(folder) / f) as im:
            out.append(torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1))
    return tuple(out)


#: Without a zoom (``cifar``), a photo too small for the image is enlarged this much beyond the covering factor.
COVER_MARGIN = 1.1


def photo_scale(photo_size: tuple[int, int], height: int, width: int, scale: float, zoom: float) -> float:
    """The factor a photograph of ``photo_size`` (h, w) is resized by: ``scale`` when the result covers the
    image, else the smallest factor that does (times :data:`COVER_MARGIN` when ``zoom`` is 1), times ``zoom``
    — ``imagecorruptions``' ``frost`` with scale 1 and zoom 1.1."""
    ph, pw = photo_size
    k = float(scale)
    if ph * k < height or pw * k < width:                # too small: cover the image
        k = max(height / ph, width / pw) * (COVER_MARGIN if zoom == 1 else 1.0)
    return k * float(zoom)


def resized_size(photo_size: tuple[int, int], k: float, height: int, width: int) -> tuple[int, int]:
    """The photograph's size after resizing by ``k``: ``ceil`` when enlarging (``imagecorruptions``), rounded
    when shrinking (OpenCV's ``fx``/``fy`` resize of ``make_cifar_c.py``); always larger than the image."""
    ph, pw = photo_size
    side = math.ceil if k > 1 else round
    return max(height + 1, int(side(ph * k))), max(width + 1, int(side(pw * k)))


@lru_cache(maxsize=8)
def _scaled_photos(folder: str, scale: float, zoom: float, height: int,
                   width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The photos resized by :func:`photo_scale` to :func:`resized_size` (bicubic in float64 when enlarging:
    OpenCV's ``INTER_CUBIC`` up to a grey level in one pixel of 10⁵; bilinear when shrinking, as ``cv2.resize``),
    rounded to uint8 values, zero-padded into one stack (5, 3, Hmax, Wmax) in [0, 1]; and their sizes (5, 2)."""
    scaled = []
    for photo in _photos(folder):
        k = photo_scale(photo.shape[-2:], height, width, scale, zoom)
        size = resized_size(photo.shape[-2:], k, height, width)
        img = photo[None].double()
        if size != tuple(photo.shape[-2:]):
            mode = "bilinear" if k < 1 else "bicubic"
            img = F.interpolate(img, size=size, mode=mode, align_corners=False).clamp(0, 255).round()
        scaled.append(img[0].float() / 255)
    hmax, wmax = max(p.shape[1] for p in scaled), max(p.shape[2] for p in scaled)
    stack = torch.stack([F.pad(p, (0, wmax - p.shape[2], 0, hmax - p.shape[1])) for p in scaled])
    return stack, torch.tensor([p.shape[1:] for p in scaled])


def photo_crops(folder: Path, photo: torch.Tensor, top_left: torch.Tensor, height: int, width: int, *,
                scale: float = 1.0, zoom: float = 1.0) -> torch.Tensor:
    """Crops (n, 3, H, W) in [0, 1] (CPU) of the resized photos: ``photo[i]`` (index into :data:`FROST_FILES`)
    from row, column ``top_left[i]``, one batched gather."""
    stack, _ = _scaled_photos(str(folder), float(scale), float(zoom), int(height), int(width))
    photo, top_left = photo.long().cpu(), top_left.long().cpu()
    rows = top_left[:, :1] + torch.arange(height)                            # (n, H)
    cols = top_left[:, 1:] + torch.arange(width)                             # (n, W)
    texture = stack.permute(0, 2, 3, 1)[photo[:, None, None], rows[:, :, None], cols[:, None, :]]
    return texture.permute(0, 3, 1, 2).contiguous()


def photo_frost(n: int, height: int, width: int, generator: torch.Generator, folder: Path, *,
                scale: float = 1.0, zoom: float = 1.0) -> dict[str, torch.Tensor]:
    """Crops of the frost photographs in ``folder`` resized by :func:`photo_scale`: one photo (uniform over
    the five) and a uniform position per image. Returns ``photo`` (n,), ``top_left`` (n, 2) and ``texture``
    (n, 3, H, W) (CPU)."""
    _, sizes = _scaled_photos(str(folder), float(scale), float(zoom), int(height), int(width))
    g = generator
    photo = torch.randint(0, len(FROST_FILES), (n,), generator=g, device=g.device).cpu()
    u = torch.rand((n, 2), generator=g, device=g.device, dtype=torch.float64).cpu()
    room = (sizes[photo] - torch.tensor([height, width])).clamp_min(1)     # randint(0, size − side)
    top_left = (u * room).floor().long()
    return {"photo": photo, "top_left": top_left,
            "texture": photo_crops(folder, photo, top_left, height, width, scale=scale, zoom=zoom)}


def _standardise(t: torch.Tensor) -> torch.Tensor:
    """Per-image zero mean, unit std (vectorised passes; ``Tensor.std`` is several times slower)."""
    c = t - t.mean(dim=(1, 2, 3), keepdim=True)
    std = torch.linalg.vector_norm(c, dim=(1, 2, 3), keepdim=True) / max(1, c[0].numel() - 1) ** 0.5
    return c.div_(std.clamp_min(1e-6))


def _rand(shape: tuple[int, ...], g: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.rand(shape, generator=g, device=g.device).to(device)


def _needles(n: int, height: int, width: int, radius: float, g: torch.Generator, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor:
    """Sparse crystal seeds (2 % of the pixels per direction, values U(0, 1)) smeared by a one-sided motion
    kernel along three directions 120° apart (random rotation per image), (n, 1, H, W). Each seed stamps the
    kernel's taps (a scatter-add: the motion blur of the seed image without a full-size convolution); taps
    leaving the image are dropped."""
    seeds = max(1, round(0.02 * height * width))
    pos = (_rand((n, 3, seeds), g, device) * (height * width)).long().clamp_(max=height * width - 1)
    val = _rand((n, 3, seeds), g, device).to(dtype)
    base_angle = _rand((n, 1), g, device).cpu() * 360.0
    angles = (base_angle + torch.tensor([[0.0, 120.0, 240.0]])).reshape(-1)       # (n·3,)
    k = motion_kernel(radius, radius / 2)
    dy, dx = motion_offsets(k.numel(), angles)                                     # (n·3, taps)
    dy, dx = dy.view(n, 3, 1, -1).to(device), dx.view(n, 3, 1, -1).to(device)
    ys, xs = (pos // width).unsqueeze(-1) - dy, (pos % width).unsqueeze(-1) - dx    # (n, 3, seeds, taps)
    inside = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
    image = torch.arange(n, device=device).view(n, 1, 1, 1) * (height * width)
    flat = (image + ys.clamp(0, height - 1) * width + xs.clamp(0, width - 1)).view(-1)
    values = (val.unsqueeze(-1) * k.to(device=device, dtype=dtype) * inside).view(-1)
    return scatter_sum(n * height * width, flat, values).view(n, 1, height, width)


def scatter_sum(size: int, index: torch.Tensor, values: torch.Tensor, *, ordered: bool | None = None) -> torch.Tensor:
    """A vector of ``size`` zeros with ``values`` added at ``index`` (1-D, same device). ``ordered`` (default:
    off the CPU) uses ``index_put_(accumulate=True)``, which CUDA computes by sorting the indices (the same sums
    on every run; its ``index_add_`` adds atomically in any order). On the CPU ``index_add_`` is in index order
    and faster."""
    out = torch.zeros(size, device=values.device, dtype=values.dtype)
    if ordered if ordered is not None else values.device.type != "cpu":
        return out.index_put_((index,), values, accumulate=True)
    return out.index_add_(0, index, values)


def frost_texture(n: int, height: int, width: int, generator: torch.Generator, *, scale: float = 1.0,
                  device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``n`` frost textures (n, 3, H, W) in [0, 1]; crystal size proportional to ``scale``.

    >>> frost_texture(2, 32, 32, torch.Generator().manual_seed(0), scale=0.2).shape
    torch.Size([2, 3, 32, 32])
    """
    device = torch.device(device)
    g = generator
    side = next_power_of_2(max(height, width))
    cloud = plasma_fractal(n, side, 2.0, g, device=device, dtype=dtype)[:, None, :height, :width]
    needles = gaussian_blur(_needles(n, height, width, max(1.0, 8.0 * scale), g, device, dtype), 0.5 * max(scale, 0.2))
    grain = gaussian_blur(torch.randn((n, 1, height, width), generator=g, device=g.device,
                                      dtype=dtype).to(device), max(0.7 * scale, 0.3))
    z = _standardise(0.6 * _standardise(cloud) + 0.7 * _standardise(needles) + 0.4 * _standardise(grain))
    u = _rand((n, 3), g, device).to(dtype)
    level = 0.42 + 0.46 * u[:, 0]                      # green level, mean 0.65
    tint = 0.17 * u[:, 1]                              # cold tint: red lower, blue higher
    contrast = 0.06 + 0.07 * u[:, 2]                   # within-texture std, mean ≈ 0.095
    means = torch.stack((level - tint, level, level + 0.55 * tint), 1).view(n, 3, 1, 1)
    return (means + contrast.view(n, 1, 1, 1) * z).clamp(0, 1)
