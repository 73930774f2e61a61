"""L1 (Croce & Hein 2021, "Mind the box", arXiv:2103.01208): the projection onto the L1 ball ∩ box against
independent optimality conditions and a bisection, APGD-L1's sparse step and its constraints, the exact minimal L1
distance of a linear model (a fractional knapsack) against APGD-L1 and FAB-L1, Square-L1, AutoAttack's L1 standard
version against the original code's settings, and the L1 protocol entry."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.attacks import create_attack
from robustvit.attacks.apgd import sparse_direction
from robustvit.attacks.base import canonical_norm, lp_norm, project_l1_box
from robustvit.attacks.fab import project_hyperplane_box
from robustvit.attacks.square import meta_pattern
from robustvit.errors import RobustvitError
from robustvit.protocols import assess

from attack_helpers import Binary, accuracy

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the projection onto the L1 ball ∩ box --------------------------------------------------------------
def _box_l1_max(g: torch.Tensor, x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """max g·z over ‖z‖₁ ≤ ε, 0 ≤ x + z ≤ 1, per row: a fractional knapsack (value |g_i| per unit, capacity the room
    in the direction of sign(g_i)), solved greedily coordinate by coordinate."""
    out = torch.zeros(len(g), dtype=g.dtype)
    for r in range(len(g)):
        left = float(eps[r])
        for i in g[r].abs().argsort(descending=True).tolist():
            room = float(1 - x[r, i]) if g[r, i] > 0 else float(x[r, i])
            take = min(room, left)
            out[r] += abs(float(g[r, i])) * take
            left -= take
            if left <= 0:
                break
    return out


def _bisection_projection(x: torch.Tensor, d: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """sign(δ)·clip(|δ| − λ, 0, room) with λ ≥ 0 found by 200 bisection steps on ‖·‖₁ = ε (float64)."""
    room = torch.where(d >= 0, 1 - x, x)
    lo, hi = torch.zeros(len(d), 1, dtype=d.dtype), torch.full((len(d), 1), 10.0, dtype=d.dtype)
    for _ in range(200):
        mid = (lo + hi) / 2
        over = torch.minimum((d.abs() - mid).clamp_min(0), room).sum(1, keepdim=True) > eps[:, None]
        lo, hi = torch.where(over, mid, lo), torch.where(over, hi, mid)
    return torch.sign(d) * torch.minimum((d.abs() - hi).clamp_min(0), room)


def _random_rows(n: int = 60, d: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    x[: n // 4, : d // 2] = torch.randint(0, 2, (n // 4, d // 2), generator=g).double()   # on the box's faces
    delta = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    eps = torch.rand(n, generator=g, dtype=torch.float64) * 3
    eps[:5] = 100.0                                                                        # the box clip alone
    return x, delta, eps


def test_l1_box_projection_is_feasible_and_optimal():
    x, delta, eps = _random_rows()
    p = project_l1_box(x, delta, eps)
    assert (x + p >= -1e-12).all() and (x + p <= 1 + 1e-12).all()
    assert (p.abs().sum(1) <= eps * (1 + 1e-12)).all()
    # the projection of δ onto the convex set C: (δ − p)·(z − p) ≤ 0 for every z ∈ C, i.e. max_C (δ − p)·z = (δ − p)·p
    g = delta - p
    assert torch.allclose(_box_l1_max(g, x, eps), (g * p).sum(1), atol=1e-9)
    assert torch.allclose(p, _bisection_projection(x, delta, eps), atol=1e-9)
    assert torch.allclose(p[:5], (x[:5] + delta[:5]).clamp(0, 1) - x[:5])     # inside the ball after the box clip


def test_l1_box_projection_keeps_feasible_points_and_is_not_rescaling():
    x, delta, eps = _random_rows(seed=1)
    p = project_l1_box(x, delta, eps)
    assert torch.allclose(project_l1_box(x, p, eps), p, atol=1e-12)               # idempotent
    x1, d1 = torch.tensor([[0.5, 0.5, 0.5]]), torch.tensor([[1.0, 0.2, 0.0]])
    assert torch.allclose(project_l1_box(x1, d1, 0.5), torch.tensor([[0.5, 0.0, 0.0]]), atol=1e-6)  # not d1·0.5/1.2
    img = torch.rand(3, 3, 8, 8, dtype=torch.float64)
    flat = project_l1_box(img.flatten(1), torch.randn(3, 192, dtype=torch.float64), 2.0)
    shaped = project_l1_box(img, flat.view(3, 3, 8, 8) * 3, torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64))
    assert shaped.shape == img.shape and torch.allclose(lp_norm(shaped, "l1"), torch.tensor([2.0, 1.0, 0.5]).double())


def test_sparse_direction_keeps_the_top_fraction_with_unit_l1_norm():
    g = torch.tensor([[0.1, -3.0, 0.5, 2.0, -0.2, 0.0, 1.0, -0.7, 0.3, 0.05]])
    d = sparse_direction(g, torch.tensor([0.2]))                                   # top 20 %: −3 and 2
    assert torch.equal(d, torch.tensor([[0, -0.5, 0, 0.5, 0, 0, 0, 0, 0, 0]]))
    assert torch.allclose(sparse_direction(g, torch.tensor([0.0])).abs().sum(), torch.tensor(1.0))
    assert (sparse_direction(g, torch.tensor([1.0])) != 0).sum() == 9               # all but the zero entry


# ---- a linear model: the exact minimal L1 distance ------------------------------------------------------

def _minimal_l1(u: torch.Tensor, x: torch.Tensor, margin: torch.Tensor) -> torch.Tensor:
    """The smallest ‖δ‖₁ with u·δ = −margin and x + δ in the box (greedy knapsack, coordinate by coordinate)."""
    out = []
    for r in range(len(x)):
        need, cost = float(margin[r]), 0.0
        for i in u.abs().argsort(descending=True).tolist():
            room = float(x[r].flatten()[i]) if u[i] > 0 else float(1 - x[r].flatten()[i])
            gain = abs(float(u[i])) * room
            step = room if gain < need else need / abs(float(u[i]))
            cost, need = cost + step, need - min(gain, need)
            if need <= 0:
                break
        out.append(cost if need <= 0 else float("inf"))
    return torch.tensor(out)


@pytest.fixture
def linear_case() -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3 * 8 * 8, generator=g) * 0.3
    x = torch.rand(12, 3, 8, 8, generator=g)
    margin = torch.linspace(0.3, 3.0, 12)
    b = 0.0
    x = x + ((margin - b - x.flatten(1) @ u) / (u @ u))[:, None, None, None] * u.view(3, 8, 8)
    x = x.clamp(0, 1)
    margin = x.flatten(1) @ u + b
    assert (margin > 0).all()
    return Binary(u, b).eval(), x, margin, _minimal_l1(u, x, margin)


@pytest.mark.parametrize("kw", [{}, {"use_largereps": True}])
def test_apgd_l1_fools_exactly_the_points_within_reach(linear_case, kw):
    model, x, _, minimal = linear_case
    eps = float(minimal.median())
    y = torch.zeros(len(x), dtype=torch.long)
    x_adv = create_attack("apgd_ce", model, norm="l1", eps=eps, steps=40, **kw)(x, y)
    fooled = model(x_adv).argmax(1) != y
    assert (lp_norm(x_adv - x, "l1") <= eps * (1 + 1e-6)).all() and x_adv.min() >= 0 and x_adv.max() <= 1
    assert fooled[minimal < 0.9 * eps].all(), (minimal, fooled)
    assert not fooled[minimal > eps * (1 + 1e-4)].any()


def test_fab_l1_finds_the_minimal_l1_perturbation(linear_case):
    model, x, margin, minimal = linear_case
    y = torch.zeros(len(x), dtype=torch.long)
    atk = create_attack("fab", model, norm="l1", eps=100.0, steps=20, restarts=1)
    x_adv = atk(x, y)
    assert accuracy(model, x_adv, y) == 0.0
    assert torch.allclose(atk.last_distance, minimal.to(atk.last_distance), rtol=0.02), (atk.last_distance, minimal)
    # the hyperplane step is the knapsack's: ‖δ‖₁ equals the greedy minimum, and w·δ reaches c
    w = model.u.detach().expand(len(x), -1)
    d = project_hyperplane_box(x.flatten(1), w, -margin, "l1")
    assert torch.allclose(d.abs().sum(1), minimal.to(d), rtol=1e-4)
    assert torch.allclose((w * d).sum(1), -margin, atol=1e-4)


# ---- the attacks on a non-linear model --------------------------------------------------------------------
@pytest.mark.parametrize("name,kw,eps", [("apgd_ce", {"steps": 20}, 1.0), ("apgd_ce", {"steps": 20, "use_largereps": True}, 1.0),
                                         ("apgd_t", {"steps": 10, "n_target_classes": 2, "use_largereps": True}, 1.0),
                                         ("apgd_dlr", {"steps": 20}, 1.0), ("fab_t", {"steps": 10, "n_target_classes": 2}, 1.0),
                                         ("square", {"n_queries": 100}, 4.0)])
def test_l1_attacks_stay_in_the_ball_and_lower_accuracy(name, kw, eps, tiny_model, batch):
    x, y = batch
    atk = create_attack(name, tiny_model, norm="L1", eps=eps, seed=0, **kw)
    x_adv = atk(x, y)
    assert atk.norm == "l1" and (lp_norm(x_adv - x, "l1") <= eps * (1 + 1e-5)).all()
    assert x_adv.min() >= 0 and x_adv.max() <= 1 and torch.isfinite(x_adv).all()
    noise = create_attack("apgd_ce", tiny_model, norm="l1", eps=eps).random_start(x, torch.Generator().manual_seed(0))
    assert (lp_norm(noise - x, "l1") <= eps * (1 + 1e-5)).all()
    clean = accuracy(tiny_model, x, y)
    assert accuracy(tiny_model, x_adv, y) < clean and accuracy(tiny_model, x_adv, y) <= accuracy(tiny_model, noise, y)


def test_norm_spellings_and_refusals(tiny_model):
    assert [canonical_norm(n) for n in ("L1", "1", "l1", "Linf", "2")] == ["l1", "l1", "l1", "linf", "l2"]
    with pytest.raises(RobustvitError, match="does not support norm 'l1'"):
        create_attack("pgd", tiny_model, norm="l1")
    with pytest.raises(RobustvitError, match="use_largereps"):
        create_attack("apgd_ce", tiny_model, norm="linf", use_largereps=True)


def _rectangles_loop(rows: int, cols: int) -> torch.Tensor:
    """Square-L1's half pattern as the reference builds it: rectangles of side 2k+1 around the centre, each adding
    1/(k+1)⁴, then L1-normalised."""
    out = torch.zeros(rows, cols, dtype=torch.float64)
    r0, c0 = rows // 2, cols // 2
    for k in range(max(rows // 2, cols // 2) + 1):
        out[max(r0 - k, 0):min(r0 + k + 1, rows), max(c0 - k, 0):min(c0 + k + 1, cols)] += 1 / (k + 1) ** 4
    return out / out.sum()


@pytest.mark.parametrize("s", [3, 5, 6, 9])
def test_square_l1_pattern_is_the_references(s):
    ref = torch.cat((_rectangles_loop(s // 2, s), -_rectangles_loop(s - s // 2, s)), 0)
    ref = ref / ref.abs().sum()
    pat = meta_pattern(s, "l1")
    assert torch.allclose(pat, ref) and pat.abs().sum() == pytest.approx(1.0)


# ---- AutoAttack's L1 standard version -------------------------------------------------------------------
def _effective(atk, n_classes: int = 10) -> dict[str, dict]:
    return {name: atk.build_member(name, kw, n_classes).settings() for name, kw in atk.members}


def test_autoattack_l1_standard_is_the_originals(tiny_model):
    """fra31/auto-attack ``set_version('standard')`` with norm L1: apgd-ce (5 restarts, use_largereps), apgd-t (5
    targets, 1 restart, use_largereps), fab-t (9 targets, 1 restart), square (5000 queries, p_init 0.8)."""
    atk = create_attack("autoattack", tiny_model, norm="l1", eps=12.0)
    assert atk.member_names() == ["apgd_ce", "apgd_t", "fab_t", "square"]
    m = _effective(atk)
    assert all(s["norm"] == "l1" and s["eps"] == 12.0 for s in m.values())
    assert (m["apgd_ce"]["restarts"], m["apgd_ce"]["use_largereps"], m["apgd_ce"]["steps"]) == (5, True, 100)
    assert (m["apgd_t"]["n_target_classes"], m["apgd_t"]["restarts"], m["apgd_t"]["use_largereps"]) == (5, 1, True)
    assert (m["fab_t"]["n_target_classes"], m["fab_t"]["restarts"], m["fab_t"]["steps"]) == (9, 1, 100)
    assert (m["square"]["n_queries"], m["square"]["p_init"], m["square"]["rescale_schedule"]) == (5000, 0.8, False)
    linf = _effective(create_attack("autoattack", tiny_model, eps=8 / 255))
    assert (linf["apgd_ce"]["restarts"], linf["apgd_ce"]["use_largereps"], linf["apgd_t"]["n_target_classes"]) == (1, False, 9)
    few = _effective(create_attack("autoattack", tiny_model, norm="l1", eps=12.0, n_target_classes=3))
    assert (few["apgd_t"]["n_target_classes"], few["fab_t"]["n_target_classes"]) == (3, 3)


def test_autoattack_l1_members_match_pyautoattack(tiny_model):
    aa = pytest.importorskip("pyautoattack").AutoAttack(tiny_model, norm="L1", eps=12.0, version="standard")
    ours = _effective(create_attack("autoattack", tiny_model, norm="l1", eps=12.0))
    assert [a.replace("-", "_") for a in aa.attacks_to_run] == list(ours)
    assert (aa.apgd.n_restarts, aa.apgd.use_largereps, aa.apgd.n_iter) == (ours["apgd_ce"]["restarts"], True, 100)
    t = aa.apgd_targeted
    assert (t.n_target_classes, t.n_restarts, t.use_largereps) == (ours["apgd_t"]["n_target_classes"], 1, True)
    assert (aa.fab.n_target_classes, aa.fab.n_iter) == (ours["fab_t"]["n_target_classes"], ours["fab_t"]["steps"])
    assert (aa.square.n_queries, aa.square.p_init) == (ours["square"]["n_queries"], ours["square"]["p_init"])


def test_autoattack_l1_runs_and_reports_l1(tiny_model, batch):
    x, y = batch
    atk = create_attack("autoattack", tiny_model, norm="l1", eps=1.0, steps=6, n_queries=20, n_target_classes=2)
    x_adv = atk(x, y)
    r = atk.last_report
    assert r["norm"] == "l1" and (lp_norm(x_adv - x, "l1") <= 1.0 + 1e-5).all()
    assert r["robust_accuracy"] == accuracy(tiny_model, x_adv, y) < r["clean_accuracy"]


# ---- the protocol ----------------------------------------------------------------------------------------
def test_l1_protocol_is_autoattacks_own():
    res = {"attack": "autoattack", "norm": "l1", "eps": 12.0, "version": "standard",
           "attacks": ["apgd_ce", "apgd_t", "fab_t", "square"], "num_images": 10000, "n_target_classes": 9}
    run = {"data": {"spec": "cifar10:test", "num_images": 10000}, "model": {}}
    p = assess("autoattack", res, run)
    assert (p["name"], p["comparable"]) == ("autoattack:cifar10:L1", True)
    p = assess("autoattack", {**res, "eps": 8.0}, run)
    assert not p["comparable"] and any("ε = 8.0 (protocol: 12)" in d for d in p["deviations"])
    p = assess("autoattack", res, {"data": {"spec": "imagenet:val", "num_images": 50000}, "model": {}})
    assert p["name"] == "autoattack" and not p["comparable"]


# ---- the device path -------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_l1_projection_and_apgd_l1_on_cuda(tiny_model, batch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x, delta, eps = _random_rows(n=40, d=300)
    p_cpu = project_l1_box(x, delta, eps)
    p_gpu = project_l1_box(x.cuda(), delta.cuda(), eps.cuda()).cpu()
    assert torch.allclose(p_gpu, p_cpu, atol=1e-9)
    xb, yb = batch[0].cuda(), batch[1].cuda()
    model = tiny_model.cuda()
    for name in ("apgd_ce", "square", "fab_t"):
        kw = {"n_queries": 50} if name == "square" else {"steps": 10}
        x_adv = create_attack(name, model, norm="l1", eps=1.0, use_largereps=True, **kw)(xb, yb) if name == "apgd_ce" \
            else create_attack(name, model, norm="l1", eps=1.0, **kw)(xb, yb)
        assert x_adv.is_cuda and (lp_norm(x_adv - xb, "l1") <= 1.0 + 1e-5).all()
        assert x_adv.min() >= 0 and x_adv.max() <= 1
