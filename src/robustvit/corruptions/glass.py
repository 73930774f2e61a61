"""Glass blur's local pixel shuffle, computed in parallel but with the reference's sequential semantics.

The reference (Hendrycks & Dietterich 2019, arXiv:1903.12261) walks the pixels from (H−d, W−d) down to
(d+1, d+1), setting pixel p to the *current* value of its source s(p) = p + (dy, dx), dy, dx uniform in
−d…d−1: ``new[p] = new[s(p)]`` if s(p) was visited before p, else ``old[s(p)]``, so values travel along
chains. Pointer doubling resolves all chains at once (log₂ of the longest chain gathers): *exactly* the
sequential result for the same offsets, batched on any device; only the random stream differs from numpy's.
"""

from __future__ import annotations

import torch


def glass_offsets(n: int, h: int, w: int, dist: int, iters: int, generator: torch.Generator,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """The random offsets of ``iters`` passes, (iters, N, 2, rows, cols) int64: (dx, dy) uniform in
    −dist…dist−1 for every visited pixel (rows ``dist+1…H−dist``, cols ``dist+1…W−dist``)."""
    d = int(dist)
    shape = (n, 2, max(0, h - 2 * d), max(0, w - 2 * d))
    if min(shape[2:]) <= 0:
        return torch.zeros((int(iters), *shape), dtype=torch.int64, device=device)
    passes = [torch.randint(-d, d, shape, generator=generator, device=generator.device) for _ in range(int(iters))]
    return torch.stack(passes).to(device if device is not None else generator.device)


def _pass_sources(off: torch.Tensor, h: int, w: int, d: int) -> torch.Tensor:
    """Flat source index (N, H·W) of every pixel after one sequential pass with offsets ``off``
    (N, 2, rows, cols) (identity outside the walk)."""
    n, _, nr, nc = off.shape
    ident = torch.arange(h * w, device=off.device).expand(n, h * w).clone()
    if nr <= 0 or nc <= 0:
        return ident
    ph = torch.arange(d + 1, h - d + 1, device=off.device).view(1, nr, 1)        # visited rows (any order)
    pw = torch.arange(d + 1, w - d + 1, device=off.device).view(1, 1, nc)
    sh, sw = ph + off[:, 1], pw + off[:, 0]                                     # offsets are (dx, dy)
    # the source was visited earlier iff it lies in the walk and comes later in raster order
    in_walk = (sh <= h - d) & (sw >= d + 1) & (sw <= w - d)
    earlier = in_walk & ((sh > ph) | ((sh == ph) & (sw > pw)))
    p_flat = (ph * w + pw).expand(n, nr, nc)
    s_flat = sh * w + sw
    nxt = ident.clone().scatter_(1, p_flat.reshape(n, -1), torch.where(earlier, s_flat, p_flat).reshape(n, -1))
    src = ident.scatter_(1, p_flat.reshape(n, -1), s_flat.reshape(n, -1))
    # pointer doubling: nxt → the last pixel of p's chain (whose source was not yet visited)
    for _ in range(64):
        nxt2 = nxt.gather(1, nxt)
        if torch.equal(nxt2, nxt):
            break
        nxt = nxt2
    return src.gather(1, nxt)


def shuffle_with_offsets(x: torch.Tensor, dist: int, offsets: torch.Tensor) -> torch.Tensor:
    """Apply the passes of :func:`glass_offsets` (in order) to (N, C, H, W)."""
    n, c, h, w = x.shape
    flat = x.reshape(n, c, h * w)
    for off in offsets.to(x.device):
        src = _pass_sources(off, h, w, int(dist))
        flat = flat.gather(2, src.unsqueeze(1).expand(n, c, h * w))
    return flat.reshape(n, c, h, w)


def glass_shuffle(x: torch.Tensor, dist: int, iters: int, generator: torch.Generator) -> torch.Tensor:
    """Apply ``iters`` passes of the reference's local pixel walk with max displacement ``dist`` to (N, C, H, W)."""
    n, _, h, w = x.shape
    return shuffle_with_offsets(x, dist, glass_offsets(n, h, w, dist, iters, generator, x.device))
