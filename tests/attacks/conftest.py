"""Tiny models and batches for attack tests (shared by every attack's tests).

* ``tiny_model``: a seeded 2-conv net for 3×16×16 inputs, 10 classes (a real non-linear model).
* ``easy_model``: a seeded linear model on 3×16×16 inputs, 10 classes, large weights — targeted attacks
  reach their target with a moderate ε.
* ``batch``: ``(x, y)`` — 16 seeded images in [0, 1]; ``y`` = ``tiny_model``'s predictions on the first
  half and a wrong class on the second half (clean accuracy 0.5; PGD at ε = 2/255 fools some, not all).
* ``easy_batch``: ``(x, y)`` for ``easy_model`` with ``y`` its predictions (clean accuracy 1).
* ``tiny_vit16`` (in tests/conftest.py): a seeded timm ViT for 3×16×16 inputs, for ``patch_fool``.
* ``make_linear(n_classes)``: factory for a linear model on 3×16×16 with given weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

IMG = (3, 16, 16)


class TinyNet(nn.Module):
    """conv(3→8, s1) → ReLU → conv(8→16, s2) → ReLU → avg-pool to 4×4 → linear(256→classes)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class LinearNet(nn.Module):
    """logits = W·flatten(x − 0.5) + b."""

    def __init__(self, num_classes: int = 10, std: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.fc = nn.Linear(IMG[0] * IMG[1] * IMG[2], num_classes)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(self.fc.weight.shape, generator=g) * std)
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc((x - 0.5).flatten(1))


def images(n: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand((n, *IMG), generator=g)


@pytest.fixture
def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return TinyNet().eval()


@pytest.fixture
def easy_model() -> nn.Module:
    return LinearNet(10, std=0.1).eval()


@pytest.fixture
def batch(tiny_model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    x = images(16)
    with torch.no_grad():
        pred = tiny_model(x).argmax(1)
    y = pred.clone()
    y[8:] = (pred[8:] + 1) % 10
    return x, y


@pytest.fixture
def easy_batch(easy_model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    x = images(8, seed=1)
    with torch.no_grad():
        return x, easy_model(x).argmax(1)


@pytest.fixture
def make_linear():
    return LinearNet


@pytest.fixture
def make_images():
    return images


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads; on a loaded 2-core box two threads are many times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
