"""One corruption = one registered spec: sampling its random parameters is split from applying them."""

import pytest
import torch

from robustvit.corruptions import (CORRUPTIONS, Corruption, corrupt, corruption_params, list_corruptions,
                                   register_corruption)
from robustvit.corruptions.params import parse_corruptions
from robustvit.errors import RobustvitError
from robustvit.utils import make_generator

NAMES = list_corruptions("all")


@pytest.mark.parametrize("name", NAMES)
def test_corrupt_is_sample_then_apply(name):
    x = torch.rand(3, 3, 40, 36)
    spec = CORRUPTIONS.get(name)
    p = spec.params(3, "cifar", size=(40, 36))
    draw = spec.sample(3, (40, 36), p, make_generator(11, "cpu"))
    kept = {k: v.clone() for k, v in draw.items()}
    x0 = x.clone()
    y = spec.apply(x, p, draw)
    assert torch.equal(y, corrupt(x, name, 3, seed=11, preset="cifar"))
    assert torch.equal(x, x0) and all(torch.equal(draw[k], kept[k]) for k in draw)   # inputs kept
    assert bool(draw) == spec.random
    assert 0 <= float(y.min()) and float(y.max()) <= 1
    # a draw applies again, to another batch of the same size: the same random parameters
    x2 = torch.rand(3, 3, 40, 36)
    assert torch.equal(spec.apply(x2, p, draw), spec.apply(x2, p, draw))


def test_a_draw_is_readable_and_reusable():
    spec = CORRUPTIONS.get("motion_blur")
    p = spec.params(2, "imagenet", size=64)
    draw = spec.sample(4, (64, 64), p, torch.Generator().manual_seed(0))
    assert draw["angle"].shape == (4,) and bool(((draw["angle"] >= -45) & (draw["angle"] <= 45)).all())
    x = torch.rand(4, 3, 64, 64)
    # the same angle applied to each image alone gives each row of the batch result
    whole = spec.apply(x, p, draw)
    for i in range(4):
        one = spec.apply(x[i:i + 1], p, {"angle": draw["angle"][i:i + 1]})
        assert torch.allclose(one[0], whole[i], atol=1e-6)
    with pytest.raises(RobustvitError, match="pass the draw"):
        spec.apply(x, p)


def test_groups_come_from_the_specs():
    assert list_corruptions("noise") == [s.name for s in CORRUPTIONS.values() if s.group == "noise"]
    assert all(len(CORRUPTIONS.get(n).tables["imagenet"]) == 5 for n in NAMES)
    with pytest.raises(ValueError, match="5 rows"):
        Corruption("bad", "extra", ("c",), {"imagenet": [(1,)] * 4}, lambda x, p, d: x)


@pytest.fixture
def invert():
    spec = register_corruption(Corruption(
        "test_invert", "test_group", ("amount",), {"imagenet": [(0.2 * s,) for s in range(1, 6)],
                                                   "cifar": [(0.1 * s,) for s in range(1, 6)]},
        lambda x, p, d: x + p.amount * (1 - 2 * x)))
    yield spec
    CORRUPTIONS._items.pop(spec.name)


def test_a_registered_corruption_is_usable_everywhere(invert):
    x = torch.full((2, 3, 8, 8), 0.25)
    assert torch.allclose(corrupt(x, "test_invert", 5, preset="cifar"), torch.full_like(x, 0.5))
    assert corruption_params("test_invert", 2, "imagenet").amount == pytest.approx(0.4)
    assert list_corruptions("test_group") == ["test_invert"]
    assert "test_invert" in list_corruptions("all") and "test_invert" not in list_corruptions("benchmark")
    assert parse_corruptions("fog+test_invert") == ["fog", "test_invert"]


@pytest.mark.parametrize("name", NAMES)
def test_memory_layout_does_not_matter(name):
    """Images decoded as (N, H, W, 3) and permuted (channels-last strides) corrupt like contiguous ones."""
    hwc = torch.rand(2, 36, 40, 3)
    x = hwc.permute(0, 3, 1, 2)
    assert not x.is_contiguous()
    assert torch.allclose(corrupt(x, name, 2, seed=0), corrupt(x.contiguous(), name, 2, seed=0), atol=1e-6)
