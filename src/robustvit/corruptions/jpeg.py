"""JPEG round trips of image batches with libjpeg-turbo (torchvision's CPU codec), on any device.

Chunks of 8 images are quantised and coded by the calling thread and ``torch.get_num_threads() - 1`` kept
helper threads (NumPy and the codec only, which release the GIL). A batch on another device is quantised there
with the same arithmetic, coded on the CPU as uint8 (N, H, W, 3) and divided by 255 back on the device: the
CPU result bit for bit. (torchvision's nvjpeg is not used: it subsamples chroma 4:4:4, not the 4:2:0 of
PIL/libjpeg and the released ImageNet-C files, and its decoder refuses the bytes its encoder leaves on the GPU.)
Without torchvision's codecs (deprecated from 0.29), Pillow's libjpeg codes the images: same settings, same bytes.
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
    """Silence torchvision's codec deprecation warning, entered once by the calling thread around all coding
    (``catch_warnings`` is not thread-safe: helper threads could restore each other's filters)."""
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
    return x.mul(255).add_(_OFFSETS[rounding]).clamp_(0, 255).to(torch.uint8)   # truncation = floor here


def _quantise_chunk(src: np.ndarray, offset: float, bounds: np.ndarray) -> np.ndarray | None:
    """``src`` (n, 3, H, W) floats → uint8 (n, H, W, 3) with :func:`to_uint8`'s arithmetic in ``src``'s dtype;
    ``src``'s min and max go to ``bounds`` (from the scaled values while in cache, mapped back). None when
    ``src`` holds a NaN (the caller raises). The cast also interleaves the channels."""
    one = src.dtype.type
    scaled = np.multiply(src, one(255))     # keeps src's memory layout
    np.add(scaled, one(offset), out=scaled)
    bounds[:] = scaled.min(), scaled.max()
    np.divide(np.subtract(bounds, one(offset), out=bounds), one(255), out=bounds)
    if np.isnan(bounds).any():
        return None
    np.clip(scaled, 0, 255, out=scaled)
    hwc = scaled.transpose(0, 2, 3, 1)
    if hwc.flags.c_contiguous:              # channels_last: already interleaved
        return hwc.astype(np.uint8)         # truncation toward zero = floor here
    out = np.empty(hwc.shape, dtype=np.uint8)
    for c in range(3):
        out[..., c] = scaled[:, c]
    return out


def _roundtrip_chunk(src: np.ndarray, dst: np.ndarray, quality: int, offset: float, bounds: np.ndarray) -> None:
    """JPEG round trip of ``src`` (n, 3, H, W) floats into ``dst``: :func:`_quantise_chunk`, the codec and
    ``decoded / 255`` in ``src``'s dtype. NumPy only: it runs on kept helper threads, where a parallel torch op
    would start an OpenMP team of its own (see :func:`robustvit.corruptions._parallel.run_shared`)."""
    hwc = _quantise_chunk(src, offset, bounds)
    if hwc is None:                         # NaN: jpeg_roundtrip raises
        return
    one = src.dtype.type
    for img, out in zip(_codec(hwc, quality), dst):
        np.divide(img, one(255), out=out, dtype=dst.dtype)


def _code_chunk(src: np.ndarray, dst: np.ndarray, quality: int) -> None:
    """JPEG round trip of uint8 images ``src`` (n, H, W, 3) into uint8 ``dst`` (n, H, W, 3)."""
    for img, out in zip(_codec(src, quality), dst):
        np.copyto(out, img.transpose(1, 2, 0))


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


def _chunk_size(image_values: int) -> int:
    """Images per codec job (see :data:`_CHUNK_VALUES`)."""
    return max(1, _CHUNK_VALUES // max(1, image_values))


def _roundtrip_via_uint8(x: torch.Tensor, quality: int, rounding: str) -> torch.Tensor:
    """The round trip of a batch on a non-CPU device: :func:`to_uint8` and the division by 255 on ``x``'s
    device, the codec on the CPU threads, one host–device synchronisation (the range check). Bit for bit the
    CPU path (the division is by a tensor: CUDA divides by a Python number via its rounded reciprocal)."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    n, _, h, w = x.shape
    if x.numel() == 0:
        return x.detach().clone()
    xw = x.detach().to(work)
    pin = x.device.type == "cuda" and torch.cuda.is_available()
    lo_hi = torch.stack(torch.aminmax(xw))
    q8 = to_uint8(xw, rounding).permute(0, 2, 3, 1).contiguous()         # (N, H, W, 3) on the device
    host = torch.empty((n, h, w, 3), dtype=torch.uint8, pin_memory=pin)
    host.copy_(q8, non_blocking=pin)
    lo, hi = lo_hi.tolist()     # the one synchronisation; the stream has finished the copy above as well
    check_unit_range(lo, hi, name="x")
    coded = torch.empty((n, h, w, 3), dtype=torch.uint8, pin_memory=pin)
    src, dst = host.numpy(), coded.numpy()
    step = _chunk_size(3 * h * w)
    with _quiet_codec():
        run_shared([(src[i:i + step], dst[i:i + step], quality) for i in range(0, n, step)], _code_chunk)
    back = coded.to(x.device, non_blocking=pin).permute(0, 3, 1, 2)      # channels_last view (N, 3, H, W)
    out = torch.empty_like(xw).copy_(back)
    return out.div_(torch.full((), 255, dtype=work, device=x.device)).to(x.dtype)


def jpeg_roundtrip(x: torch.Tensor, quality: int, *, rounding: str = "round") -> torch.Tensor:
    """Encode every image of ``x`` (N, 3, H, W) in [0, 1] as JPEG at ``quality`` and decode it again.

    Raises :class:`~robustvit.errors.RobustvitError` for values outside [0, 1]. The images are first
    quantised to uint8 (``rounding`` ``"round"``, as PIL does, or ``"floor"``, as the released ImageNet-C files
    were); chroma is subsampled 4:2:0 as PIL's default. Coded by libjpeg-turbo on ``torch.get_num_threads()``
    CPU threads, the same result on every device (see the module). For a CPU batch the coding threads also
    check the range: a parallel ``torch.aminmax`` just before would leave OpenMP's idle threads spinning on
    the cores the codec threads need (measured 20 % slower).

    >>> jpeg_roundtrip(torch.rand(2, 3, 32, 32), 85).shape
    torch.Size([2, 3, 32, 32])
    """
    if rounding not in _OFFSETS:
        raise RobustvitError(f"rounding must be 'round' or 'floor', got {rounding!r}")
    if x.device.type != "cpu":
        return _roundtrip_via_uint8(x, int(quality), rounding)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    a = x.detach().to(work).numpy()     # no copy for a CPU float batch; NumPy reads any strides
    b = np.empty_like(a)        # NumPy backs it with huge pages (see robustvit.corruptions._parallel.empty_output)
    step = _chunk_size(a[0].size) if len(a) else 1
    starts = range(0, len(a), step)
    bounds = np.zeros((len(starts), 2), a.dtype)
    jobs = [(a[i:i + step], b[i:i + step], int(quality), _OFFSETS[rounding], lim) for i, lim in zip(starts, bounds)]
    with _quiet_codec():
        run_shared(jobs, _roundtrip_chunk)
    if len(bounds):
        check_unit_range(float(bounds[:, 0].min()), float(bounds[:, 1].max()), name="x")
    return torch.from_numpy(b).to(x.dtype)
