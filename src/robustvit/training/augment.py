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
