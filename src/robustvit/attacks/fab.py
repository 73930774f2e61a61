"""FAB — the Fast Adaptive Boundary attack (Croce & Hein 2020, "Minimally distorted adversarial examples
with a fast adaptive boundary attack", arXiv:1907.02044), L∞, L2 and L1, as used inside AutoAttack
(arXiv:2003.01690; L1 as in Croce & Hein 2021, arXiv:2103.01208).

A white-box *minimum-norm* attack: at ``x_k`` it linearises the classifier, picks the decision hyperplane closest
in the attacked norm, projects ``x_k`` and the clean ``x_0`` onto it ∩ [0, 1]^d (:func:`project_hyperplane_box`),
and mixes the two, ``x_{k+1} = clip((1 − α)(x_k + η δ_k) + α(x_0 + η δ_0))`` with
``α = min(‖δ_k‖ / (‖δ_k‖ + ‖δ_0‖), α_max)``; after an adversarial iterate it steps back, ``x ← x_0 + β(x − x_0)``.
Later restarts start at distance ε/2 of ``x_0``. Where the smallest adversarial iterate is farther than ε (or none
was found) the *clean* point is returned, so accuracy on the output is the robust accuracy; ``last_distance``
(N,) holds its norm (0 if already misclassified, ``inf`` if none).

``fab`` linearises all K classes (K backward passes per step: use ``fab_t`` on ImageNet); ``targeted=True``
crosses the boundary between the target ``y`` and the strongest other class. ``fab_t`` (AutoAttack's) linearises
``f_t − f_y`` for each of the ``n_target_classes`` most likely wrong classes in turn.

>>> from robustvit.attacks import create_attack
>>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)).eval()
>>> x = torch.rand(3, 3, 8, 8)
>>> atk = create_attack("fab_t", net, eps="8/255", steps=20, n_target_classes=3)
>>> x_adv = atk(x, net(x).argmax(1))
>>> found = torch.isfinite(atk.last_distance)
>>> bool((atk.last_distance[found] <= 8 / 255 + 1e-6).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustvit.attacks.base import NORMS, Attack, lp_norm, register_attack
from robustvit.errors import RobustvitError
from robustvit.options import option

#: Floor on the norms of the two projections in α (as in the paper's implementation).
MIN_NORM = 1e-8


def _view(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.ndim - 1)))


def dual_norm(g: torch.Tensor, norm: str) -> torch.Tensor:
    """The dual norm over the last dimension: L1 for L∞, L2 for L2, L∞ for L1."""
    if norm == "l1":
        return g.abs().amax(-1)
    return g.abs().sum(-1) if norm == "linf" else g.norm(dim=-1)


#: Newton iterations before the remaining rows fall back to the sort (typically 3–5 are used).
MAX_NEWTON = 32


def project_hyperplane_box(t: torch.Tensor, w: torch.Tensor, c: torch.Tensor, norm: str,
                           max_newton: int = MAX_NEWTON) -> torch.Tensor:
    """Minimal-norm step onto a hyperplane inside the unit box, per row: ``min ‖δ‖ s.t. w·δ = c, 0 ≤ t + δ ≤ 1``
    (``t``, ``w``: (M, d); ``c``: (M,)); where the box cannot reach the hyperplane, the corner furthest towards it.

    With c ≥ 0 (else w and c flip) the optimum is ``δ_i = sign(w_i) · min(λ s_i, r_i)``, ``r_i`` the room to the
    box in the direction of ``sign(w_i)``, ``s_i = 1`` (L∞) or ``|w_i|`` (L2, KKT), and λ solves
    ``g(λ) = Σ |w_i| min(λ s_i, r_i) = c``. g is piecewise linear, concave and non-decreasing, so Newton's method
    from λ = 0 climbs to the root without overshooting, exactly once on its linear piece: a few passes instead of
    the reference's sort (fra31/auto-attack ``fab_projections``), ~5× faster at d = 3072. Rows needing more than
    ``max_newton`` iterations go to :func:`_project_sorted`; each iteration syncs the device once.
    """
    flip = torch.where(c < 0, -1.0, 1.0).to(w.dtype)
    w, c = w * flip[:, None], c * flip
    if norm == "l1":
        return _project_l1(t, w, c)
    a, room, s = _terms(t, w, norm)
    feasible = (a * room).sum(1) > c
    tol = 32 * torch.finfo(w.dtype).eps * c          # the rounding of g's sum of non-negative terms
    lam = torch.zeros_like(c)
    for i in range(max_newton + 1):
        reach = lam[:, None] * s
        gap = c - (a * torch.minimum(reach, room)).sum(1)
        todo = feasible & (gap > tol)
        if i == max_newton or not todo.any():
            break
        slope = (a * s * (reach < room)).sum(1)     # g'(λ+): the coordinates not yet at the box
        lam = torch.where(todo, lam + gap / slope.clamp_min(torch.finfo(w.dtype).tiny), lam)
    lam = torch.where(feasible, lam, torch.finfo(w.dtype).max)                 # infeasible: the corner
    d = torch.sign(w) * torch.minimum(lam[:, None] * s, room)
    if todo.any():
        d[todo] = _project_sorted(t[todo], w[todo], c[todo], norm)
    return d


def _project_l1(t: torch.Tensor, w: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """:func:`project_hyperplane_box` in L1 for rows with c ≥ 0, a fractional knapsack: coordinates move to the box
    by decreasing |w_i| (most progress per unit of L1), the last one partly, until w·δ = c (else the corner)."""
    a, room, _ = _terms(t, w, "l1")
    order = a.argsort(dim=1, descending=True)
    a_s, room_s = a.gather(1, order), room.gather(1, order)
    gain = torch.cumsum(a_s * room_s, dim=1)
    m = (gain < c[:, None]).sum(1, keepdim=True)                       # coordinates moved all the way
    before = torch.cat((torch.zeros_like(gain[:, :1]), gain), 1).gather(1, m)
    a_m = torch.cat((a_s, torch.ones_like(a_s[:, :1])), 1).gather(1, m)
    room_m = torch.cat((room_s, torch.zeros_like(room_s[:, :1])), 1).gather(1, m)
    part = ((c[:, None] - before) / a_m.clamp_min(torch.finfo(w.dtype).tiny)).clamp(min=0).minimum(room_m)
    col = torch.arange(w.shape[1], device=w.device)[None]
    step = torch.where(col < m, room_s, torch.where(col == m, part, torch.zeros_like(room_s)))
    return torch.sign(w) * torch.zeros_like(step).scatter(1, order, step)


def _terms(t: torch.Tensor, w: torch.Tensor, norm: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``|w|``, the room ``r`` to the box in the direction of ``sign(w)``, and ``s`` (1 for L∞, ``|w|`` for L2)."""
    a = w.abs()
    return a, torch.where(w > 0, 1 - t, t).clamp_min(0), (torch.ones_like(a) if norm == "linf" else a)


