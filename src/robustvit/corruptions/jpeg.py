"""JPEG round trips of image batches with torchvision's codec (libjpeg-turbo on CPU, nvjpeg on CUDA).

torchvision marks its image codecs deprecated (in favour of TorchCodec) from 0.29; if they are missing, a
PIL round trip on the CPU is used instead (same libjpeg settings: 4:2:0 chroma, islow DCT).
"""

from __future__ import annotations

import io
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

try:  # pragma: no cover - depends on the torchvision build
    from torchvision.io import decode_jpeg, encode_jpeg
except ImportError:  # pragma: no cover
    encode_jpeg = decode_jpeg = None
# torchvision >= 0.29 warns on every codec call; `catch_warnings` is not thread-safe (the CPU path codes
# chunks on several threads), so that one message is filtered once, here.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision are deprecated",
                        category=DeprecationWarning)


#: CPU chunk size (values): 2 images of 224 × 224 × 3, 1.2 MB of float32 — cache-resident, and below the
#: 2 MB from which PyTorch backs allocations with huge pages when THP_MEM_ALLOC_ENABLE=1 (slow to fault in).
_CHUNK_PIXELS = 2 * 3 * 224 * 224


def to_uint8(x: torch.Tensor, rounding: str = "floor") -> torch.Tensor:
    """[0, 1] floats → uint8. ``"floor"`` truncates like ``np.uint8(255·x)`` (how ImageNet-C files were saved);
    ``"round"`` rounds halves up. In-place passes after one allocation (this sits on the JPEG hot path)."""
    y = x.mul(255).add_(1e-4 if rounding == "floor" else 0.5).clamp_(0, 255)
    return y.to(torch.uint8)            # truncation toward zero = floor for these non-negative values


def _pil_roundtrip(u8: torch.Tensor, quality: int) -> torch.Tensor:
    from PIL import Image

    out = []
    for img in u8.cpu().permute(0, 2, 3, 1).numpy():
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=quality)
        out.append(np.asarray(Image.open(buf).convert("RGB")))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)


def _roundtrip_chunk(x: torch.Tensor, out: torch.Tensor, quality: int, rounding: str) -> None:
    u8 = to_uint8(x, rounding)      # contiguous passes; a float→uint8 *transposing* copy is 4x slower
    if encode_jpeg is None:
        dec = _pil_roundtrip(u8, quality)
    else:
        dec = torch.stack(decode_jpeg(encode_jpeg(list(u8.unbind(0)), quality=quality)))
    out.copy_(dec).div_(255)     # in place: torch.div(uint8, 255, out=…) allocates a float temporary


def jpeg_roundtrip(x: torch.Tensor, quality: int, *, rounding: str = "round") -> torch.Tensor:
    """Encode every image of ``x`` (N, 3, H, W) in [0, 1] as JPEG at ``quality`` and decode it again.

    The images are first quantised to uint8 (``rounding`` ``"round"``, as PIL does for 8-bit images, or
    ``"floor"``, as the released ImageNet-C files were). Chroma is subsampled 4:2:0 as in PIL's default.
    On CUDA the batch goes through nvjpeg at once; on the CPU, chunks of a few images (small enough to stay
    in cache) are coded by libjpeg-turbo on ``torch.get_num_threads()`` threads at once.

    >>> jpeg_roundtrip(torch.rand(2, 3, 32, 32), 85).shape
    torch.Size([2, 3, 32, 32])
    """
    q = int(quality)
    if x.device.type == "cuda" and encode_jpeg is not None:
        enc = encode_jpeg(list(to_uint8(x, rounding).unbind(0)), quality=q)
        return torch.stack(decode_jpeg(enc, device=x.device)).to(x.dtype).div_(255)
    out = torch.empty(x.shape, dtype=x.dtype)
    step = max(1, _CHUNK_PIXELS // max(1, x[0].numel()))
    starts = range(0, x.shape[0], step)
    jobs = [(x[i:i + step].cpu(), out[i:i + step]) for i in starts]
    threads = min(torch.get_num_threads(), len(jobs))
    if threads <= 1:
        for chunk, dst in jobs:
            _roundtrip_chunk(chunk, dst, q, rounding)
    else:
        with ThreadPoolExecutor(threads) as pool:     # the codec and these ops release the GIL
            list(pool.map(lambda job: _roundtrip_chunk(job[0], job[1], q, rounding), jobs))
    return out.to(x.device)
