"""ImageNet-C̄ / CIFAR-10-C̄ corruptions: registration, the released levels, and closed-form checks of each
formula on hand-made draws (the fidelity against the released code is benchmarks/cbar_fidelity.py)."""

import math

import pytest
import torch

from robustvit.corruptions import CORRUPTIONS, corrupt, list_corruptions
from robustvit.corruptions.cbar_noise import _perlin, mirrored_phases, perlin_tables, radial_distance, spectral_noise
from robustvit.corruptions.params import CORRUPTION_GROUPS, parse_corruptions

CBAR = ["single_frequency_greyscale", "cocentric_sine_waves", "plasma_noise", "caustic_refraction", "sparkles",
        "inverse_sparkles", "perlin_noise", "blue_noise_sample", "brownish_noise", "checkerboard_cutout"]


def test_group_holds_the_ten_corruptions_with_the_released_levels():
    assert sorted(list_corruptions("imagenet_c_bar")) == sorted(CBAR) == sorted(parse_corruptions("imagenet_c_bar"))
    assert set(CBAR).isdisjoint(CORRUPTION_GROUPS["all"])            # the ImageNet-C suite's default is unchanged
    # imagenet_c_bar.csv and cifar10_c_bar.csv of facebookresearch/augmentation-corruption
    assert [CORRUPTIONS.get("caustic_refraction").params(s, "imagenet").level for s in range(1, 6)] == \
        [2.35, 3.2, 4.9, 6.6, 9.15]
    assert [CORRUPTIONS.get("sparkles").params(s, "cifar").level for s in range(1, 6)] == [0.7, 3.5, 5.6, 6.3, 7.0]
    assert [CORRUPTIONS.get("blue_noise_sample").params(s, "cifar").level for s in range(1, 6)] == \
        [0.7, 1.4, 2.1, 3.5, 4.2]


def test_single_frequency_greyscale_is_one_grey_sine_wave():
    spec = CORRUPTIONS.get("single_frequency_greyscale")
    x = torch.full((1, 3, 32, 32), 0.5)
    p = spec.params(2, "cifar")                                       # level 1.5 → amplitude 29.4 / 255
    y = spec.apply(x, p, {"freq": torch.tensor([[0.3, -0.2]]), "phase": torch.tensor([1.0])})
    ys, xs = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    want = 0.5 + 1.5 * 19.6 / 255 * torch.sin(0.3 * xs - 0.2 * ys + 1.0)
    assert torch.allclose(y[0], want.expand(3, -1, -1), atol=1e-6)


def test_cocentric_sine_waves_at_the_centre_and_on_a_ring():
    spec = CORRUPTIONS.get("cocentric_sine_waves")
    x = torch.full((1, 3, 32, 32), 0.5)
    d = {"offset": torch.tensor([[0.5, 0.25]]), "freq": torch.tensor([0.0]), "amplitude": torch.tensor([0.0]),
         "ring_width": torch.tensor([0.25])}                          # centre (x=16, y=8), rings 8 px wide
    y = spec.apply(x, spec.params(1, "cifar"), d)
    a = 3 * 12.8 / 255
    assert y[0, 0, 8, 16].item() == pytest.approx(0.5 - a / 2)        # distance 0: (0 mod 8)/8 − ½
    assert y[0, 1, 8, 20].item() == pytest.approx(0.5)                # distance 4: ½ − ½
    assert y[0, 2, 14, 16].item() == pytest.approx(0.5 + a * (6 / 8 - 0.5))


def test_blue_noise_sample_keeps_or_blackens_whole_pixels_more_with_severity():
    x = torch.rand(4, 3, 32, 32) * 0.8 + 0.1
    kept = []
    for s in (1, 5):
        y = corrupt(x, "blue_noise_sample", s, seed=0)
        black = (y == 0).all(1)
        assert torch.equal(y, x * (~black)[:, None])
        kept.append((~black).float().mean().item())
    # threshold 0.3·level − 2.5 on unit-std noise: level 0.7 → −2.29, level 4.2 → −1.24
    assert kept[0] > 0.95 and 0.8 < kept[1] < 0.95


def test_spectral_noise_has_unit_std_and_the_reference_phase_layout():
    g = torch.Generator().manual_seed(0)
    ph = mirrored_phases(2, 3, 8, 8, g, torch.empty(0))
    assert torch.equal(ph[..., 4:], ph[..., :4].flip((-2, -1)))       # right half = point mirror of the left
    odd = mirrored_phases(1, 1, 7, 7, g, torch.empty(0))
    assert torch.equal(odd[..., 3, 3], torch.zeros(1, 1)) and torch.equal(odd[..., :3, 3], odd[..., 4:, 3].flip(-1))
    n = spectral_noise(1 / (radial_distance(8, 8, ph) ** 2 + 1), ph)
    assert torch.allclose(n.std(dim=(-2, -1), correction=0), torch.ones(2, 3), atol=1e-5)


