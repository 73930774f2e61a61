"""Hand-checked cases for FGSM, PGD, APGD, the losses and the gradient-masking checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.attacks import checks, create_attack
from robustvit.attacks.apgd import checkpoint_intervals
from robustvit.attacks.losses import dlr_loss, dlr_targeted_loss
from robustvit.attacks.pgd import class_visualisation
from robustvit.errors import RobustvitError


def acc(model, x, y) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


@pytest.fixture
def two_class(make_linear, make_images):
    """A 2-class linear model: the CE gradient of class 0 points along w1 − w0 for every input."""
    model = make_linear(2, std=0.05, seed=2).eval()
    x = 0.25 + 0.5 * make_images(4, seed=5)          # in [0.25, 0.75]: no clipping at ε ≤ 0.25
    y = torch.zeros(4, dtype=torch.long)
    direction = model.fc.weight[1] - model.fc.weight[0]
    return model, x, y, direction.detach().view(1, 3, 16, 16)


# ---- FGSM -------------------------------------------------------------------------------------------
def test_fgsm_linear_is_sign_of_weight_difference(two_class):
    model, x, y, d = two_class
    eps = 8 / 255
    x_adv = create_attack("fgsm", model, eps=eps)(x, y)
    torch.testing.assert_close(x_adv, (x + eps * d.sign()).clamp(0, 1), atol=1e-6, rtol=0)


def test_fgsm_clips_to_unit_box(two_class):
    model, _, y, d = two_class
    x = torch.zeros(4, 3, 16, 16)
    x_adv = create_attack("fgsm", model, eps=0.1)(x, y)
    torch.testing.assert_close(x_adv, (0.1 * d.sign()).clamp(0, 1).expand_as(x), atol=1e-6, rtol=0)


def test_fgsm_targeted_moves_towards_target(two_class):
    model, x, _, d = two_class
    target = torch.ones(4, dtype=torch.long)
    x_adv = create_attack("fgsm", model, eps=4 / 255, targeted=True)(x, target)
    torch.testing.assert_close(x_adv, x + 4 / 255 * d.sign(), atol=1e-6, rtol=0)


def test_fgsm_matches_manual_autograd(tiny_model, batch):
    x, y = batch
    xr = x.clone().requires_grad_(True)
    nn.functional.cross_entropy(tiny_model(xr), y).backward()
    expected = (x + 8 / 255 * xr.grad.sign()).clamp(0, 1)
    # bit-identical (the mean loss and the box projection reproduce torchattacks' arithmetic exactly)
    assert torch.equal(create_attack("fgsm", tiny_model)(x, y), expected)


# ---- PGD --------------------------------------------------------------------------------------------
def test_pgd_linf_linear_reaches_the_corner(two_class):
    model, x, y, d = two_class
    x_adv = create_attack("pgd", model, eps=0.1, random_start=False)(x, y)
    torch.testing.assert_close(x_adv, x + 0.1 * d.sign(), atol=1e-6, rtol=0)


def test_pgd_l2_linear_moves_along_the_weight_difference(two_class):
    model, x, y, d = two_class
    x_adv = create_attack("pgd", model, norm="l2", eps=0.5, random_start=False)(x, y)
    torch.testing.assert_close(x_adv, x + 0.5 * d / d.norm(), atol=1e-5, rtol=0)


def test_pgd_default_step_size(tiny_model):
    assert create_attack("pgd", tiny_model, eps=8 / 255).step_size == pytest.approx(2 / 255)
    assert create_attack("pgd", tiny_model, eps=8 / 255, steps=20).step_size == pytest.approx(1 / 255)


def test_pgd_restarts_batched_equals_looped_and_never_weaker(tiny_model, batch):
    x, y = batch
    kw = dict(eps=2 / 255, steps=5, seed=1)
    one = create_attack("pgd", tiny_model, restarts=1, **kw)(x, y)
    batched = create_attack("pgd", tiny_model, restarts=4, **kw)(x, y)
    looped = create_attack("pgd", tiny_model, restarts=4, batch_restarts=False, **kw)(x, y)
    torch.testing.assert_close(batched, looped, atol=1e-6, rtol=0)
    assert acc(tiny_model, batched, y) <= acc(tiny_model, one, y)


def test_pgd_seed_changes_start_and_calls_draw_fresh_numbers(tiny_model, batch):
    x, y = batch
    a = create_attack("pgd", tiny_model, steps=1, seed=0)
    b = create_attack("pgd", tiny_model, steps=1, seed=1)
    first = a(x, y)
    assert not torch.equal(first, b(x, y))
    assert not torch.equal(first, a(x, y))


def test_pgd_targeted_reaches_target(easy_model, easy_batch):
    x, y = easy_batch
    target = (y + 5) % 10
    x_adv = create_attack("pgd", easy_model, eps=0.2, steps=20, targeted=True)(x, target)
    assert acc(easy_model, x_adv, target) == 1.0


def test_stronger_pgd_never_gives_higher_accuracy(tiny_model, batch):
    x, y = batch
    accs = [acc(tiny_model, create_attack("pgd", tiny_model, eps=e, steps=10, random_start=False)(x, y), y)
            for e in (0.0, 1 / 255, 2 / 255, 4 / 255, 16 / 255)]
    assert accs[0] == acc(tiny_model, x, y)
    assert accs == sorted(accs, reverse=True) and accs[-1] < accs[0]


def test_targeted_pgd_and_class_visualisation(easy_model):
    atk = create_attack("targeted_pgd", easy_model)
    assert atk.targeted and atk.norm == "l2" and atk.eps == 15 and atk.steps == 100
    imgs, cls = class_visualisation(easy_model, n=6, image_size=(3, 16, 16), seed=0, steps=20)
    assert imgs.shape == (6, 3, 16, 16) and cls.shape == (6,)
    assert acc(easy_model, imgs, cls) == 1.0
    again, cls2 = class_visualisation(easy_model, n=6, image_size=(3, 16, 16), seed=0, steps=20)
    assert torch.equal(imgs, again) and torch.equal(cls, cls2)


# ---- APGD -------------------------------------------------------------------------------------------
def test_checkpoint_schedule_matches_paper():
    assert checkpoint_intervals(100) == (22, 3, 6)
    assert checkpoint_intervals(10) == (2, 1, 1)


def test_apgd_linear_fools_all(two_class):
    model, x, y, _ = two_class
    with pytest.raises(RobustvitError, match="at least 3"):  # DLR needs ≥ 3 classes
        create_attack("apgd_dlr", model, eps=0.25, steps=20)(x, y)
    x_adv = create_attack("apgd_ce", model, eps=0.25, steps=20)(x, y)
    assert acc(model, x_adv, y) == 0.0


@pytest.mark.parametrize("name", ["apgd_ce", "apgd_dlr", "apgd_t"])
def test_apgd_restarts_never_weaker_and_not_weaker_than_fgsm(name, tiny_model, batch):
    x, y = batch
    eps = 2 / 255
    base = acc(tiny_model, create_attack(name, tiny_model, eps=eps, steps=10, restarts=1)(x, y), y)
    more = acc(tiny_model, create_attack(name, tiny_model, eps=eps, steps=10, restarts=3)(x, y), y)
    assert more <= base <= acc(tiny_model, x, y)


def test_apgd_only_attacks_correct_points_and_keeps_misclassified_clean(tiny_model, batch):
    x, y = batch
    x_adv = create_attack("apgd_ce", tiny_model, eps=8 / 255, steps=5)(x, y)
    with torch.no_grad():
        wrong = tiny_model(x).argmax(1) != y
    assert torch.equal(x_adv[wrong], x[wrong])


def test_apgd_t_caps_targets_and_fools_easy_model(easy_model, easy_batch, make_linear):
    x, y = easy_batch
    atk = create_attack("apgd_t", easy_model, eps=0.1, steps=20, n_target_classes=3)
    assert acc(easy_model, atk(x, y), y) == 0.0
    five = make_linear(5, std=0.1).eval()
    with torch.no_grad():
        y5 = five(x).argmax(1)
    out = create_attack("apgd_t", five, eps=1 / 255, steps=3, n_target_classes=9)(x, y5)  # 4 targets used
    assert out.shape == x.shape


def test_apgd_ce_targeted(easy_model, easy_batch):
    x, y = easy_batch
    target = (y + 1) % 10
    x_adv = create_attack("apgd_ce", easy_model, eps=0.2, steps=20, targeted=True)(x, target)
    assert acc(easy_model, x_adv, target) == 1.0
    with pytest.raises(RobustvitError, match="apgd_t"):
        create_attack("apgd_dlr", easy_model, targeted=True)


def test_apgd_eot_on_deterministic_model_runs(tiny_model, batch):
    x, y = batch
    out = create_attack("apgd_ce", tiny_model, eps=2 / 255, steps=4, eot_iter=3)(x, y)
    assert (out - x).abs().max() <= 2 / 255 + 1e-6


def test_apgd_l2_within_ball(tiny_model, batch):
    x, y = batch
    out = create_attack("apgd_ce", tiny_model, norm="l2", eps=0.3, steps=10)(x, y)
    assert ((out - x).flatten(1).norm(dim=1) <= 0.3 + 1e-5).all()


# ---- losses -----------------------------------------------------------------------------------------
def test_dlr_by_hand():
    z = torch.tensor([[3.0, 1.0, 0.0, -1.0], [1.0, 3.0, 0.0, -1.0]])
    y = torch.tensor([0, 0])
    torch.testing.assert_close(dlr_loss(z, y), torch.tensor([-(3 - 1) / 3, -(1 - 3) / 3]))
    t = torch.tensor([2, 1])
    torch.testing.assert_close(dlr_targeted_loss(z, y, t), torch.tensor([-(3 - 0) / 3.5, -(1 - 3) / 3.5]))
    # invariant to shift and positive scale of the logits
    torch.testing.assert_close(dlr_loss(5 * z + 2, y), dlr_loss(z, y))
    with pytest.raises(RobustvitError, match="at least 3"):
        dlr_loss(z[:, :2], y)


# ---- checks -----------------------------------------------------------------------------------------
class Noisy(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + torch.randn(x.shape[0], 10)


class Softmaxed(Noisy):
    def forward(self, x):
        return self.inner(x).softmax(1)


class Quantised(Noisy):
    def forward(self, x):
        return self.inner((x * 4).round() / 4)


def test_checks_flag_what_they_should(tiny_model, batch):
    x, y = batch
    assert not checks.check_randomized(tiny_model, x)["flag"]
    assert checks.check_randomized(Noisy(tiny_model), x)["flag"]
    assert not checks.check_softmax_output(tiny_model, x)["flag"]
    assert checks.check_softmax_output(Softmaxed(tiny_model), x)["flag"]
    assert not checks.check_zero_gradients(tiny_model, x, y)["flag"]
    z = checks.check_zero_gradients(Quantised(tiny_model), x, y)
    assert z["flag"] and z["detail"]["fraction"] == 1.0
    assert checks.check_blackbox_stronger({"clean": 0.9, "apgd_ce": 0.5, "square": 0.3})["flag"]
    assert not checks.check_blackbox_stronger({"clean": 0.9, "apgd_ce": 0.5, "square": 0.5})["flag"]
    assert checks.check_n_classes(3, 2)["flag"] and not checks.check_n_classes(10, 9)["flag"]
    assert checks.check_n_classes(5, 9)["flag"]
    steps = checks.check_more_steps(tiny_model, x, y, "pgd", steps=(2, 8), eps=2 / 255, random_start=False)
    assert set(steps) == {"flag", "detail", "message"} and len(steps["detail"]["robust_accuracy"]) == 2
    report = checks.run_checks(tiny_model, x, y)
    assert {k: v["flag"] for k, v in report.items()} == {"randomized": False, "softmax_output": False,
                                                         "zero_gradients": False, "n_classes": False}
