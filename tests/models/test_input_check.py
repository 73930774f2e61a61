"""The [0, 1] input contract is enforced by the wrapper (issue 21, item 8): normalised, 0-255 or NaN inputs are
refused in one line; [0, 1] inputs (with float slack) pass; ``check_range = False`` opts out; on accelerators the
check is read lazily (here simulated on the CPU)."""

from __future__ import annotations

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.models import wrapper as wrapper_module

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return create_model("vit_cifar_micro", num_classes=10, img_size=16, depth=1, embed_dim=32, num_heads=2).eval()


def _x(seed: int = 0) -> torch.Tensor:
    return torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_normalised_input_is_refused_with_a_hint(model):
    with pytest.raises(RobustvitError, match="looks normalised") as e:
        model((_x() - MEAN) / STD)
    assert "\n" not in str(e.value) and "check_range = False" in str(e.value)
    with pytest.raises(RobustvitError, match="divide by 255"):
        model(_x() * 255)
    x = _x()
    x[1, 2, 3, 4] = float("nan")
    with pytest.raises(RobustvitError, match="NaN"):
        model(x)
    x[1, 2, 3, 4] = float("inf")
    with pytest.raises(RobustvitError, match="must lie in"):
        model(x)


def test_unit_range_input_passes_with_float_slack_and_gradients(model):
    x = _x()
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0.0 - 5e-7, 1.0 + 5e-7                       # rounding error of a projection
    x.requires_grad_(True)
    model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with pytest.raises(RobustvitError):
        model(_x().index_fill(0, torch.tensor([2]), 1.0 + 1e-4))                  # beyond the slack


def test_opt_out_gives_the_unchecked_forward(model):
    z = (_x() - MEAN) / STD
    model.check_range = False
    with torch.no_grad():
        out = model(z)
        expected = model.net((z - model.mean) / model.std)
    assert torch.equal(out, expected)


def test_deferred_check_reads_once_per_window(model, monkeypatch):
    monkeypatch.setattr(wrapper_module, "_deferred", lambda device: True)
    model.check_every = 4
    bad = (_x() - MEAN) / STD
    with pytest.raises(RobustvitError, match="looks normalised") as e:        # the first call is read at once
        model(bad)
    assert "last" not in str(e.value)
    fresh = create_model("vit_cifar_micro", num_classes=10, img_size=16, depth=1, embed_dim=32, num_heads=2).eval()
    fresh.check_every = 4
    fresh(_x(1))                                                              # call 1: read, fine
    fresh(bad)                                                                # call 2: recorded on the device
    fresh(_x(2))                                                              # call 3
    with pytest.raises(RobustvitError, match="one of the last 4 calls"):     # call 4: the window is read
        fresh(_x(3))
    for i in range(4):                                                        # the window was reset
        fresh(_x(4 + i))
