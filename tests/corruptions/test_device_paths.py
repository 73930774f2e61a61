"""The device paths of the corruptions, shown on the CPU: JPEG's uint8 route (what a CUDA batch takes) gives
the CPU path's bits, and the kernels' order-free formulations (what CUDA runs instead of unordered atomic
adds) give the sums of the CPU's fast paths."""

from __future__ import annotations

import functools
import math

import pytest
import torch

import robustvit.corruptions.frost as frost
import robustvit.corruptions.functional as functional
import robustvit.corruptions.jpeg as jpeg
from robustvit import RobustvitError
from robustvit.corruptions import corrupt, frost_texture, jpeg_roundtrip
from robustvit.corruptions.functional import _box_sum, _pil_box_members
from robustvit.corruptions.geometry import merge_taps, motion_kernel, motion_offsets


def _natural(n: int, h: int, w: int, seed: int) -> torch.Tensor:
    """Smooth gradients, a disc, flat areas at 0 and 1, 8-bit levels and rounding ties (k + ½)/255."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    disc = ((yy - 0.5) ** 2 + (xx - 0.4) ** 2 < 0.06).float()
    base = torch.stack([xx, yy, 0.3 + 0.5 * disc]).expand(n, 3, h, w).clone()
    base += 0.05 * torch.randn(n, 3, h, w, generator=g)
    base[:, :, : h // 4] = torch.randint(0, 256, (n, 3, h // 4, w), generator=g) / 255        # exact levels
    ties = (torch.randint(0, 255, (n, 3, h // 4, w), generator=g) + 0.5) / 255
    base[:, :, h // 4: h // 2] = ties
    base[:, :, -3:] = 1.0
    base[:, :, :, :2] = 0.0
    return base.clamp(0, 1)


def _inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    natural = _natural(3, 40, 48, 1)
    if dtype == torch.float64:      # the ties and levels computed in float64, not float32 values widened
        natural = _natural(3, 40, 48, 1).double()
        natural[:, :, :10] = torch.randint(0, 256, (3, 3, 10, 48), generator=g, dtype=torch.float64) / 255
        natural[:, :, 10:20] = (torch.randint(0, 255, (3, 3, 10, 48), generator=g, dtype=torch.float64) + 0.5) / 255
    return [torch.rand(4, 3, 24, 40, generator=g, dtype=dtype), natural.to(dtype)]


@pytest.mark.parametrize("rounding", ["round", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_jpeg_uint8_route_equals_the_cpu_path(dtype, rounding):
    for x in _inputs(dtype):
        for q in (10, 85):
            via = jpeg._roundtrip_via_uint8(x, q, rounding)
            assert via.dtype == dtype and via.shape == x.shape
            assert torch.equal(via, jpeg_roundtrip(x, q, rounding=rounding)), (dtype, rounding, q)


def test_jpeg_uint8_route_layouts_chunks_and_empty_batches():
    x = _natural(jpeg._chunk_size(3 * 32 * 32) + 2, 32, 32, 3)           # two chunks
    for layout in (torch.contiguous_format, torch.channels_last):
        xl = x.contiguous(memory_format=layout)
        assert torch.equal(jpeg._roundtrip_via_uint8(xl, 30, "floor"), jpeg_roundtrip(x, 30, rounding="floor"))
    sliced = x[::2, :, 1:-1, 2:]                                             # non-dense strides
    assert torch.equal(jpeg._roundtrip_via_uint8(sliced, 30, "round"), jpeg_roundtrip(sliced.contiguous(), 30))
    assert jpeg._roundtrip_via_uint8(x[:0], 30, "round").shape == (0, 3, 32, 32)


@pytest.mark.parametrize("bad", [1.5, -0.25, math.nan])
def test_jpeg_uint8_route_checks_the_range(bad):
    x = torch.rand(2, 3, 16, 16)
    x[1, 2, 3, 4] = bad
    with pytest.raises(RobustvitError, match=r"\[0, 1\]"):
        jpeg._roundtrip_via_uint8(x, 50, "round")


def test_jpeg_uint8_route_codes_on_the_cpu_only(monkeypatch):
    """The route hands torchvision CPU uint8 images only, and never asks for its (nvjpeg) device decoder."""
    if jpeg.encode_jpeg is None:
        pytest.skip("torchvision without image codecs")
    seen: list[tuple[str, torch.device, torch.dtype]] = []
    encode, decode = jpeg.encode_jpeg, jpeg.decode_jpeg

    def checked_encode(images, **kw):
        seen.extend(("encode", t.device, t.dtype) for t in images)
        return encode(images, **kw)

    def checked_decode(data, **kw):
        assert "device" not in kw, kw
        seen.extend(("decode", t.device, t.dtype) for t in data)
        return decode(data, **kw)

    monkeypatch.setattr(jpeg, "encode_jpeg", checked_encode)
    monkeypatch.setattr(jpeg, "decode_jpeg", checked_decode)
    x = _natural(3, 24, 24, 0)
    expected = jpeg_roundtrip(x, 40)
    assert torch.equal(jpeg._roundtrip_via_uint8(x, 40, "round"), expected)
    assert {s[0] for s in seen} == {"encode", "decode"}
    assert all(device.type == "cpu" and dtype == torch.uint8 for _, device, dtype in seen), seen


# ---------------------------------------------------------------- order-free sums
def _motion_taps(n: int, radius: float, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=g, dtype=torch.float64) * 360 - 180
    angle[:4] = torch.tensor([0.0, 45.0, -90.0, 30.0], dtype=torch.float64)
    k = motion_kernel(radius, radius / 2)
    dy, dx = motion_offsets(k.numel(), angle)
    pos = torch.remainder(-dy, size) * size + torch.remainder(-dx, size)
    return pos, k.expand(n, -1).to(torch.float32).contiguous()


@pytest.mark.parametrize("radius", [3, 10, 20.5])
def test_merged_motion_taps_give_the_cpu_kernel_in_any_order(radius):
    """CUDA adds a row's taps in an arbitrary order: with the merged weights every order gives the CPU's bits."""
    pos, w = _motion_taps(16, radius, 64, 0)
    merged = merge_taps(pos, w)
    cpu = torch.zeros(16, 64 * 64).scatter_add_(1, pos, w)                 # the CPU's (ordered) kernel
    assert torch.equal(torch.zeros_like(cpu).scatter_add_(1, pos, merged), cpu)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        perm = torch.randperm(pos.shape[1], generator=g)
        shuffled = torch.zeros_like(cpu).scatter_add_(1, pos[:, perm], merged[:, perm])
        assert torch.equal(shuffled, cpu)
    for row_pos, row_w in zip(pos, merged):             # one nonzero weight per position
        nz = row_pos[row_w != 0]
        assert nz.unique().numel() == nz.numel()
    assert any(row.unique().numel() < row.numel() for row in pos)       # there were duplicate positions
    ref = torch.zeros(16, 64 * 64, dtype=torch.float64).scatter_add_(1, pos, w.double())
    torch.testing.assert_close(cpu.double(), ref, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n_in,n_out", [(224, 89), (224, 134), (224, 56), (32, 13), (7, 3), (5, 5), (40, 30)])
@pytest.mark.parametrize("dim", [2, 3])
def test_ordered_box_sum_equals_the_cpu_index_add(n_in, n_out, dim):
    m = _pil_box_members(n_in, n_out)
    x = torch.rand(2, 3, n_in, n_in, dtype=torch.float64 if n_in == 7 else torch.float32)
    fast, ordered = _box_sum(x, dim, m, ordered=False), _box_sum(x, dim, m, ordered=True)
    assert torch.equal(ordered, fast)
    ref = torch.matmul(m.to(x.dtype), x) if dim == 2 else torch.matmul(x, m.T.to(x.dtype))
    torch.testing.assert_close(ordered, ref)


def test_pixelate_with_the_ordered_box_sums(monkeypatch):
    x = torch.rand(3, 3, 50, 46, generator=torch.Generator().manual_seed(2))
    expected = [corrupt(x, "pixelate", s) for s in range(1, 6)]
    monkeypatch.setattr(functional, "_box_sum", functools.partial(_box_sum, ordered=True))
    for s, e in zip(range(1, 6), expected):
        assert torch.equal(corrupt(x, "pixelate", s), e), s


def test_ordered_scatter_sum_equals_index_add():
    g = torch.Generator().manual_seed(0)
    index = torch.randint(0, 500, (20000,), generator=g)       # about 40 values per position
    dyadic = torch.randint(-64, 64, (20000,), generator=g).float() / 8   # exact sums in any order
    assert torch.equal(frost.scatter_sum(500, index, dyadic, ordered=True),
                       frost.scatter_sum(500, index, dyadic, ordered=False))
    values = torch.rand(20000, generator=g)
    ref = torch.bincount(index, weights=values.double(), minlength=500)
    for ordered in (False, True):
        torch.testing.assert_close(frost.scatter_sum(500, index, values, ordered=ordered).double(), ref,
                                   rtol=1e-5, atol=1e-5)


def test_frost_texture_with_the_ordered_scatter_sum(monkeypatch):
    expected = frost_texture(4, 48, 40, torch.Generator().manual_seed(5))
    monkeypatch.setattr(frost, "scatter_sum", functools.partial(frost.scatter_sum, ordered=True))
    torch.testing.assert_close(frost_texture(4, 48, 40, torch.Generator().manual_seed(5)), expected,
                               rtol=0, atol=1e-5)
