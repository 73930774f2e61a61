"""JPEG round trips of image batches with torchvision's codec (libjpeg-turbo on CPU, nvjpeg on CUDA).

torchvision marks its image codecs deprecated (in favour of TorchCodec) from 0.29; if they are missing, a
PIL round trip on the CPU is used instead (same libjpeg settings: 4:2:0 chroma, islow DCT).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch

try:  # pragma: no cover - depends on the torchvision build
    from torchvision.io import decode_jpeg, encode_jpeg
except ImportError:  # pragma: no cover
    encode_jpeg = decode_jpeg = None


def to_uint8(x: torch.Tensor, rounding: str = "floor") -> torch.Tensor:
    """[0, 1] floats → uint8. ``"floor"`` truncates like ``np.uint8(255·x)`` (how ImageNet-C files were saved);
    ``"round"`` rounds halves up. One fused pass (this sits on the JPEG hot path)."""
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


def jpeg_roundtrip(x: torch.Tensor, quality: int, *, rounding: str = "round") -> torch.Tensor:
    """Encode every image of ``x`` (N, 3, H, W) in [0, 1] as JPEG at ``quality`` and decode it again.

    The images are first quantised to uint8 (``rounding`` ``"round"``, as PIL does for 8-bit images, or
    ``"floor"``, as the released ImageNet-C files were). Chroma is subsampled 4:2:0 as in PIL's default.
    The codec works image by image inside torchvision (a list in, a list out).

    >>> jpeg_roundtrip(torch.rand(2, 3, 32, 32), 85).shape
    torch.Size([2, 3, 32, 32])
    """
    q = int(quality)
    u8 = to_uint8(x, rounding)
    if encode_jpeg is None:
        dec = _pil_roundtrip(u8, q)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            enc = encode_jpeg(list(u8.unbind(0)), quality=q)
            dec = torch.stack(decode_jpeg(enc, device=x.device) if x.device.type == "cuda" else decode_jpeg(enc))
    return dec.to(device=x.device, dtype=x.dtype).div_(255)
