"""The corruptions of CIFAR-10-C̄ that ImageNet-C̄ lacks (Mintun, Kirillov & Xie, NeurIPS 2021, arXiv:2102.11273):
circular motion blur, lines, pinch and twirl, ripple and transverse chromatic aberration, group ``cifar10_c_bar``
(with the five shared with ImageNet-C̄, :mod:`robustvit.corruptions.cbar`).

Each follows ``imagenet_c_bar/corrupt.py`` of facebookresearch/augmentation-corruption, as :mod:`~.cbar` does,
with the levels of its ``cifar10_c_bar.csv`` for both presets (the reference generates CIFAR-10-C̄ only). Its
resampling is reproduced: bilinear reads with black outside (its ``bilinear_interpolation``), scipy's
``zoom(prefilter=False)`` (cubic B-spline weights on the raw values, mirrored taps) and ``rotate(reshape=False)``
(mirror-boundary prefilter, then the spline, black outside). Lengths in units of its side S (32) use the shorter
side. Deviations: no rounding to uint8 (the reference truncates, or for the zoom rounds, its output, lines after
each line; ``jpeg_quality`` adds the step of the released files).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from robustvit.corruptions.cbar import _bilinear, _col, _grid
from robustvit.corruptions.sampling import rand
from robustvit.corruptions.spec import CorruptionParams, Draw, _levels, corruption

GROUP = "cifar10_c_bar"
Size = tuple[int, int]


# ---------------------------------------------------------------- ripple
def _sample_ripple(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"wavelengths": rand((n, 2), g, like) * 0.2 + 0.1, "phases": rand((n, 2), g, like) * 2 * math.pi}


@corruption("ripple", GROUP, ("level",), _levels((5.5, 6.0, 6.5, 7.5, 8.0)), sample=_sample_ripple)
def ripple(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x read at (y + A·sin(2πy/λ_y + φ_y), x + A·sin(2πx/λ_x + φ_x)), A = 0.025·level/10 · S, wavelengths
    U(0.1, 0.3)·S."""
    n, _, h, w = x.shape
    s = min(h, w)
    amp = p.level * 0.025 / 10 * s
    lam, ph = d["wavelengths"].to(x.dtype) * s, d["phases"].to(x.dtype)
    ys, xs = _grid(x)
    rows = ys + amp * torch.sin(2 * math.pi * ys / _col(lam[:, 0]) + _col(ph[:, 0]))
    cols = xs + amp * torch.sin(2 * math.pi * xs / _col(lam[:, 1]) + _col(ph[:, 1]))
    return _bilinear(x, rows.expand(n, h, w), cols.expand(n, h, w))


# ---------------------------------------------------------------- pinch_and_twirl
def _cells_per_axis(p: CorruptionParams) -> int:
    """The reference's ``num_per_axis``: 5 at its 224-px side, else 3."""
    return 5 if p.preset == "imagenet" else 3


