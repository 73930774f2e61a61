"""Eidolon I–III generated on the fly (robustvit.data.mvh_conditions.eidolon) against a per-image numpy reading of
the Eidolon toolbox's PartiallyCoherentDisarray, and its invariants."""

import math

import numpy as np
import pytest
import torch

from robustvit.data import mvh_conditions as mvh
from robustvit.data.mvh_conditions import GENERATED, apply_condition, eidolon, greyscale
from robustvit.errors import RobustvitError

SIDE = 32


def _images(n: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((n, 3, 8, 8), generator=g, dtype=torch.float64)
    return torch.nn.functional.interpolate(x, size=(SIDE, SIDE), mode="bilinear", align_corners=False)


def _draws(n: int, hh: int, seed: int = 0):
    """Fixed white noise per (kind, level), as the toolbox's np.random.normal planes."""
    rng = np.random.default_rng(seed)
    table = {(kind, k): rng.standard_normal((n, 2, hh, hh)) for kind in ("coherent", "incoherent") for k in range(8)}
    return table, (lambda kind, k: torch.from_numpy(table[kind, k]))


def _np_reference(grey: np.ndarray, reach: float, coherence: float, grain: float, table, i: int) -> np.ndarray:
    """One image (h, w) in [0, 1] through the toolbox's steps, written from its source with numpy loops."""
    img = np.floor(grey * 255).clip(0, 255)
    h, w = img.shape
    hh, ww = 2 ** math.ceil(math.log2(1.5 * h)), 2 ** math.ceil(math.log2(1.5 * w))
    dh, dw = (hh - h) // 2, (ww - w) // 2
    fat = np.zeros((hh, ww))
    fat[dh:dh + h, :dw] = np.fliplr(img[:, :dw])
    fat[dh:dh + h, dw:dw + w] = img
    fat[dh:dh + h, ww - dw:] = np.fliplr(img[:, w - dw:])
    fat[:dh] = np.flipud(fat[dh:2 * dh])
    fat[hh - dh:] = np.flipud(fat[hh - 2 * dh:hh - dh])

    def conv(p, s):
        def axis(n):
            v = np.array(list(range(n // 2 + 1)) + list(range(n // 2 - n + 1, 0)), dtype=float)
            return np.exp(-v ** 2 / (2 * s ** 2)) / (np.sqrt(2 * np.pi) * s)
        k = axis(p.shape[1]) * axis(p.shape[0])[:, None]
        return np.fft.irfft(np.fft.rfft(p.flatten()) * np.fft.rfft(k.flatten()), n=p.size).reshape(p.shape)

    def blurred(z, s):
        z = 127.5 * z / np.max(np.abs(z))
        z[z < -127], z[z > 127] = -127, 127
        c = conv(z, s)
        return c - np.mean(c) / np.sqrt(np.var(c))

    max_sigma = SIDE / 4
    levels = int(math.ceil(2 * math.log(max_sigma) / math.log(2)))
    sig = [1 / math.sqrt(2) * math.sqrt(2) ** k for k in range(levels)]
    space = [conv(fat, s) for s in sig]
    dog = [space[k] - space[k + 1] for k in range(levels - 1)] + [space[-1]]
    coh = [[blurred(table["coherent", k][i, a], sig[k]) * sig[k] / max_sigma for k in range(levels)] for a in (0, 1)]
    out = np.zeros((hh, ww))
    for k in range(levels):
        dx, dy = (sum(coh[a][k:]) + coherence * blurred(table["incoherent", k][i, a], grain) for a in (0, 1))
        rows, cols = np.indices((hh, ww))
        rr = np.clip(dx * reach + rows, 0, hh - 1).astype(int)
        out += dog[k][rr, np.clip(dy * reach + cols, 0, ww - 1).astype(int)]
    return np.floor(np.clip(out[dh:dh + h, dw:dw + w], 0, 255)) / 255


@pytest.mark.parametrize("coherence", [1.0, 0.3, 0.0])
def test_matches_a_per_image_reading_of_the_toolbox(coherence):
    x = _images()
    table, draw = _draws(2, 64)
    y = eidolon(x, 4.0, coherence, 10.0, torch.Generator(), side=SIDE, draw=draw)
    grey = greyscale(x)[:, 0].numpy()
    for i in range(2):
        ref = _np_reference(grey[i], 4.0, coherence, 10.0, table, i)
        # whole grey levels; a value on a truncation edge may round the other way
        assert np.mean(np.abs(y[i, 0].numpy() - ref) > 1e-9) < 0.01
    assert torch.equal(y[:, 0], y[:, 1]) and torch.equal(y[:, 0], y[:, 2])


def test_reach_zero_is_the_finest_blur_of_the_image():
    x = _images()
    y = eidolon(x, 0.0, 1.0, 10.0, torch.Generator().manual_seed(0), side=SIDE)
    grey = greyscale(x)[:, :1]
    assert (y[:, :1] - grey).abs().mean() < 0.03                      # σ = 1/√2 blur and 8-bit steps only
    assert (eidolon(x, 16.0, 1.0, 10.0, torch.Generator().manual_seed(0), side=SIDE)[:, :1] - grey).abs().mean() > 0.05


def test_coherence_weights_the_incoherent_grain_field():
    x = _images(3)
    table, draw = _draws(3, 64)
    zero_inc = {**table, **{("incoherent", k): np.roll(table["incoherent", k], 1, axis=0) for k in range(8)}}
    other = lambda kind, k: torch.from_numpy(zero_inc[kind, k])          # noqa: E731
    # grain 2: at 32 px the grain field is as strong as the coherent stack is at 256 px with grain 10
    run = lambda c, d: eidolon(x, 0.5, c, 2.0, torch.Generator(), side=SIDE, draw=d)   # noqa: E731
    # coherence 0: the coherent stack alone — the incoherent draws do not matter; coherence 1: they do
    assert torch.equal(run(0.0, draw), run(0.0, other))
    assert not torch.equal(run(1.0, draw), run(1.0, other))
    # the toolbox adds degree × incoherent field to the coherent one: at equal reach, coherence 1.0 displaces
    # more and keeps less of the low-pass image than coherence 0.0
    base = eidolon(x, 0.0, 0.0, 10.0, torch.Generator(), side=SIDE)
    lp = lambda z: torch.nn.functional.avg_pool2d(z[:, :1], 8)          # noqa: E731
    d1 = (lp(run(1.0, draw)) - lp(base)).abs().mean()
    d0 = (lp(run(0.0, draw)) - lp(base)).abs().mean()
    assert d1 > 1.1 * d0


def test_seeded_range_shape_and_conditions(monkeypatch):
    monkeypatch.setattr(mvh, "EIDOLON_SIDE", SIDE)                   # the reference's 256 px, made small
    x = _images().float()[:, :, :20, :28]                              # not square, not the working side
    a = apply_condition(x, "eidolonII", "4-3-10", torch.Generator().manual_seed(3))
    b = apply_condition(x, "eidolonII", "4-3-10", torch.Generator().manual_seed(3))
    c = apply_condition(x, "eidolonII", "4-3-10", torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and a.dtype == x.dtype and 0 <= float(a.min()) and float(a.max()) <= 1
    assert GENERATED["eidolonI"][0] == tuple(f"{2 ** i}-10-10" for i in range(8))
    assert GENERATED["eidolonIII"][0][-1] == "128-0-10"
    with pytest.raises(RobustvitError, match="no condition"):
        apply_condition(x, "eidolonI", "3-10-10")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_path_matches_cpu_with_the_same_noise():
    x = _images()
    _, draw = _draws(2, 64)
    cpu = eidolon(x, 8.0, 0.3, 10.0, torch.Generator(), side=SIDE, draw=draw)
    gpu = eidolon(x.cuda(), 8.0, 0.3, 10.0, torch.Generator("cuda"), side=SIDE,
                  draw=lambda kind, k: draw(kind, k).cuda())
    assert gpu.is_cuda and (gpu.cpu() - cpu).abs().gt(1e-9).float().mean() < 0.01
    a = eidolon(x.cuda().float(), 8.0, 0.3, 10.0, torch.Generator("cuda").manual_seed(1))
    b = eidolon(x.cuda().float(), 8.0, 0.3, 10.0, torch.Generator("cuda").manual_seed(1))
    assert torch.equal(a, b) and a.shape == x.shape
