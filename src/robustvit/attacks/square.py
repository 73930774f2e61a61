"""Square Attack (Andriushchenko, Croce, Flammarion & Hein 2020, "Square Attack: a query-efficient
black-box adversarial attack via random search", arXiv:1912.00049), L∞, L2 and L1, as used in AutoAttack (L1 as
in its L1 version, Croce & Hein 2021, arXiv:2103.01208).

Score-based random search (logits only): ``n_queries`` iterations after the initial point, as fra31/auto-attack;
a candidate is kept only if it lowers the loss or fools the model. L∞: start from vertical stripes ``x ± ε``;
each proposal sets one random s×s window to ``x ± ε`` (a sign per channel). L2: start from a 5×5 grid of "meta"
patterns (concentric rectangles, opposite signs in the two halves) with ‖δ‖₂ = ε; each proposal moves the mass
of a second window into a first one and adds a fresh pattern there. L1: as L2 with 1/(k+1)⁴ weights, projected
onto the L1 ball of radius ε(1 − 10⁻⁶) ∩ [0, 1]^d (:func:`robustvit.attacks.base.project_l1_box`).

The window covers a fraction p of the image, from ``p_init`` halved at AutoAttack's thresholds
(:data:`P_SCHEDULE`, on a 10 000-iteration scale; ``rescale_schedule=False`` counts iterations as they are).
Losses: the margin ``z_y − max_{j≠y} z_j`` (untargeted default) or ``−CE``; targeted: ``CE(z, t)`` (default) or
the margin ``max_{j≠t} z_j − z_t``. ``last_queries`` (N,) holds the queries spent per image (the initial point
counts as one); where no adversarial example was found the clean image is returned.

>>> from robustvit.attacks import create_attack
>>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 10, 8), torch.nn.Flatten()).eval()
>>> images = torch.rand(4, 3, 8, 8)
>>> square = create_attack("square", model, eps="8/255", n_queries=50, seed=1)
>>> adv = square(images, model(images).argmax(1))
>>> int(square.last_queries.max()) <= 51
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.attacks.base import NORMS, Attack, lp_norm, project_l1_box, register_attack
from robustvit.errors import RobustvitError
from robustvit.options import option

#: (iteration threshold on the 10 000 scale, divisor of p_init) — AutoAttack's schedule.
P_SCHEDULE = ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32), (4000, 64), (6000, 128), (8000, 256))
LOSSES = ("margin", "ce")


def p_schedule(i: int, n_queries: int, p_init: float, rescale: bool = True) -> float:
    """Fraction p of the image a window covers at iteration ``i``."""
    it = int(i / n_queries * 10000) if rescale else i
    for threshold, div in P_SCHEDULE:
        if it <= threshold:
            return p_init / div
    return p_init / 512


def _unit(t: torch.Tensor, norm: str) -> torch.Tensor:
    return t / (t.norm() if norm == "l2" else t.abs().sum())


@lru_cache(maxsize=64)
def _rectangles(rows: int, cols: int, norm: str = "l2") -> torch.Tensor:
    """Concentric rectangles around the centre, weight Σ_{k ≥ Chebyshev distance} 1/(k+1)^p (p = 2 for L2, 4 for
    L1), unit norm in ``norm``."""
    i = (torch.arange(rows) - rows // 2).abs()
    j = (torch.arange(cols) - cols // 2).abs()
    cheb = torch.maximum(i[:, None], j[None, :])
    k_max = max(rows // 2, cols // 2) + 1
    weights = 1.0 / torch.arange(1, k_max + 1, dtype=torch.float64) ** (2 if norm == "l2" else 4)
    tail = weights.flip(0).cumsum(0).flip(0)  # tail[k] = Σ_{k' ≥ k} weights[k']
    return _unit(tail[cheb], norm)


@lru_cache(maxsize=64)
def meta_pattern(s: int, norm: str = "l2") -> torch.Tensor:
    """The s×s pattern (float64, unit norm in ``norm``, L2 or L1): rectangles in the top half, their negative in
    the bottom."""
    top = _rectangles(s // 2, s, norm) if s // 2 > 0 else torch.zeros(0, s, dtype=torch.float64)
    return _unit(torch.cat((top, -_rectangles(s - s // 2, s, norm)), 0), norm)


def window_mask(pos_h: torch.Tensor, pos_w: torch.Tensor, s: int, h: int, w: int) -> torch.Tensor:
    """Boolean (n, 1, h, w): an s×s window at per-sample top-left corners ``(pos_h, pos_w)``."""
    rows = torch.arange(h, device=pos_h.device)
    cols = torch.arange(w, device=pos_w.device)
    in_h = (rows >= pos_h[:, None]) & (rows < pos_h[:, None] + s)
    in_w = (cols >= pos_w[:, None]) & (cols < pos_w[:, None] + s)
    return (in_h[:, :, None] & in_w[:, None, :])[:, None]


def window_index(pos_h: torch.Tensor, pos_w: torch.Tensor, s: int) -> tuple[torch.Tensor, ...]:
    """Advanced indices selecting each sample's s×s window: ``t[idx]`` has shape (n, s, s, C)."""
    ar = torch.arange(s, device=pos_h.device)
    n = torch.arange(pos_h.shape[0], device=pos_h.device)[:, None, None]
    return n, slice(None), (pos_h[:, None] + ar)[:, :, None], (pos_w[:, None] + ar)[:, None, :]