def _project_sorted(t: torch.Tensor, w: torch.Tensor, c: torch.Tensor, norm: str) -> torch.Tensor:
    """:func:`project_hyperplane_box` for rows with c ≥ 0 by sorting the breakpoints ``r_i / s_i``: cumulative
    sums give g at every breakpoint, hence the segment that contains ``c`` and λ on it in closed form."""
    a, room, s = _terms(t, w, norm)
    big = torch.finfo(w.dtype).max
    brk = torch.where(s > 0, room / s.clamp_min(torch.finfo(w.dtype).tiny), torch.full_like(a, big))
    order = brk.argsort(dim=1)
    brk_s, a_s, room_s, s_s = (v.gather(1, order) for v in (brk, a, room, s))
    gain = torch.cumsum(a_s * room_s, dim=1)                                   # saturated coords 0..k
    slope = torch.flip(torch.cumsum(torch.flip(a_s * s_s, [1]), dim=1), [1])   # coords k..d-1
    slope_after = torch.cat((slope[:, 1:], torch.zeros_like(slope[:, :1])), 1)  # coords k+1..d-1
    at_brk = gain + torch.nan_to_num(brk_s * slope_after, nan=0.0, posinf=big)
    m = (at_brk < c[:, None]).sum(1, keepdim=True)                              # saturated coords at λ*
    gain0 = torch.cat((torch.zeros_like(gain[:, :1]), gain), 1).gather(1, m)
    slope0 = torch.cat((slope, torch.zeros_like(slope[:, :1])), 1).gather(1, m)
    lam = (c[:, None] - gain0) / slope0.clamp_min(torch.finfo(w.dtype).tiny)
    lam = torch.where(m >= w.shape[1], torch.full_like(lam, big), lam)          # infeasible: the corner
    return torch.sign(w) * torch.minimum(lam * s, room)