def _sample_pinch(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    k = _cells_per_axis(p)
    return {"signs": torch.where(rand((n, k, k), g, like) < 0.5, -1.0, 1.0).to(like.dtype)}


@corruption("pinch_and_twirl", GROUP, ("level",), _levels((5.5, 6.0, 6.5, 8.5, 10.0)), sample=_sample_pinch)
def pinch_and_twirl(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """k × k cells (k = 3, or 5 for the imagenet preset) of side S // k, each warped inside its inscribed disc:
    a point at distance r from the centre moves to r·sin(π/2·r/R)^(−a) and turns by ±(π/2·level/10)·(1 − r/R)²,
    a = 0.4·level/10 + 0.1. Cells are warped one after the other (column-major), each reading the image as the
    cells before left it, as the reference."""
    n, _, h, w = x.shape
    k = _cells_per_axis(p)
    grid = min(x.shape[-2:]) // k
    radius = grid / 2
    amount = p.level * 0.4 / 10 + 0.1
    angles = d["signs"].to(x.dtype) * (p.level * (math.pi / 2) / 10)
    yy, xx = torch.meshgrid(torch.arange(grid, dtype=x.dtype, device=x.device),
                            torch.arange(grid, dtype=x.dtype, device=x.device), indexing="ij")
    dy, dx = yy - radius, xx - radius                     # (row, col) offsets from a cell's centre
    dist = torch.sqrt(dy * dy + dx * dx)
    warp = (dist <= radius) & (torch.round(dist * 1000) != 0)
    dd = dist / radius
    t = torch.where(warp, torch.sin(math.pi * 0.5 * dd).clamp_min(1e-300) ** (-amount), torch.ones_like(dd))
    e2 = (1 - dd) ** 2
    out = x.clone()
    for i in range(k):                                    # columns l:r
        for j in range(k):                                # rows u:d
            u, l = j * grid, i * grid
            a = torch.where(warp, angles[:, i, j, None, None] * e2, torch.zeros_like(e2))     # (n, g, g)
            sy, sx = dy * t, dx * t
            rows = u + radius + sy * torch.cos(a) - sx * torch.sin(a)
            cols = l + radius + sy * torch.sin(a) + sx * torch.cos(a)
            out[:, :, u:u + grid, l:l + grid] = _bilinear(out, rows, cols)
    return out


# ---------------------------------------------------------------- transverse_chromatic_abberation
def _bspline_weights(t: torch.Tensor) -> torch.Tensor:
    """Cubic B-spline weights of the taps floor − 1 … floor + 2 at fractional position t, (..., 4)."""
    return torch.stack(((1 - t) ** 3 / 6, (3 * t ** 3 - 6 * t ** 2 + 4) / 6, (-3 * t ** 3 + 3 * t ** 2 + 3 * t + 1) / 6,
                        t ** 3 / 6), dim=-1)


def _mirror(i: torch.Tensor, n: int) -> torch.Tensor:
    """scipy's ``mirror`` extension of indices (d c b | a b c d | c b a)."""
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = i.abs() % period
    return torch.where(i >= n, period - i, i)


def _spline_taps(coords: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The 4 mirrored tap indices and cubic B-spline weights (len(coords), 4) at 1-D ``coords`` of a length-n axis."""
    f = torch.floor(coords)
    return _mirror(f.long()[:, None] + torch.arange(-1, 3, device=coords.device), n), _bspline_weights(coords - f)


def _spline_matrix(coords: torch.Tensor, n: int) -> torch.Tensor:
    """(len(coords), n) M with ``M @ c`` the cubic B-spline with coefficients c (mirrored taps) at coords."""
    taps, w = _spline_taps(coords, n)
    return torch.zeros(len(coords), n, dtype=coords.dtype, device=coords.device).scatter_add_(1, taps, w)


@lru_cache(maxsize=32)
def _zoom_matrix(n: int, scale: float) -> torch.Tensor:
    """(n, n) float64: scipy ``zoom(v, scale, prefilter=False)`` of a length-n axis (``round(n·scale)`` samples at
    i·(n − 1)/(Z − 1)), centre-cropped to n as the reference (``edge = (Z − n) // 2``)."""
    z = round(n * scale)
    edge = (z - n) // 2
    coords = (torch.arange(n, dtype=torch.float64) + edge) * ((n - 1) / max(z - 1, 1))
    return _spline_matrix(coords, n)


def _sample_tca(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"order": torch.argsort(rand((n, 3), g, like), dim=1)}     # a uniform permutation per image


@corruption("transverse_chromatic_abberation", GROUP, ("level",), _levels((1.0, 2.0, 5.0, 9.0, 10.0)),
            sample=_sample_tca, aliases=("transverse_chromatic_aberration",))
def transverse_chromatic_abberation(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Each channel zoomed about the centre by one of 1, 1 + s/2, 1 + s (s = 0.5·level/10; permuted per
    image) with scipy's ``zoom(prefilter=False)`` (cubic B-spline weights on the raw values) and centre-cropped."""
    n, c, h, w = x.shape
    s = p.level * 0.5 / 10
    scales = (1.0, 1.0 + s / 2, 1.0 + s)
    mh = torch.stack([_zoom_matrix(h, sc) for sc in scales]).to(device=x.device, dtype=x.dtype)   # (3, h, h)
    mw = torch.stack([_zoom_matrix(w, sc) for sc in scales]).to(device=x.device, dtype=x.dtype)
    which = d["order"].to(x.device)[:, :c]                                                       # (n, c)
    return mh[which] @ x @ mw[which].transpose(-1, -2)


# ---------------------------------------------------------------- circular_motion_blur
@lru_cache(maxsize=32)
def _prefilter_matrix(n: int) -> torch.Tensor:
    """(n, n) float64: scipy's cubic-spline prefilter of a length-n axis (mirror boundary), the inverse of the
    B-spline's sampling matrix."""
    idx = torch.arange(n)
    b = torch.zeros(n, n, dtype=torch.float64)
    for off, wt in ((-1, 1 / 6), (0, 4 / 6), (1, 1 / 6)):
        b.index_put_((idx, _mirror(idx + off, n)), torch.full((n,), wt, dtype=torch.float64), accumulate=True)
    return torch.linalg.inv(b)


@lru_cache(maxsize=128)   # the 21 rotations of each of the 5 levels
def _rotation_taps(h: int, w: int, degrees: float) -> tuple[torch.Tensor, torch.Tensor]:
    """scipy ``rotate(reshape=False)`` at ``degrees``: for every output pixel, the 16 flat input indices (h·w, 16)
    and spline weights (h·w, 16) (zero outside the input)."""
    th = math.radians(degrees)
    ii, jj = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    ci, cj = (h - 1) / 2, (w - 1) / 2
    r = math.cos(th) * (ii - ci) + math.sin(th) * (jj - cj) + ci
    c = -math.sin(th) * (ii - ci) + math.cos(th) * (jj - cj) + cj
    inside = ((r >= 0) & (r <= h - 1) & (c >= 0) & (c <= w - 1)).reshape(-1, 1)
    (rows, wr), (cols, wc) = _spline_taps(r.reshape(-1), h), _spline_taps(c.reshape(-1), w)
    index = (rows[:, :, None] * w + cols[:, None, :]).reshape(-1, 16)
    weight = (wr[:, :, None] * wc[:, None, :]).reshape(-1, 16) * inside
    return index, weight


#: The 21 rotations' offsets t = −1 … 1 (times the level's angle) and their weights exp(−2t²).
_STEPS = [2 * i / 20 - 1 for i in range(21)]
_FACTORS = [math.exp(-2 * t * t) for t in _STEPS]
#: Images up to this many pixels are blurred by one (h·w, h·w) matrix (64 × 64: 128 MB in float64 to build).
_DENSE_PIXELS = 4096


@lru_cache(maxsize=128)
def _device_taps(h: int, w: int, degrees: float, device: torch.device, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_rotation_taps` on ``device``: the flat indices (h·w·16,) and the weights (h·w, 16) in ``dtype``."""
    index, weight = _rotation_taps(h, w, degrees)
    return index.reshape(-1).to(device), weight.to(device=device, dtype=dtype)


@lru_cache(maxsize=16)
def _blur_matrix(h: int, w: int, amount: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The whole blur of an h × w image as one (h·w, h·w) matrix, built in float64: the weighted mean of the 21
    rotations' spline taps applied to the prefiltered image (every step is linear)."""
    k = torch.zeros(h * w, h * w, dtype=torch.float64)
    rows = torch.arange(h * w)[:, None].expand(-1, 16)
    for t, f in zip(_STEPS, _FACTORS):
        index, weight = _rotation_taps(h, w, t * amount)
        k.index_put_((rows, index), f * weight, accumulate=True)
    prefilter = torch.kron(_prefilter_matrix(h), _prefilter_matrix(w))     # flat coef = (P_h ⊗ P_w) · flat x
    return (k @ prefilter / sum(_FACTORS)).to(device=device, dtype=dtype)


@corruption("circular_motion_blur", GROUP, ("level",), _levels((2.8, 3.6, 4.4, 5.2, 6.0)))
def circular_motion_blur(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """The mean of 21 rotations about the centre by t·(15·level/10) degrees, t = −1 … 1, weighted exp(−2t²),
    each scipy's ``rotate(reshape=False)`` (cubic spline, black outside). Deterministic. Images of up to
    :data:`_DENSE_PIXELS` pixels (CIFAR's 32 × 32) take one matrix product (:func:`_blur_matrix`), larger ones
    21 gathers of 16 taps."""
    n, c, h, w = x.shape
    amount = p.level * 15 / 10
    if h * w <= _DENSE_PIXELS:
        return (x.reshape(n * c, h * w) @ _blur_matrix(h, w, amount, x.device, x.dtype).T).view(n, c, h, w)
    coef = (_prefilter_matrix(h).to(device=x.device, dtype=x.dtype) @ x
            @ _prefilter_matrix(w).to(device=x.device, dtype=x.dtype).T).reshape(n, c, h * w)
    out = torch.zeros_like(coef)
    for t, f in zip(_STEPS, _FACTORS):
        index, weight = _device_taps(h, w, t * amount, x.device, x.dtype)
        out += f * (coef[:, :, index].view(n, c, h * w, 16) * weight).sum(-1)
    return (out / sum(_FACTORS)).view(n, c, h, w)


# ---------------------------------------------------------------- lines
def line_aa(r1: torch.Tensor, c1: torch.Tensor, r2: torch.Tensor, c2: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-image's ``draw.line_aa`` (Zingl's anti-aliased line; as in 0.16.2, the version the reference pins:
    the distance normaliser ``ed`` a float32 square root) for many segments at once: integer end points (M,) →
    rows, columns, values and a validity mask (M, T), in the order it emits them."""
    dx, dy = (c1 - c2).abs(), (r1 - r2).abs()
    sx = torch.where(c1 < c2, 1, -1)
    sy = torch.where(r1 < r2, 1, -1)
    ed = torch.where(dx + dy == 0, 1.0, torch.sqrt((dx * dx + dy * dy).double()).float().double())
    x, y, err = c1.clone(), r1.clone(), dx - dy
    active = torch.ones_like(dx, dtype=torch.bool)
    rows, cols, vals, valid = [], [], [], []

    def emit(r: torch.Tensor, c: torch.Tensor, v: torch.Tensor, ok: torch.Tensor) -> None:
        rows.append(r.clone()); cols.append(c.clone()); vals.append(1 - v); valid.append(ok.clone())  # noqa: E702

    for _ in range(int(2 * (dx + dy).max()) + 2 if len(dx) else 0):
        emit(y, x, (err - dx + dy).abs() / ed, active)
        e, x_prime = err.clone(), x.clone()
        step_x = active & (2 * e >= -dx)
        stop = step_x & (x == c2)
        active = active & ~stop
        step_x = step_x & ~stop
        emit(y + sy, x, (e + dy).abs() / ed, step_x & (e + dy < ed))
        err = torch.where(step_x, err - dy, err)
        x = torch.where(step_x, x + sx, x)
        step_y = active & (2 * e <= dy)
        stop = step_y & (y == r2)
        active = active & ~stop
        step_y = step_y & ~stop
        emit(y, x_prime + sx, (dx - e).abs() / ed, step_y & (dx - e < ed))
        err = torch.where(step_y, err + dx, err)
        y = torch.where(step_y, y + sy, y)
    if not rows:
        z = torch.zeros(len(dx), 0, dtype=torch.long, device=dx.device)
        return z, z, z.double(), z.bool()
    return torch.stack(rows, 1), torch.stack(cols, 1), torch.stack(vals, 1), torch.stack(valid, 1)


def _sample_lines(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    k = int(p.level * 1.0 / 10 * min(size))
    return {"angle": rand((n,), g, like) * 2 * math.pi, "variation": rand((n,), g, like) * 0.9 + 0.1,
            "lines": rand((n, k, 3), g, like)}


@corruption("lines", GROUP, ("level",), _levels((0.5, 1.0, 1.5, 2.0, 2.5)), sample=_sample_lines)
def lines(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """int(0.1·level·S) anti-aliased grey (128/255) lines of half-length S through uniform points, at angle
    θ + 2π·v·(u − ½) (θ, v ∈ U(0.1, 1) per image), rasterised by scikit-image's ``line_aa`` and blended
    (1 − a)·x + a·128/255 one line after the other (a pixel a line emits twice takes its last value, as the
    reference's array assignment); lines' end points truncated to integers as the reference."""
    n, c, h, w = x.shape
    s = min(h, w)
    u = d["lines"].to(device=x.device, dtype=torch.float64)               # (n, k, 3): row, column, angle draws
    k = u.shape[1]
    angle, variation = (d[key].to(x.device).double()[:, None] for key in ("angle", "variation"))
    ang = angle + 2 * math.pi * variation * (u[..., 2] - 0.5)
    xr, yc = s * u[..., 0], s * u[..., 1]
    ds, dc = torch.sin(ang) * s, torch.cos(ang) * s
    ends = [torch.trunc(v).long().reshape(-1) for v in (xr - dc, yc - ds, xr + dc, yc + ds)]
    rr, cc, val, ok = line_aa(*ends)                                      # (n·k, T)
    t = rr.shape[1]
    ok = ok & (rr >= 0) & (cc >= 0) & (rr < h) & (cc < w)
    pix = torch.where(ok, rr * w + cc, h * w).view(n, k, t)
    order = torch.arange(t, device=x.device).expand(n, t)
    out = x.reshape(n, c, h * w).clone()
    for j in range(k):
        last = torch.full((n, h * w + 1), -1, dtype=torch.long, device=x.device)
        last = last.scatter_reduce_(1, pix[:, j], order, reduce="amax")[:, :h * w]   # a pixel's last emission wins
        a = torch.gather(val.view(n, k, t)[:, j], 1, last.clamp_min(0)).to(x.dtype)
        a = torch.where(last >= 0, a, torch.zeros_like(a))[:, None]
        out = (1 - a) * out + a * (128 / 255)
    return out.view(n, c, h, w)