@register_attack
class Square(Attack):
    """Square Attack (Andriushchenko et al. 2020, arXiv:1912.00049): score-based black-box random search."""

    name = "square"
    smoke = {"n_queries": 3}
    masking_checks = ("model",)   # the black-box check itself
    norms = NORMS

    @dataclass
    class Options(Attack.Options):
        n_queries: int = option(5000, min=1, help="black-box queries per image")
        p_init: float = option(0.8, min=0, max=1, help="initial fraction of the image a square covers, in (0, 1]")
        restarts: int = option(1, min=1, help="restarts on the points still robust")
        loss: Literal[LOSSES] | None = option(None, help="margin or ce (default: margin untargeted, ce targeted)")
        rescale_schedule: bool = option(True, help="rescale the p schedule to n_queries (AutoAttack's Square: "
                                                   "false)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        o = self.opts
        if not 0.0 < o.p_init:
            raise RobustvitError(f"square: p_init (fraction of the image a window covers) must lie in (0, 1], got {o.p_init}")
        self.n_queries, self.restarts, self.p_init = o.n_queries, o.restarts, float(o.p_init)
        self.loss, self.rescale_schedule = o.loss or ("ce" if self.targeted else "margin"), o.rescale_schedule
        self.last_queries: torch.Tensor | None = None

    # ---- driver -----------------------------------------------------------------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        robust = ~self.success(self.predict(x), y)
        adv = x.clone()
        queries = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        for _ in range(self.restarts):
            idx = robust.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            x_best, fooled, q = self.single_run(x[idx], y[idx], gen)
            queries[idx] += q
            adv[idx[fooled]] = x_best[fooled]
            robust[idx[fooled]] = False
        self.last_queries = queries
        return adv

    def margin_and_loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(margin, loss), both (n,) and minimised; margin < 0 means success."""
        logits = self.predict(x)
        z_y = logits.gather(1, y[:, None]).squeeze(1)
        other = logits.scatter(1, y[:, None], -torch.inf).amax(1)
        margin = other - z_y if self.targeted else z_y - other
        if self.loss == "margin":
            return margin, margin
        ce = F.cross_entropy(logits, y, reduction="none")
        return margin, ce if self.targeted else -ce

    # ---- one random-search run --------------------------------------------------------------------
    def single_run(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (best point, fooled mask, queries used) for the images ``x``."""
        x_best = self.init_point(x, gen)
        margin, loss = self.margin_and_loss(x_best, y)
        queries = torch.ones(x.shape[0], dtype=torch.long, device=x.device)
        box = self.linf_box(x) if self.norm == "linf" else None
        for i in range(self.n_queries):         # the reference's loop: i = 0 … n_queries − 1
            idx = (margin >= 0).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            s = self.window_size(i, x.shape[-2], x.shape[-1])
            if box is not None:
                x_new = self.propose_linf(x[idx], x_best[idx], s, gen, box[0][idx], box[1][idx])
            else:
                x_new = self.propose_lp(x[idx], x_best[idx], s, gen)
            m_new, l_new = self.margin_and_loss(x_new, y[idx])
            lower = l_new < loss[idx]
            keep = lower | (m_new < 0)
            loss[idx] = torch.where(lower, l_new, loss[idx])
            margin[idx] = torch.where(keep, m_new, margin[idx])
            x_best[idx] = torch.where(keep[:, None, None, None], x_new, x_best[idx])
            queries[idx] += 1
        return x_best, margin < 0, queries

    def window_size(self, i: int, h: int, w: int) -> int:
        """Side of the square at iteration ``i`` (L2, L1: odd and ≥ 3)."""
        p = p_schedule(i, self.n_queries, self.p_init, self.rescale_schedule)
        s = int(round(math.sqrt(p * h * w)))
        if self.norm in ("l2", "l1"):
            s = max(s, 3)
            s += 1 - s % 2
        return max(min(s, h, w), 1)

    def _signs(self, shape: tuple[int, ...], gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, 2, shape, generator=gen, device=like.device).to(like.dtype) * 2 - 1

    def _positions(self, n: int, s: int, size: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
        return torch.randint(0, size - s + 1, (n,), generator=gen, device=device)

    # ---- L∞ ---------------------------------------------------------------------------------------
    def init_point(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """L∞: vertical stripes of ±ε; L2: the grid of meta patterns with ‖δ‖₂ = ε; L1: that grid (L1 patterns)
        projected onto the L1 ball ∩ box."""
        n, c, h, w = x.shape
        if self.norm == "linf":
            return (x + self.eps * self._signs((n, c, 1, w), gen, x)).clamp(0, 1)
        return self._to_budget(x, self.pattern_grid(x, gen))

    def propose_linf(self, x: torch.Tensor, x_best: torch.Tensor, s: int, gen: torch.Generator,
                     lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        """Set one random s×s window per image to ``x ± ε`` (one sign per channel)."""
        n, c, h, w = x.shape
        mask = window_mask(self._positions(n, s, h, gen, x.device), self._positions(n, s, w, gen, x.device), s, h, w)
        corner = (x + self.eps * self._signs((n, c, 1, 1), gen, x)).clamp(lo, hi)
        return torch.where(mask, corner, x_best)

    # ---- L2 and L1 --------------------------------------------------------------------------------
    def _patterns(self, n: int, s: int, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        """(n, 1, s, s): the meta pattern, transposed for a random half of the samples."""
        pat = meta_pattern(s, self.norm).to(device=like.device, dtype=like.dtype)
        flip = torch.rand((n, 1, 1, 1), generator=gen, device=like.device) > 0.5
        return torch.where(flip, pat.t(), pat).expand(n, 1, s, s)

    def _to_budget(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """L2: ``x + δ`` rescaled to ‖δ‖₂ = ε; L1: projected onto the L1 ball of radius ε(1 − 10⁻⁶) ∩ [0, 1]^d (the
        reference's margin)."""
        if self.norm == "l1":
            return x + project_l1_box(x, delta, self.eps * (1 - 1e-6))
        norms = delta.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
        return (x + self.eps * delta / (norms + 1e-12)).clamp(0, 1)

    def _mass(self, t: torch.Tensor) -> torch.Tensor:
        """Per-channel L2 (L1) norm of windows (n, c, s, s) → (n, c, 1, 1)."""
        if self.norm == "l2":
            return t.pow(2).sum((-2, -1), keepdim=True).sqrt()
        return t.abs().sum((-2, -1), keepdim=True)

    def pattern_grid(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The start's perturbation (L2, L1): a grid of (≤ 5 × 5) windows of meta patterns, a random sign each."""
        n, c, h, w = x.shape
        s = max(min(h, w) // 5, 1)
        delta = torch.zeros_like(x)
        starts_h = range((h - 5 * s) // 2 if h >= 5 * s else 0, h - s + 1, s)
        starts_w = range((w - 5 * s) // 2 if w >= 5 * s else 0, w - s + 1, s)
        for vh in list(starts_h)[: max(h // s, 1)]:  # a grid of windows (≤ 25), not a loop over images
            for vw in list(starts_w)[: max(w // s, 1)]:
                delta[:, :, vh:vh + s, vw:vw + s] += self._patterns(n, s, gen, x) * self._signs((n, c, 1, 1), gen, x)
        return delta

    def propose_lp(self, x: torch.Tensor, x_best: torch.Tensor, s: int, gen: torch.Generator) -> torch.Tensor:
        """L2 and L1: draw two random s × s windows per image, clear window 2, fill window 1 with a fresh pattern plus
        its normalised old content, scaled to the budget left (L2: ‖δ‖₂ = ε; L1: per channel c·((ε − ‖δ‖₁)/c +
        the channel's mass in both windows)), then rescale (L2) or project (L1) onto the budget."""
        n, c, h, w = x.shape
        delta = x_best - x
        p1 = (self._positions(n, s, h, gen, x.device), self._positions(n, s, w, gen, x.device))
        p2 = (self._positions(n, s, h, gen, x.device), self._positions(n, s, w, gen, x.device))
        m2 = window_mask(*p2, s, h, w)
        norm_union = self._mass(delta * (window_mask(*p1, s, h, w) | m2))
        idx1 = window_index(*p1, s)
        old = delta[idx1].permute(0, 3, 1, 2)
        norm_img = lp_norm(delta, self.norm).view(-1, 1, 1, 1)
        new = self._patterns(n, s, gen, x) * self._signs((n, c, 1, 1), gen, x) + old / (self._mass(old) + 1e-12)
        if self.norm == "l2":
            budget = ((self.eps ** 2 - norm_img ** 2).clamp_min(0) / c + norm_union ** 2).sqrt()
        else:
            budget = ((self.eps - norm_img).clamp_min(0) / c + norm_union) * c
        delta = delta.masked_fill(m2, 0.0)
        delta[idx1] = (new / (self._mass(new) + 1e-12) * budget).permute(0, 2, 3, 1)
        return self._to_budget(x, delta)