def test_perlin_noise_vanishes_on_the_lattice_and_is_smooth_between():
    perm, grad = perlin_tables(1, torch.Generator().manual_seed(1), torch.empty(0))
    assert torch.equal(perm.sort(1).values, torch.arange(256)[None])
    assert torch.allclose(grad.norm(dim=-1), torch.ones(1, 256), atol=1e-6)
    pts = torch.tensor([[[0.0, 3.0, 17.0, 255.0]]])
    assert torch.equal(_perlin(pts, pts.flip(-1), perm, grad), torch.zeros(1, 1, 4))
    # between lattice points: the interpolation of the corner gradients (a hand computation at (0.5, 0))
    v = _perlin(torch.tensor([[[0.5]]]), torch.tensor([[[0.0]]]), perm, grad)
    b0, b1 = perm[0, perm[0, 0]], perm[0, perm[0, 1]]
    want = 1.5 * (0.5 * (0.5 * grad[0, b0, 0]) + 0.5 * (-0.5 * grad[0, b1, 0]))    # a = u + s(½)·(v − u)
    assert v.item() == pytest.approx(want.item(), abs=1e-6)


def test_checkerboard_cutout_greys_a_share_of_one_colour_of_the_board():
    x = torch.rand(8, 3, 48, 48) * 0.4
    for s, level in ((1, 1.0), (5, 5.0)):
        y = corrupt(x, "checkerboard_cutout", s, seed=3, preset="cifar")
        grey = (y == 128 / 255).all(1)
        assert torch.equal(y, torch.where(grey[:, None], torch.tensor(128 / 255), x))
        # half of the squares can be cut, each with probability level/10
        assert grey.float().mean().item() == pytest.approx(0.5 * level / 10, abs=0.06)


def test_inverse_sparkles_shows_the_image_at_the_centre_and_white_far_away():
    spec = CORRUPTIONS.get("inverse_sparkles")
    x = torch.full((1, 3, 64, 64), 0.2)
    d = {"center": torch.tensor([[0.5, 0.5]]), "rays": torch.tensor([100.0]), "lengths": torch.zeros(1, 199)}
    y = spec.apply(x, spec.params(5, "imagenet"), d)                  # rays of length 16 px
    assert y[0, :, 32, 32].tolist() == pytest.approx([0.2] * 3)
    # corner (0, 0): angle −3π/4 → ray position 12.5 (f = ½ → 1 − (f − ½)² = 1); g = (16² / d²)^(6.5·level/50)
    g = (256 / (2 * 32 ** 2 + 1e-4)) ** (65 * 10 / 10 / 50)
    assert y[0, :, 0, 0].tolist() == pytest.approx([1 - 0.8 * g] * 3, abs=1e-6)
    assert y[0, 0, 32, 40].item() < y[0, 0, 32, 60].item()


def test_sparkles_brighten_only_around_their_centres():
    spec = CORRUPTIONS.get("sparkles")
    x = torch.full((1, 3, 64, 64), 0.2)
    centers = torch.tensor([[[0.25, 0.25]] * 5])
    d = {"centers": centers, "rays": torch.full((1, 5), 60.0), "lengths": torch.zeros(1, 5, 199)}
    y = spec.apply(x, spec.params(5, "imagenet"), d)                  # radius 0.06·64 = 3.84 px
    assert y[0, 0, 16, 16].item() == pytest.approx(1.0)
    # (60, 60): ray position 37.5 (f = ½), g = r² / d², five sparkles each taking f of the way to white
    g = (0.06 * 64) ** 2 / (2 * 44 ** 2 + 1e-4)
    assert y[0, 0, 60, 60].item() == pytest.approx(1 - 0.8 * (1 - g) ** 5, abs=1e-6)
    assert bool((y >= x - 1e-7).all())


@pytest.mark.parametrize("name", CBAR)
def test_corruptions_are_seeded_batched_and_stronger_at_higher_severity(name):
    x = torch.rand(2, 3, 48, 40) * 0.6 + 0.2
    y1, y5 = corrupt(x, name, 1, seed=0), corrupt(x, name, 5, seed=0)
    assert torch.equal(y1, corrupt(x, name, 1, seed=0)) and y1.shape == x.shape
    assert (y5 - x).abs().mean() > (y1 - x).abs().mean() * (0.9 if name == "caustic_refraction" else 1.0)
    assert not torch.isnan(y5).any() and math.isfinite(float(y5.sum()))


@pytest.mark.parametrize("name", CBAR)
def test_corrupt_is_sample_then_apply_and_keeps_its_inputs(name):
    spec = CORRUPTIONS.get(name)
    x = torch.rand(3, 3, 40, 36)
    p = spec.params(3, "cifar", size=(40, 36))
    draw = spec.sample(3, (40, 36), p, torch.Generator().manual_seed(11))
    kept, x0 = {k: v.clone() for k, v in draw.items()}, x.clone()
    y = spec.apply(x, p, draw)
    assert torch.equal(y, corrupt(x, name, 3, seed=11, preset="cifar"))
    assert torch.equal(x, x0) and all(torch.equal(draw[k], kept[k]) for k in draw)
    assert 0 <= float(y.min()) and float(y.max()) <= 1
