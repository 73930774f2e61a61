"""FAB / FAB-T: the exact hyperplane-∩-box projection, the known minimal perturbation of a linear model,
ε-bound, determinism, robust ≤ clean, clean points returned where nothing was found within ε, argument errors."""

from __future__ import annotations

import pytest
import torch

from robustvit.attacks import create_attack
from robustvit.attacks.fab import MAX_NEWTON, _project_sorted, lp_norm, project_hyperplane_box
from robustvit.errors import RobustvitError

from attack_helpers import Binary, accuracy

pytestmark = pytest.mark.usefixtures("one_thread")


QUICK = {"steps": 5, "restarts": 1}


# ---- the projection -------------------------------------------------------------------------------
def _reference_projection(t: torch.Tensor, w: torch.Tensor, c: torch.Tensor, norm: str) -> torch.Tensor:
    """Bisection on λ of δ(λ) = sign(w)·min(λ·s, room) (s = 1 for L∞, |w| for L2), in float64."""
    sgn = torch.where(c < 0, -1.0, 1.0)[:, None]
    wf = w * sgn
    room = torch.where(wf > 0, 1 - t, t)
    s = torch.ones_like(w) if norm == "linf" else wf.abs()
    lo, hi = torch.zeros(len(c), 1, dtype=t.dtype), torch.full((len(c), 1), 1e6, dtype=t.dtype)
    for _ in range(200):
        mid = (lo + hi) / 2
        reach = (wf * torch.sign(wf) * torch.minimum(mid * s, room)).sum(1, keepdim=True)
        below = reach < (c[:, None] * sgn)
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    return torch.sign(wf) * torch.minimum(hi * s, room)


@pytest.mark.parametrize("max_newton", [MAX_NEWTON, 1, 0])  # 1, 0: most / all rows fall back to the sort
@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_projection_matches_bisection_and_constraints(norm, max_newton):
    g = torch.Generator().manual_seed(0)
    t = torch.rand(64, 20, generator=g, dtype=torch.float64)
    w = torch.randn(64, 20, generator=g, dtype=torch.float64)
    w[0, :5] = 0
    c = torch.randn(64, generator=g, dtype=torch.float64) * 2
    c[:16] *= 10  # some rows out of the box's reach
    t[32:, ::3] = torch.randint(0, 2, (32, 7), generator=g).double()  # pixels at the box's faces (no room)
    d = project_hyperplane_box(t, w, c, norm, max_newton=max_newton)
    assert (t + d >= -1e-12).all() and (t + d <= 1 + 1e-12).all()
    ref = _reference_projection(t, w, c, norm)
    assert torch.allclose(d, ref, atol=1e-8)
    wf = w * torch.where(c < 0, -1.0, 1.0)[:, None]
    feasible = (wf.abs() * torch.where(wf > 0, 1 - t, t)).sum(1) >= c.abs()
    assert feasible.any() and (~feasible).any()  # both cases exercised
    assert torch.allclose((w * d).sum(1)[feasible], c[feasible], atol=1e-9)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_newton_projection_agrees_with_sort_on_image_sized_float32_rows(norm):
    """FAB's real case: d = 3·32·32 float32 rows, gradient-like w, images with saturated pixels."""
    g = torch.Generator().manual_seed(2)
    t = torch.rand(32, 3072, generator=g).clamp(0.05, 0.95).sub(0.05).div(0.9)  # ~5 % of pixels at 0 or 1
    w = torch.randn(32, 3072, generator=g) * torch.rand(32, 1, generator=g)
    c = torch.randn(32, generator=g) * torch.logspace(-3, 2, 32)          # from tiny steps to the corner
    flip = torch.where(c < 0, -1.0, 1.0)
    exact = _project_sorted(t, w * flip[:, None], c * flip, norm)
    d = project_hyperplane_box(t, w, c, norm)
    scale = exact.abs().amax(1, keepdim=True)
    assert ((d - exact).abs() <= 1e-5 * scale).all()
    assert ((t + d) >= 0).all() and ((t + d) <= 1).all()


