"""The CPU fast paths (shifted-view filters, torch padding, threaded JPEG, box sums,
sparse frost needles) give the results of the straightforward definitions they replace."""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from robustvit import RobustvitError
from robustvit.corruptions import corrupt, frost_texture, jpeg_roundtrip, to_uint8
from robustvit.corruptions.filters import box_blur3, boundary_index, dilate3, filter2d, pad
from robustvit.corruptions.functional import _box_sum, _pil_box_members
from robustvit.corruptions.jpeg import _CHUNK_VALUES
from robustvit.corruptions._parallel import run_shared


def _gather_pad(x: torch.Tensor, t: int, b: int, l: int, r: int, mode: str) -> torch.Tensor:
    h, w = x.shape[-2:]
    rows = boundary_index(torch.arange(-t, h + b), h, mode)
    cols = boundary_index(torch.arange(-l, w + r), w, mode)
    return x.index_select(-2, rows).index_select(-1, cols)


@pytest.mark.parametrize("shape", [(2, 3, 9, 7), (3, 9, 7), (9, 7), (2, 2, 2, 9, 7)])
@pytest.mark.parametrize("mode", ["nearest", "mirror", "reflect"])
def test_pad_matches_index_definition(shape, mode):
    x = torch.rand(shape)
    for amounts in [(0, 0, 0, 0), (1, 2, 3, 0), (8, 8, 6, 6), (12, 1, 0, 9)]:   # some wider than the image
        assert torch.equal(pad(x, *amounts, mode), _gather_pad(x, *amounts, mode)), amounts


