"""JPEG round trips of image batches with torchvision's codec (libjpeg-turbo on CPU, nvjpeg on CUDA).

On the CPU, chunks of 8 images are converted and coded by the calling thread and
``torch.get_num_threads() - 1`` helper threads (kept between calls), with NumPy and the codec only, which
release the GIL. torchvision marks its image codecs deprecated (in favour of TorchCodec) from 0.29; if they
are missing, Pillow's libjpeg codes the images instead (same settings: 4:2:0 chroma, islow DCT, hence the
same bytes).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator

import numpy as np
import torch
from PIL import Image

from robustvit.corruptions._parallel import run_shared
from robustvit.errors import RobustvitError
from robustvit.utils import check_unit_range

try:  # pragma: no cover - depends on the torchvision build
    from torchvision.io import decode_jpeg, encode_jpeg
except ImportError:  # pragma: no cover
    encode_jpeg = decode_jpeg = None
#: torchvision >= 0.29 warns on every codec call (it moves the codecs to TorchCodec); silenced around our calls.
_CODEC_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


@contextlib.contextmanager
def _quiet_codec() -> Iterator[None]:
    """Silence torchvision's codec deprecation warning. Entered once by the calling thread around all coding:
    the warning filters are process-wide and ``catch_warnings`` is not thread-safe, so helper threads that
    entered it themselves could restore each other's filters and let the warning through."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CODEC_DEPRECATION, category=DeprecationWarning)
        yield


#: CPU chunk size (values): 8 images of 224 × 224 × 3, 4.8 MB of float32, coded by one thread at a time.
_CHUNK_VALUES = 8 * 3 * 224 * 224
#: added before truncating to uint8: ``"round"`` rounds halves up (as PIL), ``"floor"`` truncates like
#: ``np.uint8(255·x)`` (as the ImageNet-C files were saved; the 1e-4 undoes float error in 255·k/255)
_OFFSETS = {"round": 0.5, "floor": 1e-4}


def to_uint8(x: torch.Tensor, rounding: str = "floor") -> torch.Tensor:
    """[0, 1] floats → uint8. ``"floor"`` truncates like ``np.uint8(255·x)`` (how ImageNet-C files were saved);
    ``"round"`` rounds halves up. In-place passes after one allocation."""
    y = x.mul(255).add_(_OFFSETS[rounding]).clamp_(0, 255)
    return y.to(torch.uint8)            # truncation toward zero = floor for these non-negative values


def _roundtrip_chunk(src: np.ndarray, dst: np.ndarray, quality: int, offset: float, bounds: np.ndarray) -> None:
    """JPEG round trip of ``src`` (n, 3, H, W) floats into ``dst``: the arithmetic of :func:`to_uint8` and
    ``decoded / 255`` in ``src``'s dtype; ``src``'s minimum and maximum go to ``bounds`` (taken from the
    scaled values while they are in cache, mapped back). NumPy only around the codec: it runs on kept
    helper threads, where a parallel torch op would start an OpenMP team of its own (see
    :func:`robustvit.corruptions._parallel.run_shared`). The encoder reads (H, W, 3) uint8 images, so the cast to uint8 also
    interleaves the channels (free for a channels_last batch); the decoder's (H, W, 3) output is read in
    place."""
    one = src.dtype.type
    scaled = np.multiply(src, one(255))     # keeps src's memory layout
    np.add(scaled, one(offset), out=scaled)
    bounds[:] = scaled.min(), scaled.max()
    np.divide(np.subtract(bounds, one(offset), out=bounds), one(255), out=bounds)
    if np.isnan(bounds).any():              # NaN has no uint8 value; jpeg_roundtrip raises
        return
    np.clip(scaled, 0, 255, out=scaled)
    hwc = scaled.transpose(0, 2, 3, 1)
    if hwc.flags.c_contiguous:              # channels_last: already interleaved
        hwc = hwc.astype(np.uint8)          # truncation toward zero = floor here
    else:
        hwc = np.empty(hwc.shape, dtype=np.uint8)
        for c in range(3):
            hwc[..., c] = scaled[:, c]
    for img, out in zip(_codec(hwc, quality), dst):
        np.divide(img, one(255), out=out, dtype=dst.dtype)


def _codec(hwc: np.ndarray, quality: int) -> list[np.ndarray]:
    """Encode and decode uint8 images (n, H, W, 3); returns (3, H, W) views of the decoded (H, W, 3) arrays."""
    if encode_jpeg is None:
        decoded = []
        for img in hwc:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, "JPEG", quality=quality)
            decoded.append(np.asarray(Image.open(buf).convert("RGB")).transpose(2, 0, 1))
        return decoded
    coded = encode_jpeg([torch.from_numpy(img).permute(2, 0, 1) for img in hwc], quality=quality)
    return [img.numpy() for img in decode_jpeg(coded)]     # (H, W, 3) memory, seen as (3, H, W)


def jpeg_roundtrip(x: torch.Tensor, quality: int, *, rounding: str = "round") -> torch.Tensor:
    """Encode every image of ``x`` (N, 3, H, W) in [0, 1] as JPEG at ``quality`` and decode it again.

    Raises :class:`~robustvit.errors.RobustvitError` for values outside [0, 1]. The images are first
    quantised to uint8 (``rounding`` ``"round"``, as PIL does for 8-bit images, or ``"floor"``, as the
    released ImageNet-C files were). Chroma is subsampled 4:2:0 as in PIL's default.
    On CUDA the batch goes through nvjpeg at once; on the CPU, chunks of 8 images are coded by
    libjpeg-turbo on ``torch.get_num_threads()`` threads (the caller's and helpers'), which also check the
    range: a parallel torch reduction (``torch.aminmax``) just before would leave OpenMP's idle threads
    spinning on the cores the codec threads need (measured 20 % slower).

    >>> jpeg_roundtrip(torch.rand(2, 3, 32, 32), 85).shape
    torch.Size([2, 3, 32, 32])
    """
    q = int(quality)
    if rounding not in _OFFSETS:
        raise RobustvitError(f"rounding must be 'round' or 'floor', got {rounding!r}")
    if x.device.type == "cuda" and encode_jpeg is not None:
        check_unit_range(*(v.item() for v in torch.aminmax(x)), name="x")
        with _quiet_codec():
            enc = encode_jpeg(list(to_uint8(x, rounding).unbind(0)), quality=q)
            return torch.stack(decode_jpeg(enc, device=x.device)).to(x.dtype).div_(255)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    a = x.detach().to("cpu", work).numpy()      # no copy for a CPU float batch; NumPy reads any strides
    b = np.empty_like(a)        # NumPy backs it with huge pages (see robustvit.corruptions._parallel.empty_output)
    step = max(1, _CHUNK_VALUES // max(1, a[0].size))
    offset = _OFFSETS[rounding]
    starts = range(0, len(a), step)
    bounds = np.zeros((len(starts), 2), a.dtype)
    with _quiet_codec():
        run_shared([(a[i:i + step], b[i:i + step], q, offset, lim) for i, lim in zip(starts, bounds)],
                   _roundtrip_chunk)
    if len(bounds):
        check_unit_range(float(bounds[:, 0].min()), float(bounds[:, 1].max()), name="x")
    return torch.from_numpy(b).to(x.device, x.dtype)
