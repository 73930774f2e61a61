"""The shared checker: every registered attack, on a tiny model and tiny inputs.

Shape/dtype/range/no NaN, ε-bound (bounded attacks, every supported norm), determinism under a seed, robust
accuracy ≤ clean accuracy, model mode restored and no gradients left on the parameters, targeted mode
where supported. Attacks are built with quick settings (few steps/queries) for the keywords they accept.
"""

from __future__ import annotations

import pytest
import torch

from robustvit.attacks import create_attack, list_attacks
from robustvit.attacks.base import attack_keywords, get_attack_class
from robustvit.errors import RobustvitError

EPS = {"linf": 8 / 255, "l2": 0.5}
QUICK = {"steps": 3, "n_queries": 30, "restarts": 1, "n_restarts": 1, "n_iter": 3, "n_target_classes": 2,
         "skip_missing": True, "eot_iter": 1}
ALL = list_attacks()
VIT_ONLY = {"patch-fool"}   # attacks that need a ViT's attention maps


def model_for(name: str, model: torch.nn.Module, request: pytest.FixtureRequest) -> torch.nn.Module:
    return request.getfixturevalue("tiny_vit16") if name in VIT_ONLY else model


def build(name: str, model: torch.nn.Module, **kw) -> object:
    accepted = attack_keywords(name)
    args = {k: v for k, v in QUICK.items() if k in accepted}
    args.update(kw)
    return create_attack(name, model, **args)


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def test_registry_lists_my_attacks():
    for name in ("fgsm", "pgd", "targeted-pgd", "apgd-ce", "apgd-dlr", "apgd-t", "autoattack"):
        assert name in ALL
    assert list_attacks("apgd*") == sorted(n for n in ALL if n.startswith("apgd"))


def test_unknown_attack_and_keyword(tiny_model):
    with pytest.raises(RobustvitError, match="did you mean"):
        create_attack("pgdd", tiny_model)
    with pytest.raises(RobustvitError, match="pgd"):
        create_attack("pgd", tiny_model, stepz=3)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ALL)
def test_attack_contract(name, tiny_model, batch, request):
    x, y = batch
    tiny_model = model_for(name, tiny_model, request)
    cls = get_attack_class(name)
    for norm in cls.norms:
        eps = EPS.get(norm, 8 / 255)
        atk = build(name, tiny_model, eps=eps, norm=norm, seed=3)
        tiny_model.train()
        x_adv = atk(x, y)
        assert tiny_model.training, f"{name} did not restore train mode"
        tiny_model.eval()
        assert all(p.grad is None for p in tiny_model.parameters()), f"{name} left gradients"
        assert x_adv.shape == x.shape and x_adv.dtype == x.dtype and x_adv.device == x.device
        assert torch.isfinite(x_adv).all()
        assert x_adv.min() >= 0 and x_adv.max() <= 1
        if cls.bounded:
            d = (x_adv - x).flatten(1)
            size = d.abs().amax(1) if norm == "linf" else d.norm(dim=1)
            assert (size <= eps * (1 + 1e-5) + 1e-6).all(), f"{name} ({norm}) leaves the ε-ball: {size.max()}"
        again = build(name, tiny_model, eps=eps, norm=norm, seed=3)(x, y)
        assert torch.equal(x_adv, again), f"{name} ({norm}) is not deterministic under a seed"
        if not atk.targeted:
            assert accuracy(tiny_model, x_adv, y) <= accuracy(tiny_model, x, y)


@pytest.mark.parametrize("name", ALL)
def test_eps_string(name, tiny_model, request):
    atk = build(name, model_for(name, tiny_model, request), eps="4/255")
    assert abs(atk.eps - 4 / 255) < 1e-12


@pytest.mark.parametrize("name", ALL)
def test_targeted_mode_if_supported(name, easy_model, easy_batch):
    x, y = easy_batch
    target = (y + 3) % 10
    try:
        norm = "linf" if "linf" in get_attack_class(name).norms else get_attack_class(name).norms[0]
        atk = build(name, easy_model, eps=0.25 if norm == "linf" else 8.0, norm=norm, targeted=True, seed=0)
    except RobustvitError:
        pytest.skip(f"{name} has no targeted mode")
    if not atk.targeted:
        pytest.skip(f"{name} ignores targeted")
    x_adv = atk(x, target)
    with torch.no_grad():
        hit = (easy_model(x_adv).argmax(1) == target).float().mean().item()
    assert hit >= 0.5, f"{name} reached the target on only {hit:.0%} of an easy linear model's images"