@pytest.mark.parametrize("kshape", [(3, 3), (5, 5), (2, 3), (7, 7)])
@pytest.mark.parametrize("mode", ["mirror", "nearest"])
def test_filter2d_matches_convolution(kshape, mode):
    g = torch.Generator().manual_seed(0)
    x, k = torch.rand(2, 3, 20, 17, generator=g), torch.randn(kshape, generator=g)
    kh, kw = kshape
    xp = _gather_pad(x, kh // 2, (kh - 1) // 2, kw // 2, (kw - 1) // 2, mode)
    ref = F.conv2d(xp.reshape(6, 1, *xp.shape[-2:]), k.view(1, 1, kh, kw)).view_as(x)
    torch.testing.assert_close(filter2d(x, k, mode), ref, atol=1e-5, rtol=0)


def test_box_blur_and_dilation_match_pooling():
    x = torch.rand(2, 1, 15, 12)
    ref = F.avg_pool2d(_gather_pad(x, 1, 1, 1, 1, "mirror"), 3, stride=1)
    torch.testing.assert_close(box_blur3(x), ref, atol=1e-6, rtol=0)
    mask = torch.rand(2, 1, 15, 12) > 0.9
    assert torch.equal(dilate3(mask), F.max_pool2d(mask.float(), 3, stride=1, padding=1) > 0)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_threaded_jpeg_equals_pil_image_by_image(layout):
    n = 2 * _CHUNK_VALUES // (3 * 40 * 40) + 3          # several chunks, the last one partial
    x = torch.rand(n, 3, 40, 40, generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)        # the caller and a helper thread, even on a 1-core runner
    try:
        with warnings.catch_warnings(record=True) as caught:     # torchvision's codec deprecation stays quiet,
            warnings.simplefilter("always")                       # on the helper thread too
            out = jpeg_roundtrip(x.contiguous(memory_format=layout), 30)
    finally:
        torch.set_num_threads(threads)
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]
    for i in (0, n // 2, n - 1):
        buf = io.BytesIO()
        Image.fromarray(to_uint8(x[i], "round").permute(1, 2, 0).numpy()).save(buf, "JPEG", quality=30)
        ref = torch.from_numpy(np.asarray(Image.open(buf)).copy()).permute(2, 0, 1).float() / 255
        assert torch.equal(out[i], ref), i


def test_run_shared_runs_every_job_once_and_reraises():
    done = []
    run_shared([(i,) for i in range(50)], done.append, threads=3)
    assert sorted(done) == list(range(50))

    def fail(i: int) -> None:
        if i == 7:
            raise ValueError("job 7")
    with pytest.raises(ValueError, match="job 7"):
        run_shared([(i,) for i in range(20)], fail, threads=2)
    nested = []
    run_shared([(i,) for i in range(4)], lambda i: run_shared([(i, j) for j in range(3)],
                                                              lambda a, b: nested.append((a, b)), threads=2), threads=2)
    assert sorted(nested) == [(i, j) for i in range(4) for j in range(3)]      # no deadlock from a helper thread


_COUNT_THREADS = """
import os, torch
from robustvit.corruptions import corrupt
torch.set_num_threads(2)
x = torch.rand(64, 3, 160, 160)    # several JPEG and Poisson chunks
x.sum()                             # the main thread's OpenMP team exists from here on
before = len(os.listdir("/proc/self/task"))
for name in ("jpeg_compression", "shot_noise", "jpeg_compression"):
    corrupt(x, name, 3, seed=0)
print(len(os.listdir("/proc/self/task")) - before)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)")
def test_threaded_corruptions_leave_no_openmp_team_behind():
    """Only the one kept JPEG helper thread remains. A kept thread that had run a parallel torch op would keep a
    second OpenMP team alive, and OpenMP then stops idle threads spinning for the whole process (see
    robustvit.corruptions._parallel.run_shared). In a fresh process: other tests may have started threads already."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _COUNT_THREADS], capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) == 1


def _roundtrip_in_child(images: np.ndarray) -> np.ndarray:
    torch.set_num_threads(2)        # the caller and a helper thread
    return jpeg_roundtrip(torch.from_numpy(images), 40).numpy()     # NumPy in and out: no torch copy here


def test_jpeg_in_a_forked_child_after_the_parent_used_helpers():
    import multiprocessing as mp

    x = torch.rand(2 * _CHUNK_VALUES // (3 * 40 * 40) + 1, 3, 40, 40, generator=torch.Generator().manual_seed(3))
    run_shared([(i,) for i in range(4)], lambda i: None, threads=2)     # the parent's helper thread exists
    with mp.get_context("fork").Pool(1) as pool:        # a DataLoader worker is such a child
        out = pool.apply_async(_roundtrip_in_child, (x.numpy(),)).get(timeout=60)
    assert np.array_equal(out, jpeg_roundtrip(x, 40).numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_jpeg_floor_rounding_and_dtypes(dtype):
    x = torch.rand(3, 3, 24, 24, generator=torch.Generator().manual_seed(2)).to(dtype)
    out = jpeg_roundtrip(x, 50, rounding="floor")
    assert out.dtype == dtype and out.shape == x.shape
    buf = io.BytesIO()
    Image.fromarray(to_uint8(x[1].float(), "floor").permute(1, 2, 0).numpy()).save(buf, "JPEG", quality=50)
    ref = torch.from_numpy(np.asarray(Image.open(buf)).copy()).permute(2, 0, 1).to(dtype) / 255
    assert torch.equal(out[1], ref)
    with pytest.raises(RobustvitError, match="rounding"):
        jpeg_roundtrip(x, 50, rounding="nearest")


def test_jpeg_without_torchvision_codecs_gives_the_same_bytes(monkeypatch):
    import robustvit.corruptions.jpeg as jpeg

    x = torch.rand(5, 3, 24, 40, generator=torch.Generator().manual_seed(4))
    expected = jpeg_roundtrip(x, 20)
    monkeypatch.setattr(jpeg, "encode_jpeg", None)            # a torchvision built without image codecs
    assert torch.equal(jpeg_roundtrip(x, 20), expected)


@pytest.mark.parametrize("n_in,n_out", [(224, 89), (224, 112), (32, 13), (7, 3), (5, 5)])
def test_box_sum_matches_matrix_product(n_in, n_out):
    m = _pil_box_members(n_in, n_out)
    x = torch.rand(2, 3, n_in, n_in)
    torch.testing.assert_close(_box_sum(x, 2, m), torch.matmul(m, x))
    torch.testing.assert_close(_box_sum(x, 3, m), torch.matmul(x, m.T))


def test_outputs_do_not_alias():
    x = torch.rand(6, 3, 256, 256, generator=torch.Generator().manual_seed(0))
    first = corrupt(x, "pixelate", 5)
    keep = first.clone()
    second = corrupt(x, "jpeg_compression", 5)             # same size: must not reuse `first`'s memory
    assert torch.equal(first, keep) and not torch.equal(first, second)
    assert 0 <= float(second.min()) and float(second.max()) <= 1


def test_frost_texture_statistics_and_seed():
    tex = frost_texture(16, 96, 96, torch.Generator().manual_seed(3))
    assert torch.equal(tex, frost_texture(16, 96, 96, torch.Generator().manual_seed(3)))
    assert tex.min() >= 0 and tex.max() <= 1
    means = tex.mean(dim=(0, 2, 3))
    assert means[0] < means[1] < means[2]                       # cold tint: red < green < blue
    assert 0.5 < means[1] < 0.8                                  # the reference photos' green level ≈ 0.65
    assert 0.05 < tex.std(dim=(2, 3)).mean() < 0.15              # within-texture spread ≈ 0.09
    # fine detail (needles, grain) is present but the texture stays smooth overall
    hf = (tex[..., 1:] - tex[..., :-1]).abs().mean()
    assert 0.01 < hf < 0.2
