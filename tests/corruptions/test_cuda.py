"""The corruptions on CUDA (skipped without a GPU): the CPU's results, and the same bits on every run, with
and without torch's deterministic algorithms."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from robustvit.corruptions import CORRUPTIONS, corrupt, jpeg_roundtrip
from robustvit.corruptions.spec import Corruption

pytestmark = pytest.mark.gpu

NAMES = CORRUPTIONS.list()          # the variants too
#: (preset, (H, W)): spatial parameters scaled to the size; not square, to catch swapped axes
CASES = [("cifar", (32, 40)), ("imagenet", (96, 112))]


@pytest.fixture(autouse=True)
def _ieee_float32() -> Iterator[None]:
    """Compare IEEE float32 arithmetic on both devices (cuDNN allows TF32 by default)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    old = matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = False
    yield
    matmul.allow_tf32, cudnn.allow_tf32 = old


@pytest.fixture
def deterministic() -> Iterator[None]:
    """torch's deterministic algorithms (and the cuBLAS workspace setting they require), as ``--deterministic``."""
    old = torch.are_deterministic_algorithms_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(old)


def _images(n: int, h: int, w: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    base = torch.stack([xx, yy, 0.5 * (xx + yy)])
    return (0.6 * base + 0.4 * torch.rand(n, 3, h, w, generator=g)).clamp(0, 1).to(dtype)


def _on(device: str, spec: Corruption, x: torch.Tensor, severity: int, preset: str) -> torch.Tensor:
    """``spec`` applied on ``device`` with a draw made from a CPU generator (the same numbers on both devices)."""
    n, _, h, w = x.shape
    p = spec.params(severity, preset, size=(h, w))
    draw = spec.sample(n, (h, w), p, torch.Generator().manual_seed(severity), device=device, dtype=x.dtype)
    with torch.no_grad():
        return spec.apply(x.to(device), p, draw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rounding", ["round", "floor"])
def test_jpeg_on_cuda_is_the_cpu_result_bit_for_bit(dtype, rounding):
    x = _images(10, 224, 224, dtype)                    # two codec chunks
    x[:, :, :8] = (torch.randint(0, 255, (10, 3, 8, 224)) + 0.5).to(dtype) / 255      # rounding ties
    for layout in (torch.contiguous_format, torch.channels_last):
        for q in (7, 85):
            y = jpeg_roundtrip(x.cuda().contiguous(memory_format=layout), q, rounding=rounding)
            assert y.device.type == "cuda" and y.dtype == dtype
            assert torch.equal(y.cpu(), jpeg_roundtrip(x, q, rounding=rounding)), (layout, q)
    small = _images(4, 40, 48, dtype)
    for s in range(1, 6):
        assert torch.equal(corrupt(small.cuda(), "jpeg_compression", s).cpu(), corrupt(small, "jpeg_compression", s))


@pytest.mark.parametrize("preset,size", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_cuda_equals_cpu_in_float64(name, preset, size):
    """Every corruption at every severity: CUDA's result is the CPU's on the same draw (float64, so that the
    8-bit steps inside glass blur, snow and spatter never fall differently)."""
    spec = CORRUPTIONS.get(name)
    x = _images(2, *size, torch.float64)
    for s in range(1, 6):
        cpu, gpu = _on("cpu", spec, x, s, preset), _on("cuda", spec, x, s, preset)
        assert gpu.device.type == "cuda" and gpu.dtype == torch.float64 and gpu.shape == x.shape
        if name == "shot_noise":        # the Poisson sampler runs on the images' device: another stream
            _assert_same_shot_noise(x, cpu, gpu.cpu())
            continue
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=0, atol=1e-6, msg=lambda m: f"severity {s}: {m}")


def _assert_same_shot_noise(x: torch.Tensor, cpu: torch.Tensor, gpu: torch.Tensor) -> None:
    """Two Poisson streams: the same mean change and mean absolute change, within 6 standard errors."""
    for f in (lambda d: d, torch.abs):
        a, b = f(cpu - x), f(gpu - x)
        se = float(a.std()) * (2 / a.numel()) ** 0.5
        assert abs(float(b.mean() - a.mean())) < 6 * se + 1e-9, (float(a.mean()), float(b.mean()), se)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_equals_cpu_in_float32(name):
    """float32 as run: the same values up to float error, but for the few pixels whose 8-bit step inside a
    corruption (glass blur, snow, spatter) falls the other way."""
    if name == "shot_noise":
        pytest.skip("a different Poisson stream on CUDA (checked in float64)")
    spec = CORRUPTIONS.get(name)
    x = _images(2, 96, 112, torch.float32)
    for s in range(1, 6):
        cpu, gpu = _on("cpu", spec, x, s, "imagenet"), _on("cuda", spec, x, s, "imagenet").cpu()
        diff = (gpu - cpu).abs()
        assert float((diff > 1e-4).float().mean()) < 2e-3 and float(diff.mean()) < 1e-4, (s, float(diff.max()))


@pytest.mark.parametrize("preset,size", CASES)
def test_every_corruption_runs_deterministically_on_cuda(deterministic, preset, size):
    """With torch's deterministic algorithms on, nothing refuses to run and two runs give the same bits."""
    x = _images(3, *size, torch.float32).cuda()
    for name in NAMES:
        for s in range(1, 6):
            a = corrupt(x, name, s, seed=11, preset=preset)
            assert torch.equal(a, corrupt(x, name, s, seed=11, preset=preset)), (name, s)
    assert torch.equal(corrupt(x, "fog", 3, seed=2, jpeg_quality=85), corrupt(x, "fog", 3, seed=2, jpeg_quality=85))


def test_every_corruption_gives_the_same_bits_on_every_cuda_run():
    """The contract without the switch: the same seed on the same device gives the same result."""
    x = _images(8, 96, 112, torch.float32).cuda()
    for name in NAMES:
        for s in range(1, 6):
            a = corrupt(x, name, s, seed=5)
            assert torch.equal(a, corrupt(x, name, s, seed=5)), (name, s)
