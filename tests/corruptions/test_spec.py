"""One corruption = one registered spec: sampling its random parameters is split from applying them; the same
for the ImageNet-P perturbations (draws before the first frame, then the frames block by block)."""

import pytest
import torch

from robustvit.corruptions import (CORRUPTIONS, PERTURBATIONS, Corruption, Perturbation, corrupt, corruption_params,
                                   list_corruptions, list_perturbations, perturbation_sequence, register_corruption)
from robustvit.corruptions.params import parse_corruptions
from robustvit.corruptions.perturbation_spec import PerturbationOptions, perturbation
from robustvit.corruptions.perturbations import (GEOMETRIC_ON_FULL, NOISE_PERTURBATIONS, TEST_PERTURBATIONS,
                                                 iter_perturbation_frames, num_frames, parse_perturbation)
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


# ---------------------------------------------------------------- ImageNet-P perturbations: one spec each
PERTURBATION_NAMES = list_perturbations()


@pytest.mark.parametrize("name", PERTURBATION_NAMES)
def test_perturbation_is_sample_then_apply_per_block(name):
    x = torch.rand(2, 3, 20, 18, generator=torch.Generator().manual_seed(1))
    spec = PERTURBATIONS.get(name)
    p = spec.params("cifar", size=18)
    values = p.at(2)
    g = make_generator(5, "cpu")
    x0 = x.clone()
    state = spec.sample(x, values, g)
    blocks = [list(range(s, min(p.frames, s + 7))) for s in range(0, p.frames, 7)]
    frames = torch.cat([spec.apply(x, values, idx, state, g) for idx in blocks], 1)
    whole = perturbation_sequence(x, name, difficulty=2, seed=5, preset="cifar")
    assert torch.allclose(frames, whole, atol=1e-6)      # batched FFT blurs may round differently per block size
    again = iter_perturbation_frames(x, name, difficulty=2, seed=5, preset="cifar", block_frames=7)
    assert torch.equal(frames, torch.cat([f for _, f in again], 1))
    assert torch.equal(x, x0) and frames.shape == (2, p.frames, 3, 20, 18)
    assert float(frames.min()) >= 0 and float(frames.max()) <= 1


@pytest.mark.parametrize("name", PERTURBATION_NAMES)
def test_perturbation_flags_tell_the_truth(name):
    """``random``: the seed matters; not ``sequential``: blocks made in any order give the same frames;
    ``warps_full``: cropping after the warp differs from warping the crop."""
    spec = PERTURBATIONS.get(name)
    x = torch.rand(2, 3, 20, 20, generator=torch.Generator().manual_seed(2))
    a = perturbation_sequence(x, name, seed=0, preset="cifar")
    assert spec.random == (not torch.equal(a, perturbation_sequence(x, name, seed=1, preset="cifar")))
    if not spec.sequential:
        values = spec.params("cifar", size=20).at(1)
        g = make_generator(0, "cpu")
        state = spec.sample(x, values, g)
        late = spec.apply(x, values, [7, 8, 9], state, g)
        early = spec.apply(x, values, [0, 1, 2], state, g)
        assert torch.allclose(torch.cat([early, late], 1), a[:, [0, 1, 2, 7, 8, 9]], atol=1e-6)
    if spec.warps_full and name != "zoom_blur":
        cropped = perturbation_sequence(x, name, preset="cifar", crop=12)
        assert not torch.allclose(cropped, perturbation_sequence(x[..., 4:16, 4:16], name, preset="cifar"))
    assert spec.noise == (name in NOISE_PERTURBATIONS) == name.endswith("_noise")
    assert (name in GEOMETRIC_ON_FULL) == spec.warps_full


def test_perturbation_registry_listing_and_options():
    assert PERTURBATION_NAMES == list(TEST_PERTURBATIONS) + ["speckle_noise", "gaussian_blur", "spatter", "shear"]
    assert PERTURBATIONS.list() == sorted(PERTURBATION_NAMES)
    assert list_perturbations("*_noise") == ["gaussian_noise", "shot_noise", "speckle_noise"]
    assert list_perturbations("rotate") == ["rotate"] and list_perturbations("x*") == []
    assert PERTURBATIONS.options_class("snow") is PerturbationOptions
    assert parse_perturbation("shot_noise:difficulty=3") == ("shot_noise", PerturbationOptions(3))
    with pytest.raises(RobustvitError, match=r"difficulty='4' is out of range"):
        parse_perturbation("shot_noise:difficulty=4")
    with pytest.raises(RobustvitError, match="did you mean"):
        parse_perturbation("rotat")
    with pytest.raises(RobustvitError, match="did you mean"):
        list_perturbations("tests")
    spec = PERTURBATIONS.get("translate")
    assert spec.frames("imagenet") == 41 and spec.params("cifar", size=16).values["shift0"] == -3.5
    with pytest.raises(ValueError, match="frames"):
        Perturbation("bad", "test", "blur", {"cifar": {"step": 1}}, lambda *a: None)


def test_a_registered_perturbation_is_usable_everywhere():
    @perturbation("test_fade", "validation", "digital", {"cifar": {"frames": 5, "step": 0.1},
                                                         "imagenet": {"frames": 4, "step": 0.2}},
                  aliases=("test-fade",))
    def _fade(x, p, idx, state, g):
        return torch.stack([x * (1 - p["step"] * i) for i in idx], 1)

    try:
        x = torch.full((2, 3, 8, 8), 0.5)
        s = perturbation_sequence(x, "test-fade", preset="cifar")
        assert s.shape == (2, 5, 3, 8, 8) and torch.allclose(s[:, 4], torch.full_like(x, 0.3))
        assert num_frames("test_fade", "imagenet") == 4
        assert "test_fade" in list_perturbations() and "test_fade" in list_perturbations("validation")
        assert [f for f, _ in iter_perturbation_frames(x, "test_fade", block_frames=2)] == [0, 2, 4]
    finally:
        PERTURBATIONS._items.pop("test_fade")
        PERTURBATIONS._aliases.pop("test-fade")
