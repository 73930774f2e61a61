"""Randomized smoothing (Cohen et al. 2019) against closed forms: the Clopper–Pearson bound against the binomial
tail it inverts, PREDICT's test against scipy's binomtest, CERTIFY on a constant classifier (radius
σ·Φ⁻¹(α^(1/n)) exactly) and on a pixel-threshold classifier (the smoothed classifier's true radius is the pixel's
distance to the threshold)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import binom, binomtest, norm
from torch import nn

from robustvit.certify.smoothing import (ABSTAIN, abstain_binomial, certify, clopper_pearson_lower, noise_counts,
                                         predict)
from robustvit.facade import wrap_module


class Constant(nn.Module):
    def __init__(self, cls: int, k: int = 4) -> None:
        super().__init__()
        self.register_buffer("logits", torch.arange(k, dtype=torch.float32) * 0.1)
        self.logits[cls] = 5.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(x), -1)


class Threshold(nn.Module):
    """Class 1 where pixel (0, 0, 0) exceeds ``t``, else class 0; records the inputs it saw."""

    def __init__(self, t: float) -> None:
        super().__init__()
        self.t = t
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach())
        v = x[:, 0, 0, 0] - self.t
        return torch.stack([-v, v], 1)


def wrapped(module: nn.Module, k: int) -> nn.Module:
    return wrap_module(module, mean=(0, 0, 0), std=(1, 1, 1), num_classes=k, input_size=4)


@pytest.mark.parametrize("k,n,alpha", [(1, 10, 0.001), (37, 50, 0.05), (990, 1000, 0.001), (99_990, 100_000, 0.001)])
def test_clopper_pearson_inverts_the_binomial_tail(k, n, alpha):
    lo = float(clopper_pearson_lower(np.array([k]), n, alpha)[0])
    assert binom.sf(k - 1, n, lo) == pytest.approx(alpha, rel=1e-6)      # P[X ≥ k | p = lo] = α
    assert 0 < lo < k / n


def test_clopper_pearson_edges():
    assert clopper_pearson_lower(np.array([0]), 10, 0.01)[0] == 0.0
    n, alpha = 100, 0.001
    assert clopper_pearson_lower(np.array([n]), n, alpha)[0] == pytest.approx(alpha ** (1 / n), rel=1e-9)


def test_clopper_pearson_matches_statsmodels():
    n, alpha = 100, 0.001
    sm = pytest.importorskip("statsmodels.stats.proportion")
    ks = np.array([3, 50, 97])
    ref = [sm.proportion_confint(k, n, alpha=2 * alpha, method="beta")[0] for k in ks]
    np.testing.assert_allclose(clopper_pearson_lower(ks, n, alpha), ref, rtol=1e-9)


def test_predict_test_matches_scipy_binomtest():
    alpha = 0.01
    for top, second in [(30, 10), (12, 11), (50, 30), (7, 0), (0, 0), (20, 20)]:
        p = binomtest(top, top + second, 0.5).pvalue if top + second else 1.0
        assert abstain_binomial(np.array([top]), np.array([second]), alpha)[0] == (p > alpha), (top, second)


def test_constant_classifier_radius_closed_form():
    sigma, n, alpha = 0.5, 200, 0.001
    model = wrapped(Constant(2), 4)
    x = torch.rand(3, 3, 4, 4)
    cert = certify(model, x, sigma=sigma, n0=10, n=n, alpha=alpha, num_classes=4, batch=64,
                   generator=torch.Generator().manual_seed(0))
    assert cert.predict.tolist() == [2, 2, 2] and cert.count.tolist() == [n] * 3
    np.testing.assert_allclose(cert.radius, sigma * norm.ppf(alpha ** (1 / n)), rtol=1e-9)
    assert predict(model, x, sigma=sigma, n=50, alpha=alpha, num_classes=4).tolist() == [2, 2, 2]


def test_threshold_classifier_radius_is_the_distance_to_the_boundary():
    """f = [x₀ > t]: P(f(x + δ) = 1) = Φ((x₀ − t)/σ), so the exact smoothed radius is x₀ − t; CERTIFY's radius
    is below it (with probability 1 − α) and close to it for large n. Noise is not clipped: the model sees values
    outside [0, 1] through the wrapper."""
    sigma, n, alpha, t = 0.25, 5_000, 0.001, 0.3
    net = Threshold(t)
    model = wrapped(net, 2)
    x = torch.zeros(4, 3, 4, 4)
    x[:, 0, 0, 0] = torch.tensor([0.35, 0.45, 0.6, 0.05])        # distances 0.05, 0.15, 0.3, −0.25
    cert = certify(model, x, sigma=sigma, n0=100, n=n, alpha=alpha, num_classes=2, batch=5000,
                   generator=torch.Generator().manual_seed(1))
    true = (x[:, 0, 0, 0] - t).abs().numpy()
    assert cert.predict.tolist() == [1, 1, 1, 0]
    p = norm.cdf(true / sigma)
    assert np.all(np.abs(cert.count / n - p) < 5 * np.sqrt(p * (1 - p) / n))
    assert np.all(cert.radius <= true) and np.all(cert.radius >= true - 0.035)
    seen = torch.cat(net.seen)
    assert seen.min() < 0 and seen.max() > 1                     # unclipped noise reached the network


def test_near_boundary_abstains_and_draws_are_seeded():
    net = Threshold(0.5)
    model = wrapped(net, 2)
    x = torch.full((2, 3, 4, 4), 0.5)
    cert = certify(model, x, sigma=0.25, n0=20, n=200, alpha=0.001, num_classes=2,
                   generator=torch.Generator().manual_seed(0))
    assert cert.predict.tolist() == [ABSTAIN, ABSTAIN] and cert.radius.tolist() == [0.0, 0.0]
    a = noise_counts(model, x, 50, 0.25, 2, batch=30, generator=torch.Generator().manual_seed(3))
    b = noise_counts(model, x, 50, 0.25, 2, batch=30, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.sum(1).tolist() == [50, 50]
