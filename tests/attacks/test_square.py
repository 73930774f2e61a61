"""Square Attack: ε-bound, determinism, robust ≤ clean, more queries never worse (same seed), success on an
easy model, query accounting (fooled images are not queried again), the schedule and patterns, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robustvit.attacks import create_attack
from robustvit.attacks.square import meta_pattern, p_schedule, window_mask
from robustvit.errors import RobustvitError

from attack_helpers import accuracy

pytestmark = pytest.mark.usefixtures("one_thread")


def size(d: torch.Tensor, norm: str) -> torch.Tensor:
    d = d.flatten(1)
    return d.abs().amax(1) if norm == "linf" else d.norm(dim=1)


class Counting(nn.Module):
    """Wraps a model and counts the images it is queried on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.seen = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += x.shape[0]
        return self.model(x)


@pytest.mark.parametrize("norm,eps", [("linf", 4 / 255), ("l2", 0.3)])
def test_eps_bound_determinism_and_robust_below_clean(norm, eps, tiny_model, batch):
    x, y = batch
    atk = create_attack("square", tiny_model, eps=eps, norm=norm, n_queries=40, seed=2)
    x_adv = atk(x, y)
    assert x_adv.shape == x.shape and torch.isfinite(x_adv).all() and x_adv.min() >= 0 and x_adv.max() <= 1
    assert (size(x_adv - x, norm) <= eps * (1 + 1e-5)).all()
    assert torch.equal(x_adv, create_attack("square", tiny_model, eps=eps, norm=norm, n_queries=40, seed=2)(x, y))
    assert accuracy(tiny_model, x_adv, y) <= accuracy(tiny_model, x, y)
    unchanged = (x_adv == x).flatten(1).all(1)
    with torch.no_grad():
        fooled = tiny_model(x_adv).argmax(1) != y
    assert (unchanged | fooled).all()  # the clean image is returned where nothing was found


@pytest.mark.parametrize("norm,eps", [("linf", 4 / 255), ("l2", 0.3)])
def test_more_queries_never_worse_same_seed(norm, eps, tiny_model, batch):
    x, y = batch
    # without rescaling the schedule, the shorter run is a prefix of the longer one: a guarantee
    kw = dict(eps=eps, norm=norm, seed=5, rescale_schedule=False)
    short, long = create_attack("square", tiny_model, n_queries=30, **kw), create_attack("square", tiny_model, n_queries=150, **kw)
    acc_short, acc_long = accuracy(tiny_model, short(x, y), y), accuracy(tiny_model, long(x, y), y)
    assert acc_long <= acc_short
    assert torch.equal(short.last_queries, long.last_queries.clamp(max=31))     # the initial point + 30
    # with AutoAttack's rescaled schedule: many more queries still win here
    few = create_attack("square", tiny_model, eps=eps, norm=norm, seed=5, n_queries=5)
    many = create_attack("square", tiny_model, eps=eps, norm=norm, seed=5, n_queries=200)
    assert accuracy(tiny_model, many(x, y), y) <= accuracy(tiny_model, few(x, y), y)


@pytest.mark.parametrize("norm,eps", [("linf", 16 / 255), ("l2", 2.0)])
def test_succeeds_on_easy_model(norm, eps, easy_model, easy_batch):
    x, y = easy_batch
    atk = create_attack("square", easy_model, eps=eps, norm=norm, n_queries=200, seed=0)
    x_adv = atk(x, y)
    assert accuracy(easy_model, x_adv, y) == 0.0
    assert (atk.last_queries <= 201).all() and (atk.last_queries >= 1).all()


def test_targeted_on_easy_model(easy_model, easy_batch):
    x, y = easy_batch
    target = (y + 3) % 10
    atk = create_attack("square", easy_model, eps=0.25, n_queries=100, targeted=True)
    x_adv = atk(x, target)
    with torch.no_grad():
        assert (easy_model(x_adv).argmax(1) == target).all()


def test_query_accounting_and_no_queries_on_fooled_images(tiny_model, batch):
    x, y = batch  # half of the labels are wrong: those images are never attacked
    counting = Counting(tiny_model).eval()
    atk = create_attack("square", counting, eps=4 / 255, n_queries=25, restarts=2)
    atk(x, y)
    q = atk.last_queries
    wrong = tiny_model(x).argmax(1) != y
    assert (q[wrong] == 0).all() and (q[~wrong] >= 1).all() and (q <= 2 * 26).all()
    assert counting.seen == x.shape[0] + int(q.sum())  # one clean pass + exactly the counted queries


def test_iterations_follow_the_reference_loop(tiny_model, batch):
    """fra31/auto-attack: one query for the initial point, then ``for i_iter in range(n_queries)``, one query
    per still-robust image each; so an image never fooled costs n_queries + 1 queries."""
    x, y = batch
    robust = create_attack("square", tiny_model, eps=1e-6, n_queries=12, seed=0)   # ε too small to fool
    robust(x, y)
    right = tiny_model(x).argmax(1) == y
    assert (robust.last_queries[right] == 13).all() and (robust.last_queries[~right] == 0).all()

    def reference_p(it: int) -> float:     # the reference's p_selection, written out (resc_schedule=False)
        bounds = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)
        return 0.8 / 2 ** sum(it > b for b in bounds)

    ref = [max(int(round(math.sqrt(reference_p(i) * 224 * 224 * 3 / 3))), 1) for i in range(5000)]
    robust.rescale_schedule = False
    assert [robust.window_size(i, 224, 224) for i in range(5000)] == ref


def test_schedule_and_patterns():
    assert p_schedule(0, 5000, 0.8) == 0.8
    assert p_schedule(2500, 5000, 0.8) == pytest.approx(0.8 / 128)    # 5000 on the 10 000 scale
    assert p_schedule(4999, 5000, 0.8) == pytest.approx(0.8 / 512)
    assert p_schedule(60, 5000, 0.8, rescale=False) == pytest.approx(0.8 / 4)
    for s in (3, 5, 8):
        pat = meta_pattern(s)
        assert pat.shape == (s, s) and pat.norm() == pytest.approx(1.0)
        assert pat[: s // 2].sum() > 0 and pat[s // 2:].sum() < 0
    mask = window_mask(torch.tensor([0, 5]), torch.tensor([2, 0]), 3, 8, 8)
    assert mask.shape == (2, 1, 8, 8) and (mask.sum((1, 2, 3)) == 9).all()
    assert mask[0, 0, 0:3, 2:5].all() and mask[1, 0, 5:8, 0:3].all()


def test_l2_start_is_on_the_sphere(tiny_model):
    x = torch.full((4, 3, 16, 16), 0.5)
    atk = create_attack("square", tiny_model, eps=0.5, norm="l2")
    start = atk.init_point(x, atk.generator(x.device))
    assert torch.allclose(size(start - x, "l2"), torch.full((4,), 0.5), atol=1e-5)
    prop = atk.propose_lp(x, start, 5, atk.generator(x.device))
    assert torch.allclose(size(prop - x, "l2"), torch.full((4,), 0.5), atol=1e-5)


@pytest.mark.parametrize("kw,match", [
    ({"n_queries": 0}, "n_queries"), ({"restarts": 0}, "restarts"), ({"p_init": 0.0}, "p_init"),
    ({"p_init": 1.5}, "p_init"), ({"loss": "hinge"}, "loss"), ({"norm": "l0"}, "norm"), ({"eps": -1}, "eps"),
])
def test_bad_arguments(kw, match, tiny_model):
    with pytest.raises(RobustvitError, match=match):
        create_attack("square", tiny_model, **kw)
