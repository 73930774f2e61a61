"""Randomized smoothing: Cohen, Rosenfeld & Kolter, "Certified Adversarial Robustness via Randomized Smoothing"
(ICML 2019, arXiv:1902.02918), as locuslab/smoothing's ``core.py``.

g(x) = argmax_c P(f(x + δ) = c), δ ~ N(0, σ²I), the noise in pixel units added to the [0, 1] image *before* the
model's normalisation and not clipped (the wrapper's range check is lifted for these forwards). CERTIFY picks ĉ from
``n0`` draws, counts it among ``n`` fresh draws and returns (ĉ, σ·Φ⁻¹(p_A)) when the one-sided Clopper–Pearson lower
bound p_A at level 1 − α exceeds 1/2, else abstains (−1). PREDICT returns the top class of ``n`` draws when the
two-sided binomial test of the top two counts rejects equality at level α, else abstains. Each forward takes about
``batch`` noisy images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import beta, binom, norm
from torch import nn

from robustvit.models.wrapper import range_check_off
from robustvit.utils import eval_mode

ABSTAIN = -1


def add_noise(x: torch.Tensor, sigma: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x + σ·N(0, I)`` in pixel units, not clipped."""
    return x + sigma * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)


@torch.no_grad()
def noise_counts(model: nn.Module, x: torch.Tensor, num: int, sigma: float, num_classes: int, *, batch: int = 400,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """How often the base classifier predicts each class under ``num`` noise draws per image: long (N, K) on the
    device; each forward takes about ``batch`` noisy images (at least one draw of every image)."""
    n = len(x)
    counts = torch.zeros(n * num_classes, dtype=torch.long, device=x.device)
    per = max(1, batch // max(n, 1))
    rows = torch.arange(n, device=x.device) * num_classes
    with eval_mode(model), range_check_off(model):
        for start in range(0, num, per):
            k = min(per, num - start)
            noisy = add_noise(x.repeat(k, 1, 1, 1), sigma, generator)        # draw-major: (k·N, 3, H, W)
            pred = model(noisy).argmax(1)
            counts.index_add_(0, rows.repeat(k) + pred, torch.ones_like(pred))
    return counts.view(n, num_classes)


def clopper_pearson_lower(successes: np.ndarray, trials: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion: Beta(α; k, n − k + 1), 0 for k = 0
    (locuslab's ``proportion_confint(k, n, alpha=2α, method="beta")[0]``)."""
    k = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = beta.ppf(alpha, np.maximum(k, 1), trials - k + 1)
    return np.where(k > 0, lo, 0.0)


def abstain_binomial(top: np.ndarray, second: np.ndarray, alpha: float) -> np.ndarray:
    """PREDICT's test: True (abstain) where scipy's ``binomtest(top, top + second, 0.5).pvalue`` exceeds α (at
    p = 1/2: min(1, 2·P[X ≤ min(top, second)]))."""
    top, second = np.asarray(top, dtype=np.int64), np.asarray(second, dtype=np.int64)
    pvalue = np.minimum(1.0, 2.0 * binom.cdf(np.minimum(top, second), top + second, 0.5))
    return pvalue > alpha


@dataclass
class Certificates:
    """CERTIFY's answer per image (host arrays): ``predict`` (−1: abstain), ``radius`` (0 when abstaining),
    ``count`` (draws of the predicted class among ``n``), ``p_lower``."""

    predict: np.ndarray
    radius: np.ndarray
    count: np.ndarray
    p_lower: np.ndarray


def certify(model: nn.Module, x: torch.Tensor, *, sigma: float, n0: int, n: int, alpha: float, num_classes: int,
            batch: int = 400, generator: torch.Generator | None = None) -> Certificates:
    """Cohen et al.'s CERTIFY for every image of ``x`` (N, 3, H, W) in [0, 1] (one host read at the end)."""
    guess = noise_counts(model, x, n0, sigma, num_classes, batch=batch, generator=generator).argmax(1)
    counts = noise_counts(model, x, n, sigma, num_classes, batch=batch, generator=generator)
    c_hat = guess.cpu().numpy()
    count = counts.gather(1, guess[:, None])[:, 0].cpu().numpy()
    p_lower = clopper_pearson_lower(count, n, alpha)
    ok = p_lower >= 0.5
    radius = np.where(ok, sigma * norm.ppf(np.where(ok, p_lower, 0.5)), 0.0)
    return Certificates(np.where(ok, c_hat, ABSTAIN), radius, count, p_lower)


def predict(model: nn.Module, x: torch.Tensor, *, sigma: float, n: int, alpha: float, num_classes: int,
            batch: int = 400, generator: torch.Generator | None = None) -> np.ndarray:
    """Cohen et al.'s PREDICT: the top class of ``n`` draws, or −1 where the binomial test does not separate it from
    the runner-up at level α."""
    counts = noise_counts(model, x, n, sigma, num_classes, batch=batch, generator=generator)
    top = counts.topk(min(2, num_classes), dim=1)
    vals, idx = top.values.cpu().numpy(), top.indices.cpu().numpy()
    second = vals[:, 1] if vals.shape[1] > 1 else np.zeros(len(vals), dtype=np.int64)
    return np.where(abstain_binomial(vals[:, 0], second, alpha), ABSTAIN, idx[:, 0])


__all__ = ["ABSTAIN", "Certificates", "abstain_binomial", "add_noise", "certify", "clopper_pearson_lower",
           "noise_counts", "predict"]
