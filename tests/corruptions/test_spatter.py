"""The water-spatter building blocks against brute-force definitions."""

import torch

from robustvit.corruptions.spatter import edge_distance


def test_edge_distance_is_the_exact_capped_euclidean_distance():
    g = torch.Generator().manual_seed(0)
    edges = torch.rand(2, 1, 23, 31, generator=g) > 0.97
    edges[1] = False
    edges[1, 0, 11, 3] = True                     # one edge pixel near the left border: asymmetric rows
    got = edge_distance(edges, cap=6)
    ys, xs = torch.meshgrid(torch.arange(23.), torch.arange(31.), indexing="ij")
    for i in range(2):
        pts = edges[i, 0].nonzero().float()
        d = ((ys[..., None] - pts[:, 0]) ** 2 + (xs[..., None] - pts[:, 1]) ** 2).sqrt().amin(-1)
        torch.testing.assert_close(got[i, 0], d.clamp_max(6.0))
