"""Batched, seeded training augmentation on the device: random crop with zero padding and horizontal flip."""

from __future__ import annotations

import torch


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, padding: int = 4, flip: bool = True) -> torch.Tensor:
    """Each image is zero-padded by ``padding`` and cropped back at a random offset, then flipped with p=½.

    ``x``: (N, C, H, W); ``gen`` lives on ``x.device``. One gather for the whole batch.
    """
    n, _, h, w = x.shape
    if padding > 0:
        xp = torch.nn.functional.pad(x, (padding,) * 4)
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


class TimmAugment:
    """DeiT-style augmentation with timm's own implementations (Touvron et al., arXiv:2012.12877):
    RandAugment (``timm.data.rand_augment_transform``, PIL, per image), RandomErasing
    (``timm.data.random_erasing.RandomErasing``, ``mode="pixel"`` applied in normalised space as in DeiT,
    then mapped back to [0, 1] and clipped) and MixUp/CutMix (``timm.data.Mixup``, soft targets with label
    smoothing). timm draws from Python's ``random``, NumPy's and torch's global generators; the trainer
    seeds them per epoch (``reseed``), so a run replays.
    """

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
        from PIL import Image

        u8 = (x * 255).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        out = [torch.from_numpy(__import__("numpy").asarray(self.rand_augment(Image.fromarray(img))).copy())
               for img in u8]   # timm's RandAugment works on PIL images, one at a time (as in its data loaders)
        return torch.stack(out).permute(0, 3, 1, 2).float().div_(255)
