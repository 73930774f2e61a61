"""Batched, seeded training augmentation on the device: random crop with zero padding or RandomResizedCrop,
horizontal flip, random rotation and colour jitter (torchvision's definitions, drawn from one generator for the
whole batch), plus timm's DeiT augmentations (:class:`TimmAugment`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, padding: int = 4, flip: bool = True) -> torch.Tensor:
    """Each image (N, C, H, W) zero-padded by ``padding``, cropped back at a random offset (one gather for the
    batch), then flipped with p=½; ``gen`` lives on ``x.device``."""
    n, _, h, w = x.shape
    if padding > 0:
        xp = F.pad(x, (padding,) * 4)
        oy = torch.randint(0, 2 * padding + 1, (n,), generator=gen, device=x.device)
        ox = torch.randint(0, 2 * padding + 1, (n,), generator=gen, device=x.device)
        rows = (oy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
        cols = (ox[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
        batch = torch.arange(n, device=x.device)[:, None, None, None]
        chan = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
        x = xp[batch, chan, rows, cols]
    if flip:
        f = torch.rand(n, generator=gen, device=x.device) < 0.5
        x = torch.where(f[:, None, None, None], x.flip(-1), x)
    return x


def random_resized_crop(x: torch.Tensor, gen: torch.Generator, scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3), attempts: int = 10) -> torch.Tensor:
    """torchvision's ``RandomResizedCrop`` at the input size, batched: per image, up to 10 draws of an area
    fraction U(scale) and a log-uniform aspect ratio; the first box that fits is cropped at a uniform offset
    (else the whole image, its ratio clamped to ``ratio``, centred) and resized bilinearly (``grid_sample``, no
    antialiasing)."""
    n, _, h, w = x.shape
    dev = x.device
    area = h * w * (scale[0] + (scale[1] - scale[0]) * torch.rand(n, attempts, generator=gen, device=dev))
    ar = torch.exp(math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0]))
                   * torch.rand(n, attempts, generator=gen, device=dev))
    cw = torch.sqrt(area * ar).round()
    ch = torch.sqrt(area / ar).round()
    ok = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((n,), -1, device=dev))
    idx = first.clamp_min(0)[:, None]
    cw, ch = cw.gather(1, idx)[:, 0], ch.gather(1, idx)[:, 0]
    # fallback (no box fits): the whole image with its ratio clamped to the range, centred
    fw, fh = float(w), float(h)
    if w / h < ratio[0]:
        fh = float(round(w / ratio[0]))
    elif w / h > ratio[1]:
        fw, fh = float(round(h * ratio[1])), float(h)
    fell = first < 0
    cw, ch = torch.where(fell, torch.full_like(cw, fw), cw), torch.where(fell, torch.full_like(ch, fh), ch)
    top = torch.floor(torch.rand(n, generator=gen, device=dev) * (h - ch + 1))
    left = torch.floor(torch.rand(n, generator=gen, device=dev) * (w - cw + 1))
    top, left = torch.where(fell, torch.round((h - ch) / 2), top), torch.where(fell, torch.round((w - cw) / 2), left)
    # affine grid mapping the output onto the box [left, left + cw) × [top, top + ch) (align_corners=False)
    theta = torch.zeros(n, 2, 3, device=dev, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2] = cw / w, (2 * left + cw) / w - 1
    theta[:, 1, 1], theta[:, 1, 2] = ch / h, (2 * top + ch) / h - 1
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_rotation(x: torch.Tensor, gen: torch.Generator, degrees: float) -> torch.Tensor:
    """torchvision's ``RandomRotation(degrees)``: each image rotated about its centre by U(−d, d) degrees,
    nearest-neighbour sampling, zero fill outside the image."""
    n, _, h, w = x.shape
    a = (torch.rand(n, generator=gen, device=x.device) * 2 - 1) * math.radians(degrees)
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    theta = torch.zeros(n, 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin * h / w
    theta[:, 1, 0], theta[:, 1, 1] = sin * w / h, cos
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """Luma with torchvision's ``rgb_to_grayscale`` weights (0.2989, 0.587, 0.114): (N, 1, H, W)."""
    return (0.2989 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def color_jitter(x: torch.Tensor, gen: torch.Generator, strength: float) -> torch.Tensor:
    """torchvision's ``ColorJitter(brightness=s, contrast=s, saturation=s)`` (timm's ``color_jitter`` s): per
    image, factors U(max(0, 1 − s), 1 + s) applied in a random order, each followed by a clip to [0, 1]:
    brightness x·b; contrast blend with the image's mean luma; saturation blend with its luma image."""
    n, dev = x.shape[0], x.device
    lo, hi = max(0.0, 1 - strength), 1 + strength
    f = (lo + (hi - lo) * torch.rand(n, 3, generator=gen, device=dev)).to(x.dtype).view(n, 3, 1, 1, 1)
    order = torch.rand(n, 3, generator=gen, device=dev).argsort(1)
    for k in range(3):
        op = order[:, k].view(n, 1, 1, 1)
        b = (x * f[:, 0]).clamp(0, 1)
        c = (f[:, 1] * x + (1 - f[:, 1]) * _grey(x).mean(dim=(1, 2, 3), keepdim=True)).clamp(0, 1)
        s = (f[:, 2] * x + (1 - f[:, 2]) * _grey(x)).clamp(0, 1)
        x = torch.where(op == 0, b, torch.where(op == 1, c, s))
    return x


def augment_batch(x: torch.Tensor, gen: torch.Generator, *, padding: int = 4, flip: bool = True,
                  crop_scale: tuple[float, float] | None = None, crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
                  rotation: float = 0.0, jitter: float = 0.0) -> torch.Tensor:
    """RandomResizedCrop (``crop_scale``) or pad-and-crop (``padding``), flip, rotation, colour jitter. With only
    padding and flip it draws exactly what :func:`random_crop_flip` draws."""
    if crop_scale is not None:
        x, padding = random_resized_crop(x, gen, crop_scale, crop_ratio), 0
    x = random_crop_flip(x, gen, padding, flip)
    if rotation > 0:
        x = random_rotation(x, gen, rotation)
    if jitter > 0:
        x = color_jitter(x, gen, jitter)
    return x


class TimmAugment:
    """DeiT's augmentations (Touvron et al., arXiv:2012.12877) with timm's implementations: RandAugment (PIL, per
    image), RandomErasing (``mode="pixel"`` in normalised space as DeiT, mapped back to [0, 1] and clipped) and
    MixUp/CutMix (soft targets with label smoothing). timm draws from Python's, NumPy's and torch's global
    generators; the trainer seeds them per epoch (``reseed``), so a run replays."""

    def __init__(self, num_classes: int, mean: tuple[float, ...], std: tuple[float, ...], rand_augment: str | None = None,
                 mixup: float = 0.0, cutmix: float = 0.0, random_erasing: float = 0.0, label_smoothing: float = 0.1,
                 image_size: int = 32) -> None:
        from timm.data import Mixup, rand_augment_transform
        from timm.data.random_erasing import RandomErasing

        self.mean = torch.tensor(mean).view(1, 3, 1, 1)
        self.std = torch.tensor(std).view(1, 3, 1, 1)
        hp = {"translate_const": int(image_size * 0.45), "img_mean": tuple(round(255 * m) for m in mean)}
        self.rand_augment = rand_augment_transform(rand_augment, hp) if rand_augment else None
        self.erasing = RandomErasing(random_erasing, mode="pixel", device="cpu") if random_erasing > 0 else None
        self.mixup = (Mixup(mixup_alpha=mixup, cutmix_alpha=cutmix, label_smoothing=label_smoothing,
                            num_classes=num_classes) if mixup > 0 or cutmix > 0 else None)

    @property
    def active(self) -> bool:
        return any(t is not None for t in (self.rand_augment, self.erasing, self.mixup))

    @staticmethod
    def reseed(seed: int) -> None:
        import random

        import numpy as np

        random.seed(seed)
        np.random.seed(seed % 2**32)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 3, H, W) CPU images in [0, 1] and labels → augmented images and labels (soft with MixUp/CutMix)."""
        if self.rand_augment is not None:
            x = self._rand_augment(x)
        if self.erasing is not None:
            z = (x - self.mean) / self.std
            x = (self.erasing(z) * self.std + self.mean).clamp_(0, 1)
        if self.mixup is not None and len(x) % 2 == 0:
            x, y = self.mixup(x, y)
        elif self.mixup is not None:   # timm's Mixup needs an even batch: smooth the odd batch's targets only
            from timm.data.mixup import one_hot

            off = self.mixup.label_smoothing / self.mixup.num_classes
            y = one_hot(y, self.mixup.num_classes, on_value=1 - self.mixup.label_smoothing + off, off_value=off)
        return x, y

    def _rand_augment(self, x: torch.Tensor) -> torch.Tensor:
        import numpy as np
        from PIL import Image

        u8 = (x * 255).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        out = [torch.from_numpy(np.asarray(self.rand_augment(Image.fromarray(img))).copy())
               for img in u8]   # timm's RandAugment works on PIL images, one at a time (as in its data loaders)
        return torch.stack(out).permute(0, 3, 1, 2).float().div_(255)
