"""The water-spatter building blocks against independent definitions and against ``imagecorruptions`` 1.1.2.

``fixtures/imagecorruptions_fixed_draws.npz`` holds the reference's outputs on fixed draws (made with
``benchmarks/_ref_corruptions.py fixtures``); these tests need nothing but robustvit.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from robustvit.corruptions import corruption_params, to_uint8
from robustvit.corruptions.functional import spatter
from robustvit.corruptions.spatter import chamfer_norm, edge_distance

FIXTURES = Path(__file__).parent / "fixtures" / "imagecorruptions_fixed_draws.npz"


def two_pass_chamfer(edges: np.ndarray) -> np.ndarray:
    """Borgefors' two raster scans with the 5×5 mask (1, 1.4, 2.1969), as OpenCV's distanceTransform, float64."""
    h, w = edges.shape
    a, b, c = 1.0, 1.4, 2.1969
    fwd = [(-2, -1, c), (-2, 1, c), (-1, -2, c), (-1, -1, b), (-1, 0, a), (-1, 1, b), (-1, 2, c), (0, -1, a)]
    d = np.where(edges, 0.0, np.inf)
    for passes, ys, xs in ((fwd, range(h), range(w)),
                           ([(-dy, -dx, s) for dy, dx, s in fwd], range(h - 1, -1, -1), range(w - 1, -1, -1))):
        for y in ys:
            for x in xs:
                for dy, dx, s in passes:
                    if 0 <= y + dy < h and 0 <= x + dx < w:
                        d[y, x] = min(d[y, x], d[y + dy, x + dx] + s)
    return d


def test_edge_distance_is_opencvs_5x5_chamfer_distance():
    g = torch.Generator().manual_seed(0)
    edges = torch.rand(2, 1, 23, 31, generator=g) > 0.97
    edges[1] = False
    edges[1, 0, 11, 3] = True                     # one edge pixel near the left border: asymmetric rows
    got = edge_distance(edges, cap=6)
    for i in range(2):
        expected = np.minimum(two_pass_chamfer(edges[i, 0].numpy()), 6.0)
        np.testing.assert_allclose(got[i, 0].double().numpy(), expected, rtol=0, atol=1e-5)
    # not the Euclidean distance: a diagonal step is 1.4, a knight's move 2.1969 (OpenCV's DIST_L2, mask 5)
    one = torch.zeros(1, 1, 21, 21, dtype=torch.bool)
    one[0, 0, 0, 0] = True
    d = edge_distance(one, cap=40)[0, 0]
    # OpenCV 4.11's distanceTransform(DIST_L2, 5) of a single zero pixel, float32 as it prints them (round trip)
    opencv = torch.tensor([[0, 1, 2, 3], [1, 1.4, 2.1969, 3.1969], [2, 2.1969, 2.8, 3.5969],
                           [3, 3.1969, 3.5969, 4.2]], dtype=torch.float32)
    torch.testing.assert_close(d[:4, :4], opencv, rtol=0, atol=0)
    printed = {(3, 4): "4.9968996", (8, 8): "11.199999", (20, 20): "27.999994", (2, 13): "13.393799"}
    for (y, x), value in printed.items():
        assert float(d[y, x]) == float(np.float32(value)), (y, x)


def test_chamfer_norm_is_symmetric_and_never_below_the_chessboard_distance():
    for dx in range(-6, 7):
        for dy in range(-6, 7):
            n = chamfer_norm(dx, dy)
            assert n == chamfer_norm(dy, dx) == chamfer_norm(-dx, dy)
            assert max(abs(dx), abs(dy)) <= n <= 1.1 * np.hypot(dx, dy)


def test_edge_distance_without_edges_is_the_cap():
    assert torch.equal(edge_distance(torch.zeros(1, 1, 5, 7, dtype=torch.bool), cap=20), torch.full((1, 1, 5, 7), 20.0))


def fixture_image(size: int = 96) -> np.ndarray:
    """The image ``_ref_corruptions.py fixtures`` corrupts (a smooth gradient with a bright disc)."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([xx, yy, (xx + yy) / 2], -1) * 180 + 30
    img[(yy - .5) ** 2 + (xx - .5) ** 2 < .06] += 40
    return img.clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_water_spatter_matches_imagecorruptions_on_the_same_draw(severity: int):
    """imagecorruptions' spatter with its normal draw replaced by a fixed one, grey level for grey level."""
    ref = np.load(FIXTURES)[f"spatter_delta{severity}"]
    img = fixture_image()
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255
    z = torch.from_numpy(np.random.RandomState(severity).standard_normal(img.shape[:2]))[None, None].float()
    y = spatter(x, corruption_params("spatter", severity, "imagenet"), {"liquid": z}).clamp(0, 1)
    delta = to_uint8(y, "floor")[0].permute(1, 2, 0).numpy().astype(np.int16) - img
    assert (ref != 0).mean() > 0.05                    # the draw does put water on the image
    np.testing.assert_array_equal(delta, ref)
