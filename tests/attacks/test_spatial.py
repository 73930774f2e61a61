"""The spatial grid attack (Engstrom et al. 2019; Bhojanapalli et al. 2021's 9 × 9 × 31 grid)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.attacks import create_attack
from robustvit.attacks.spatial import apply_transforms, spatial_grid
from robustvit.errors import RobustvitError


class BrightSide(nn.Module):
    """Class 1 if the image's mass lies right of the centre column, else class 0 (position-sensitive)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.shape[-1]
        col = torch.arange(w, dtype=x.dtype) - (w - 1) / 2
        s = (x.sum(1) * col).sum((1, 2))
        return torch.stack([-s, s], 1)


class MeanColour(nn.Module):
    """Logits from the mean intensity of each channel (nearly invariant to small shifts of a centred blob)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((2, 3)) * 10


def blob(n: int, size: int = 16, col: int = 9) -> torch.Tensor:
    x = torch.zeros(n, 3, size, size)
    x[:, :, 6:10, col:col + 2] = 1.0
    return x


def test_grid_default_size_order_and_range():
    g = spatial_grid()
    assert g.shape == (9 * 9 * 31, 3)
    assert torch.equal(g[0], torch.zeros(3, dtype=g.dtype))          # identity first
    assert g[:, :2].abs().max() == 16 and g[:, 2].abs().max() == 30
    size = g[:, :2].abs().sum(1) / 16 + g[:, 2].abs() / 30
    assert (size[1:] >= size[:-1] - 1e-12).all()                      # smallest transforms first
    assert len({tuple(r.tolist()) for r in g}) == g.shape[0]          # no duplicates


def test_transforms_shift_and_rotate_exactly():
    x = torch.zeros(1, 1, 7, 7)
    x[0, 0, 1, 3] = 1.0
    p = torch.tensor([[2.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 90.0]], dtype=torch.float64)
    out = apply_transforms(x.expand(3, 1, 7, 7).contiguous(), p)
    assert out[0, 0, 1, 5] == pytest.approx(1.0) and out[0].sum() == pytest.approx(1.0)   # 2 px right
    assert out[1, 0, 0, 3] == pytest.approx(1.0)                                           # 1 px up
    torch.testing.assert_close(out[2], torch.rot90(x[0], k=-1, dims=(1, 2)), atol=1e-6, rtol=0)  # clockwise
    ident = apply_transforms(x, torch.zeros(1, 3, dtype=torch.float64))
    torch.testing.assert_close(ident, x, atol=1e-6, rtol=0)


def test_translation_fools_a_position_classifier():
    model = BrightSide()
    x = blob(4)                          # mass just right of the centre → class 1
    y = torch.ones(4, dtype=torch.long)
    assert (model(x).argmax(1) == y).all()
    atk = create_attack("spatial", model, translations=9, rotations=1, max_translation=4)
    x_adv = atk(x, y)
    assert (model(x_adv).argmax(1) != y).all()
    # The smallest fooling shift is leftwards (tx < 0), no rotation.
    assert (atk.last_transforms[:, 0] < 0).all() and (atk.last_transforms[:, 2] == 0).all()
    assert atk.last_stats["transforms"] == 81 and atk.last_stats["transforms_per_s"] > 0


def test_robust_images_get_the_worst_loss_transform_and_accuracy_bounded():
    torch.manual_seed(0)
    model = MeanColour()
    x = torch.zeros(6, 3, 16, 16)
    x[:, 0, 4:12, 4:12] = 1.0            # red centred square: class 0 under every small transform
    y = torch.zeros(6, dtype=torch.long)
    atk = create_attack("spatial", model, translations=3, rotations=5)
    x_adv = atk(x, y)
    assert (model(x_adv).argmax(1) == y).all()
    # The kept transform maximises the loss over the whole grid.
    grid = atk.grid(16, 16)
    losses = nn.functional.cross_entropy(model(apply_transforms(x[:1].expand(len(grid), -1, -1, -1), grid)),
                                         y[:1].expand(len(grid)), reduction="none")
    worst = nn.functional.cross_entropy(model(x_adv[:1]), y[:1])
    assert worst.item() == pytest.approx(losses.max().item(), rel=1e-5)


def test_batch_equals_per_image_and_chunking_does_not_matter():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 5))
    x = torch.rand(5, 3, 16, 16)
    with torch.no_grad():
        y = model(x).argmax(1)
    big = create_attack("spatial", model, translations=3, rotations=3, batch_size=1000)
    small = create_attack("spatial", model, translations=3, rotations=3, batch_size=2)
    xa, xb = big(x, y), small(x, y)
    torch.testing.assert_close(xa, xb)
    for i in range(5):
        one = create_attack("spatial", model, translations=3, rotations=3)
        torch.testing.assert_close(one(x[i:i + 1], y[i:i + 1]), xa[i:i + 1])


def test_bad_settings():
    with pytest.raises(RobustvitError, match="untargeted"):
        create_attack("spatial", MeanColour(), targeted=True)
    with pytest.raises(RobustvitError, match=">= 1"):
        create_attack("spatial", MeanColour(), translations=0)
