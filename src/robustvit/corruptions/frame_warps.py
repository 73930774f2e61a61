"""Batched geometric warps of the ImageNet-P sequences: every image under every frame's map at once.

Hendrycks & Dietterich, ICLR 2019 (arXiv:1903.12261), ``make_imagenet_p.py``: translate / rotate / scale / shear
use PIL's ``affine`` (torchvision 0.2's matrix), tilt OpenCV's ``warpPerspective``; both bilinear with a black
border, as :func:`sample_frames` (one ``grid_sample`` call)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def affine_frames(x: torch.Tensor, mats: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Warp every image with every forward affine map p ↦ A(p − c) + c + t → (N, t, C, H, W): ``mats`` (t, 2, 2)
    and ``shifts`` (t, 2) in pixels (x right, y down) about the image centre c; bilinear, zero fill (PIL ``affine``
    with ``fillcolor=0``)."""
    n, c, h, w = x.shape
    inv = torch.linalg.inv(mats.to(torch.float64))                           # (t, 2, 2)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    cx, cy = (w - 1) / 2, (h - 1) / 2
    q = torch.stack((xs - cx, ys - cy), -1).reshape(1, h * w, 2) - shifts.to(torch.float64).reshape(len(mats), 1, 2)
    src = q @ inv.transpose(1, 2)                                           # (t, HW, 2)
    return sample_frames(x, src[..., 0] + cx, src[..., 1] + cy)


def sample_frames(x: torch.Tensor, sx: torch.Tensor, sy: torch.Tensor) -> torch.Tensor:
    """Sample all N images at the t source grids (t, H·W) (pixel coords) → (N, t, C, H, W), zero fill."""
    n, c, h, w = x.shape
    t = sx.shape[0]
    gx = 2 * sx / max(w - 1, 1) - 1
    gy = 2 * sy / max(h - 1, 1) - 1
    grid = torch.stack((gx, gy), -1).reshape(t, h, w, 2).to(device=x.device, dtype=x.dtype)
    # one grid_sample call over the (t · N) frame images, the grid repeated for the N images
    xs = x.unsqueeze(0).expand(t, n, c, h, w).reshape(t * n, c, h, w)
    grid = grid.unsqueeze(1).expand(t, n, h, w, 2).reshape(t * n, h, w, 2)
    out = F.grid_sample(xs, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return out.reshape(t, n, c, h, w).transpose(0, 1)


def rotation_shear(angle_deg: torch.Tensor, shear_deg: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torchvision 0.2's affine matrix RSS = scale·[[cos a, −sin(a+s)], [sin a, cos(a+s)]] (t, 2, 2)."""
    a = torch.deg2rad(angle_deg.to(torch.float64))
    s = torch.deg2rad(shear_deg.to(torch.float64))
    m = torch.stack((torch.stack((torch.cos(a), -torch.sin(a + s)), -1),
                     torch.stack((torch.sin(a), torch.cos(a + s)), -1)), -2)
    return m * scale.to(torch.float64).reshape(-1, 1, 1)


def tilt_homography(theta_deg: float, width: int, height: int) -> torch.Tensor:
    """The reference's 3×3 forward homography ``P2 @ T @ RX(θ) @ RY(θ) @ P1`` (float64), f = √(w² + h²)."""
    th = math.radians(theta_deg)
    w, h = float(width), float(height)
    f = math.sqrt(w ** 2 + h ** 2)
    p1 = torch.tensor([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1], [0, 0, 1]], dtype=torch.float64)
    c, s = math.cos(th), math.sin(th)
    rx = torch.tensor([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1]], dtype=torch.float64)
    ry = torch.tensor([[c, 0, -s, 0], [0, 1, 0, 0], [s, 0, c, 0], [0, 0, 0, 1]], dtype=torch.float64)
    tr = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, f], [0, 0, 0, 1]], dtype=torch.float64)
    p2 = torch.tensor([[f, 0, w / 2, 0], [0, f, h / 2, 0], [0, 0, 1, 0]], dtype=torch.float64)
    return p2 @ tr @ rx @ ry @ p1


def tilt_frames(x: torch.Tensor, thetas: list[float]) -> torch.Tensor:
    """OpenCV ``warpPerspective(x, H, (w, h))``: dst(q) = src(H⁻¹q), bilinear, zero border."""
    n, c, h, w = x.shape
    inv = torch.stack([torch.linalg.inv(tilt_homography(t, w, h)) for t in thetas])    # (t, 3, 3)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    q = torch.stack((xs, ys, torch.ones_like(xs)), -1).reshape(1, h * w, 3)
    src = q @ inv.transpose(1, 2)
    z = src[..., 2]
    z = torch.where(z.abs() < 1e-12, torch.full_like(z, 1e-12), z)
    return sample_frames(x, src[..., 0] / z, src[..., 1] / z)


__all__ = ["affine_frames", "sample_frames", "rotation_shear", "tilt_homography", "tilt_frames"]