def test_projection_without_active_box_is_textbook():
    t = torch.full((2, 50), 0.5, dtype=torch.float64)
    w = torch.randn(2, 50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    c = torch.tensor([0.3, -0.2], dtype=torch.float64)
    l2 = project_hyperplane_box(t, w, c, "l2")
    assert torch.allclose(l2, c[:, None] * w / (w ** 2).sum(1, keepdim=True))
    linf = project_hyperplane_box(t, w, c, "linf")
    assert torch.allclose(linf, torch.sign(w * c[:, None]) * (c.abs() / w.abs().sum(1))[:, None])


# ---- the attack ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fab", "fab_t"])
@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_finds_known_minimal_perturbation_of_linear_model(name, norm):
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3 * 16 * 16, generator=g) * 0.05
    x = 0.4 + 0.2 * torch.rand(4, 3, 16, 16, generator=g)
    margin = torch.tensor([0.3, 0.5, 0.8, 1.0])
    b = float(margin[0] - x[0].flatten() @ u)
    x = x + ((margin - b - x.flatten(1) @ u) / (u @ u))[:, None, None, None] * u.view(3, 16, 16)  # exact margins
    model = Binary(u, b).eval()
    y = torch.zeros(4, dtype=torch.long)
    minimal = margin / (u.abs().sum() if norm == "linf" else u.norm())
    atk = create_attack(name, model, eps=10.0, norm=norm, steps=30, restarts=1)
    x_adv = atk(x, y)
    found = atk.last_distance
    assert (found >= minimal * (1 - 1e-4)).all() and (found <= minimal * 1.01).all(), (found, minimal)
    assert torch.allclose(lp_norm(x_adv - x, norm), found, rtol=1e-4)
    assert accuracy(model, x_adv, y) == 0.0


@pytest.mark.parametrize("name", ["fab", "fab_t"])
@pytest.mark.parametrize("norm,eps", [("linf", 2 / 255), ("l2", 0.1)])
def test_eps_bound_determinism_and_robust_below_clean(name, norm, eps, tiny_model, batch):
    x, y = batch[0][:8], batch[1][:8]
    kw = {**QUICK, "n_target_classes": 2} if name == "fab_t" else QUICK
    x_adv = create_attack(name, tiny_model, eps=eps, norm=norm, seed=1, **kw)(x, y)
    assert x_adv.shape == x.shape and torch.isfinite(x_adv).all()
    assert (lp_norm(x_adv - x, norm) <= eps * (1 + 1e-5)).all() and x_adv.min() >= 0 and x_adv.max() <= 1
    again = create_attack(name, tiny_model, eps=eps, norm=norm, seed=1, **kw)(x, y)
    assert torch.equal(x_adv, again)
    assert accuracy(tiny_model, x_adv, y) <= accuracy(tiny_model, x, y)


def test_returns_clean_point_where_nothing_found_within_eps(tiny_model, batch):
    x, y = batch[0][:8], batch[1][:8]
    atk = create_attack("fab_t", tiny_model, eps=1e-4, steps=10, n_target_classes=2)
    x_adv = atk(x, y)
    changed = (x_adv != x).flatten(1).any(1)
    with torch.no_grad():
        fooled = tiny_model(x_adv).argmax(1) != y
    assert not changed.any()  # nothing within such a tiny ε for this model
    assert torch.equal(fooled, tiny_model(x).argmax(1) != y)
    assert torch.isinf(atk.last_distance[~fooled]).logical_or(atk.last_distance[~fooled] > 1e-4).all()


def test_restart_and_targets_only_on_robust_points_reach_success_with_large_eps(tiny_model, make_images):
    x = make_images(8, seed=3)
    with torch.no_grad():
        y = tiny_model(x).argmax(1)
    atk = create_attack("fab_t", tiny_model, eps=0.5, steps=15)
    x_adv = atk(x, y)
    assert accuracy(tiny_model, x_adv, y) == 0.0
    assert (atk.last_distance <= 0.5).all()


def test_fab_targeted_mode_reaches_the_target(easy_model, easy_batch):
    x, y = easy_batch
    target = (y + 3) % 10
    atk = create_attack("fab", easy_model, eps=0.25, steps=10, restarts=1, targeted=True)
    x_adv = atk(x, target)
    with torch.no_grad():
        assert (easy_model(x_adv).argmax(1) == target).all()


@pytest.mark.parametrize("name,kw,match", [
    ("fab", {"steps": 0}, "steps"), ("fab", {"restarts": 0}, "restarts"), ("fab", {"alpha_max": 1.5}, "alpha_max"),
    ("fab", {"eta": 0.5}, "eta"), ("fab", {"beta": 0.0}, "beta"), ("fab", {"norm": "l0"}, "norm"),
    ("fab_t", {"n_target_classes": 0}, "n_target_classes"), ("fab_t", {"targeted": True}, "targeted"),
    ("fab", {"eps": "a/b"}, "eps"),
])
def test_bad_arguments(name, kw, match, tiny_model):
    with pytest.raises(RobustvitError, match=match):
        create_attack(name, tiny_model, **kw)


def test_defaults_follow_autoattack(tiny_model):
    fab, fab_t = create_attack("fab", tiny_model), create_attack("fab_t", tiny_model)
    assert (fab.steps, fab.restarts, fab.alpha_max, fab.eta, fab.beta) == (100, 5, 0.1, 1.05, 0.9)
    assert (fab_t.restarts, fab_t.n_target_classes) == (1, 9)