@register_attack
class FAB(Attack):
    """FAB, untargeted (Croce & Hein 2020, arXiv:1907.02044): minimal-norm steps towards the decision boundary,
    kept inside the ε-ball."""

    name = "fab"
    smoke = {"steps": 2, "restarts": 1}
    masking_checks = ("model", "more_steps", "blackbox")
    norms = NORMS

    @dataclass
    class Options(Attack.Options):
        steps: int = option(100, min=1, help="iterations")
        restarts: int = option(5, min=1, help="random restarts on the points still robust (AutoAttack plus: 5)")
        alpha_max: float = option(0.1, min=0, max=1, help="largest step towards the original image (α_max)")
        eta: float = option(1.05, min=1, help="overshoot factor of the projection (η)")
        beta: float = option(0.9, min=0, max=1, help="backward step weight (β), in (0, 1]")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        o = self.opts
        if not 0.0 < o.beta:
            raise RobustvitError(f"{self.name}: beta (backward step) must lie in (0, 1], got {o.beta}")
        self.steps, self.restarts = o.steps, o.restarts
        self.alpha_max, self.eta, self.beta = float(o.alpha_max), float(o.eta), float(o.beta)
        self.last_distance: torch.Tensor | None = None

    def memory_factor(self, num_classes: int) -> int:
        """Untargeted FAB keeps the gradient of every logit (K input-sized tensors per image; ~0.6 GB per 224-px
        image at 1,000 classes); counted as one image's forward and backward pass per 10 classes."""
        return 1 if self.targeted else max(1, num_classes // 10)

    # ---- driver: restarts (and targets) on the points still robust -----------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        logits = self.predict(x)
        robust = ~self.success(logits, y)
        adv, dist = x.clone(), torch.where(robust, torch.inf, 0.0).to(x.dtype)
        for target in self.targets(logits, y):
            for r in range(self.restarts):
                robust = self._attack_remaining(x, y, target, robust, adv, dist, r > 0, gen)
        self.last_distance = dist
        return adv

    def targets(self, logits: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor | None]:
        """The target classes to run over (``None``: untargeted)."""
        return [None]

    def _attack_remaining(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None,
                          robust: torch.Tensor, adv: torch.Tensor, dist: torch.Tensor, rand_start: bool,
                          gen: torch.Generator) -> torch.Tensor:
        """One FAB run on the still-robust points; writes into ``adv``/``dist``; returns the new robust mask."""
        idx = robust.nonzero().squeeze(1)
        if idx.numel() == 0:
            return robust
        best, best_dist = self.single_run(x[idx], y[idx], None if target is None else target[idx], rand_start, gen)
        dist[idx] = torch.minimum(dist[idx], best_dist)
        found = best_dist <= self.eps
        adv[idx[found]] = best[found]
        robust = robust.clone()
        robust[idx[found]] = False
        return robust

    # ---- one FAB run ----------------------------------------------------------------------------
    def start_point(self, x0: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A random point at distance ε/2 of ``x0`` (in the attacked norm; L2 and L1: a Gaussian direction),
        clipped to [0, 1]."""
        if self.norm == "linf":
            t = torch.rand(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype) * 2 - 1
        else:
            t = torch.randn(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype)
        t = t / _view(lp_norm(t, self.norm).clamp_min(1e-12), t)
        return (x0 + 0.5 * self.eps * t).clamp(0, 1)

    def single_run(self, x0: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, rand_start: bool,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (closest adversarial iterate, its distance; inf and ``x0`` where none was found)."""
        x1 = self.start_point(x0, gen) if rand_start else x0.clone()
        best, best_dist = x0.clone(), torch.full((x0.shape[0],), torch.inf, device=x0.device, dtype=x0.dtype)
        for _ in range(self.steps):
            x1 = self.step(x0, x1, y, target)
            is_adv = self.success(self.predict(x1), y)
            d = lp_norm(x1 - x0, self.norm)
            better = is_adv & (d < best_dist)
            best = torch.where(_view(better, x1), x1, best)
            best_dist = torch.where(better, d, best_dist)
            x1 = torch.where(_view(is_adv, x1), x0 + self.beta * (x1 - x0), x1)
        return best, best_dist

    def step(self, x0: torch.Tensor, x1: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        """One FAB step: linearise at ``x1``, project ``x1`` and ``x0`` on the hyperplane ∩ box, mix, extrapolate."""
        df, w = self.boundary(x1, y, target)  # F(z) ≈ df + w·(z − x1); the boundary is F = 0
        p1, p0 = x1.flatten(1), x0.flatten(1)
        c = torch.cat((-df, -df + (w * (p1 - p0)).sum(1)))
        d1, d0 = project_hyperplane_box(torch.cat((p1, p0)), torch.cat((w, w)), c, self.norm).chunk(2)
        a1, a0 = (lp_norm(d, self.norm).clamp_min(MIN_NORM) for d in (d1, d0))
        alpha = (a1 / (a1 + a0)).clamp(0.0, self.alpha_max)[:, None]
        nxt = (1 - alpha) * (p1 + self.eta * d1) + alpha * (p0 + self.eta * d0)
        return nxt.clamp(0, 1).view_as(x1)

    # ---- linearisations --------------------------------------------------------------------------
    def boundary(self, x1: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(F(x1), ∇F(x1) flattened) of the decision function whose zero set is crossed next."""
        if self.targeted:       # y holds the targets: the boundary between y and the strongest other class
            return self.diff_gradient(x1, None, y)
        logits, jac = self.class_jacobian(x1)
        ar = torch.arange(x1.shape[0], device=x1.device)
        df = logits - logits[ar, y][:, None]
        dg = jac - jac[ar, y][:, None]
        dist = df.abs() / (dual_norm(dg, self.norm) + 1e-12)
        dist[ar, y] = torch.inf
        j = dist.argmin(1)
        return df[ar, j], dg[ar, j]

    def class_jacobian(self, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (n, K) and the gradient of every logit, (n, K, d): K backward passes through one graph."""
        xa = x1.detach().requires_grad_(True)
        logits = self.model(xa)
        k = logits.shape[1]
        grads = [torch.autograd.grad(logits[:, j].sum(), xa, retain_graph=j < k - 1)[0].flatten(1) for j in range(k)]
        return logits.detach(), torch.stack(grads, 1)

    def diff_gradient(self, x1: torch.Tensor, pos: torch.Tensor | None, neg: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """F = f_pos − f_neg and its gradient (one backward pass); ``pos=None``: the strongest class ≠ neg."""
        xa = x1.detach().requires_grad_(True)
        logits = self.model(xa)
        ar = torch.arange(x1.shape[0], device=x1.device)
        if pos is None:
            pos = logits.detach().scatter(1, neg[:, None], -torch.inf).argmax(1)
        f = logits[ar, pos] - logits[ar, neg]
        g, = torch.autograd.grad(f.sum(), xa)
        return f.detach(), g.flatten(1)


@register_attack
class FABTargeted(FAB):
    """AutoAttack's targeted FAB: the most likely wrong classes as targets in turn; ``y`` are the true labels."""

    name = "fab_t"
    smoke = {"steps": 2, "n_target_classes": 1}
    aliases = ("fab-t",)

    @dataclass
    class Options(FAB.Options):
        restarts: int = option(1, min=1, help="random restarts per target on the points still robust")
        n_target_classes: int = option(9, min=1, help="target classes tried, the most likely wrong ones first "
                                                      "(capped at classes − 1)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        if self.targeted:
            raise RobustvitError("fab_t picks its own target classes; drop targeted=True (or use fab with targeted=True)")
        self.n_target_classes = self.opts.n_target_classes

    def memory_factor(self, num_classes: int) -> int:
        """One target at a time: the gradient of one logit difference."""
        return 1

    def targets(self, logits: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor | None]:
        if logits.shape[1] < 2:
            raise RobustvitError("fab_t needs a model with at least 2 classes")
        ranked = logits.argsort(dim=1)
        n = min(self.n_target_classes, logits.shape[1] - 1)
        return [ranked[:, -t] for t in range(2, n + 2)]

    def boundary(self, x1: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.diff_gradient(x1, target, y)
