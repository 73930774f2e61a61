"""The shared checker: every registered attack, on a tiny model and tiny inputs.

Shape/dtype/range/no NaN, ε-bound (bounded attacks, every supported norm), determinism under a seed, robust
accuracy ≤ clean accuracy, model mode restored and no gradients left on the parameters, targeted mode
where supported. Attacks are built with quick settings (few steps/queries) for the keywords they accept.
"""

from __future__ import annotations

import pytest
import torch

from robustvit.attacks import create_attack, list_attacks
from robustvit.attacks.base import attack_keywords, get_attack_class, lp_norm
from robustvit.errors import RobustvitError

from attack_helpers import accuracy

EPS = {"linf": 8 / 255, "l2": 0.5, "l1": 2.0}
QUICK = {"steps": 3, "n_queries": 30, "restarts": 1, "n_restarts": 1, "n_iter": 3, "n_target_classes": 2,
         "skip_missing": True, "eot_iter": 1}
ALL = list_attacks()


def model_for(name: str, model: torch.nn.Module, request: pytest.FixtureRequest) -> torch.nn.Module:
    return request.getfixturevalue("tiny_vit16") if get_attack_class(name).requires_probe else model


def build(name: str, model: torch.nn.Module, **kw) -> object:
    accepted = attack_keywords(name)
    args = {k: v for k, v in QUICK.items() if k in accepted}
    args.update(kw)
    return create_attack(name, model, **args)


def test_registry_lists_my_attacks():
    for name in ("fgsm", "pgd", "targeted_pgd", "apgd_ce", "apgd_dlr", "apgd_t", "autoattack"):
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
            size = lp_norm(x_adv - x, norm)
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


HYPHENATED = {"apgd-ce": "apgd_ce", "apgd-dlr": "apgd_dlr", "apgd-t": "apgd_t", "fab-t": "fab_t",
              "patch-fool": "patch_fool", "targeted-pgd": "targeted_pgd"}


def test_names_are_snake_case_and_old_spellings_are_aliases(tiny_model, tiny_vit16):
    assert all(n == n.lower() and "-" not in n for n in ALL)
    for old, new in HYPHENATED.items():
        assert new in ALL and old not in ALL
        assert get_attack_class(old) is get_attack_class(new)
        model = tiny_vit16 if new == "patch_fool" else tiny_model
        a, b = build(old, model), build(new, model)
        assert type(a) is type(b) and a.name == new


def test_alias_builds_the_same_attack(tiny_model, batch):
    x, y = batch
    a = create_attack("apgd-ce", tiny_model, eps=8 / 255, steps=3, seed=1)(x, y)
    b = create_attack("apgd_ce", tiny_model, eps=8 / 255, steps=3, seed=1)(x, y)
    assert torch.equal(a, b)


def test_options_are_typed_from_strings(tiny_model, batch):
    x, y = batch
    from_strings = create_attack("pgd", tiny_model, eps="8/255", steps="3", random_start="false", seed="2")
    typed = create_attack("pgd", tiny_model, eps=8 / 255, steps=3, random_start=False, seed=2)
    assert from_strings.steps == 3 and from_strings.use_random_start is False
    assert torch.equal(from_strings(x, y), typed(x, y))


@pytest.mark.parametrize("kwargs, words", [({"steps": "many"}, ["steps", "'many'", "integer"]),
                                           ({"eps": "nan"}, ["eps", "finite"]),
                                           ({"stepz": 3}, ["stepz", "steps"])])
def test_bad_option_is_one_line(tiny_model, kwargs, words):
    with pytest.raises(RobustvitError) as e:
        create_attack("pgd", tiny_model, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("name", ALL)
def test_options_are_stated_once_on_the_class(name, tiny_model, request):
    """The constructor takes exactly the Options fields; what it is not given is the field's default."""
    import dataclasses

    cls = get_attack_class(name)
    model = model_for(name, tiny_model, request)
    atk = build(name, model)
    given = {k for k in QUICK if k in attack_keywords(name)}
    for f in dataclasses.fields(cls.Options):
        if f.name not in given:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert getattr(atk.opts, f.name) == default, (name, f.name)
    with pytest.raises(RobustvitError, match="no option 'not_an_option'"):
        cls(model, not_an_option=1)


def test_python_constructor_takes_the_options(tiny_model):
    from robustvit.attacks.pgd import PGD, TargetedPGD

    atk = PGD(tiny_model, eps="4/255", steps=20)
    assert (atk.eps, atk.steps, atk.step_size, atk.restarts) == (4 / 255, 20, 2.5 * (4 / 255) / 20, 1)
    tp = TargetedPGD(tiny_model)           # the subclass restates only the defaults it changes
    assert (tp.eps, tp.norm, tp.steps, tp.targeted, tp.use_random_start) == (15.0, "l2", 100, True, False)


def test_every_attack_option_has_a_help_line():
    from robustvit.attacks import list_attacks
    from robustvit.attacks.base import get_attack_class
    from robustvit.options import describe

    missing = [f"{name}.{o['name']}" for name in list_attacks() for o in describe(get_attack_class(name).Options)
               if not o["help"]]
    assert not missing, f"give these options a help line (option(..., help=...)): {missing}"
