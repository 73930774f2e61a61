"""Every registered attack runs from ``robustvit eval`` by its name (one generic suite), and its robust accuracy is
the one recounted independently: the attack built directly with the same options and the unit's seed, run on the
same images, scored by hand. Also: how an attack suite's options are resolved (suite > run > data default) and the
default ε following the data (CIFAR-sized images → 8/255)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.attacks import create_attack, list_attacks
from robustvit.attacks.base import get_attack_class
from robustvit.attacks.patch_fool import PatchFool
from robustvit.attacks.pgd import PGD
from robustvit.attacks.spatial import Spatial
from robustvit.data import create_dataset
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import Batch, EvalContext, create_suite, list_suites
from robustvit.evaluation.suites.adversarial import (attack_kwargs, budgeted, chunk_seed, data_convention,
                                                   random_targets)
from robustvit.models import load_checkpoint
from robustvit.options import option_names
from robustvit.utils import derive_seed

DATA = "synthshapes:test,count=16,size=16"
#: Few steps / queries for whichever attack takes the option (by option name, not by attack).
QUICK = {"steps": 2, "n_queries": 30, "restarts": 1, "n_target_classes": 2, "translations": 2, "rotations": 3}


def quick(name: str) -> dict:
    return {k: v for k, v in QUICK.items() if k in option_names(get_attack_class(name).Options)}


def spec(name: str) -> str:
    """The attack's suite spec: QUICK, and an L2 budget of 2 for an attack that is L2 by default (``--eps`` is L∞)."""
    l2 = get_attack_class(name).Options().norm == "l2"
    return ":".join([name, *(f"{k}={v}" for k, v in quick(name).items()), *(["eps=2"] if l2 else []), "checks=0"])


def test_every_registered_attack_is_a_suite():
    assert set(list_attacks()) <= set(list_suites())


@pytest.fixture(scope="module")
def every_attack(sharp_vit_checkpoint, tmp_path_factory):
    """One ``run_eval`` of every attack's suite at ``--eps 1/255`` on 16 images labelled with the model's own
    predictions (clean accuracy 1, so that the attacks break some images and not others)."""
    out = tmp_path_factory.mktemp("every")
    model = load_checkpoint(sharp_vit_checkpoint).eval()
    x = (create_dataset(DATA).get_batch(torch.arange(16))[0] * 255).round().byte()
    with torch.no_grad():
        y = model(x.float() / 255).argmax(1)
    np.savez(out / "data.npz", x=x.permute(0, 2, 3, 1).numpy(), y=y.numpy(), classes=np.arange(10).astype(str))
    specs = {name: spec(name) for name in list_attacks()}
    cfg = EvalConfig(models=[sharp_vit_checkpoint], data=f"npz:{out / 'data.npz'}", suites=list(specs.values()),
                     out=str(out), batch_size=16, device="cpu", progress=False, options={"eps": "1/255"})
    result = next(iter(run_eval(cfg).values()))
    return specs, result, model, x.float() / 255, y


def recount(name: str, key: str, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, res: dict) -> float:
    """The suite's documented protocol, by hand: one chunk seeded from (run seed 0, suite key, "all", chunk 0); the
    attack seeded from it attacks the clean-correct images (Patch-Fool's final-iterate scoring: every image), a
    targeted one towards a random wrong class drawn next; robust = correct before and after."""
    n = len(y)
    gen = torch.Generator().manual_seed(derive_seed(0, key, "all", 0))
    seed = chunk_seed(Batch(x, y, torch.arange(n), gen))
    kw = dict(quick(name))
    if budgeted(get_attack_class(name)):
        kw["eps"] = res["eps"]
    if name == "autoattack":
        kw["run_checks"] = False
    atk = create_attack(name, model, seed=seed, **kw)
    aim = random_targets(y, 10, gen) if atk.targeted else y
    with torch.no_grad():
        clean_ok = model(x).argmax(1) == y
    if name == "patch_fool":
        with torch.no_grad():
            return (model(atk(x, y)).argmax(1) == y).float().mean().item()
    x_adv = x.clone()
    idx = clean_ok.nonzero().squeeze(1)
    x_adv[idx] = atk(x[idx], aim[idx])
    with torch.no_grad():
        return (clean_ok & (model(x_adv).argmax(1) == y)).float().mean().item()


@pytest.mark.parametrize("name", list_attacks())
def test_each_attack_runs_from_eval_and_its_accuracy_recounts(name, every_attack):
    specs, result, model, x, y = every_attack
    res = result["suites"][specs[name]]
    json.dumps(res)
    assert res["attack"] == name and res["num_images"] == 16 and res["clean_accuracy"] == 1.0
    assert 0 <= res["accuracy"] <= 1
    for k, v in quick(name).items():
        if k != "n_target_classes":
            assert res[k] == v, (k, res[k])
    if budgeted(get_attack_class(name)):      # --eps 1/255 is the run's; an L2 attack's eps=2 the suite's
        assert (res["eps"], res["eps_source"]) == ((2.0, "option") if res["norm"] == "l2" else (1 / 255, "run"))
    assert res["accuracy"] == pytest.approx(recount(name, specs[name], model, x, y, res), abs=1e-9)


def test_the_attacks_are_not_trivial_here(every_attack):
    """The recount above means something: most attacks break some images and leave others."""
    specs, result, *_ = every_attack
    accs = {n: result["suites"][s]["accuracy"] for n, s in specs.items()}
    assert sum(0 < a < 1 for a in accs.values()) >= len(accs) - 2, accs


def test_a_targeted_attack_aims_at_random_wrong_classes(every_attack):
    specs, result, *_ = every_attack
    assert result["suites"][specs["targeted_pgd"]]["targets"] == "random"
    y = torch.arange(10).repeat(20)
    t = random_targets(y, 10, torch.Generator().manual_seed(0))
    assert (t != y).all() and set(t.tolist()) == set(range(10))


# ---- option resolution: suite > run > data default > the attack's own --------------------------------------
CIFAR, IMAGENET = ("cifar", "cifar"), ("imagenet", "imagenet")


def test_suite_option_beats_run_option_beats_data_default():
    kw, src = attack_kwargs(PGD, {}, {"eps": None, "norm": None, "steps": None}, IMAGENET)
    assert kw == {"eps": pytest.approx(4 / 255)} and src == "default:imagenet"
    kw, src = attack_kwargs(PGD, {}, {"eps": "2/255", "norm": "l2", "steps": "3"}, CIFAR)
    assert kw == {"eps": pytest.approx(2 / 255), "norm": "l2", "steps": 3} and src == "run"
    kw, src = attack_kwargs(PGD, {"eps": 1 / 255, "steps": 7}, {"eps": "2/255", "steps": "3"}, CIFAR)
    assert kw == {"eps": 1 / 255, "steps": 7} and src == "option"
    kw, src = attack_kwargs(PGD, {}, {"norm": "L2"}, CIFAR)                 # the data default follows the norm
    assert kw["eps"] == 0.5 and src == "default:cifar"
    with pytest.raises(RobustvitError, match="--steps"):
        attack_kwargs(PGD, {}, {"steps": "many"}, CIFAR)


def test_attacks_unbounded_by_default_take_no_run_or_data_budget():
    kw, src = attack_kwargs(Spatial, {}, {"eps": "2/255", "norm": "l2", "steps": "3"}, CIFAR)
    assert kw == {} and src is None                                          # spatial has no steps either
    kw, src = attack_kwargs(PatchFool, {}, {"eps": "2/255", "steps": "3"}, CIFAR)
    assert kw == {"steps": 3} and src is None
    kw, src = attack_kwargs(PatchFool, {"eps": 4 / 255}, {"eps": "2/255"}, CIFAR)
    assert kw == {"eps": 4 / 255} and src == "option"                        # the mild variant, when asked


def test_every_attack_suite_option_is_an_attack_option_or_a_suite_one():
    """The suite states no attack default of its own: each attack option is None (= run, data or attack default)."""
    for name in list_attacks():
        suite = create_suite(name)
        attack_fields = set(option_names(get_attack_class(name).Options))
        for f in dataclasses.fields(suite.opts):
            if f.name in attack_fields:
                assert f.default is None, (name, f.name)


# ---- #33: the default ε follows the data --------------------------------------------------------------------
def _folder(root, side: int):
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        Image.fromarray(np.full((side, side, 3), 100, np.uint8)).save(root / c / "0.png")
    return create_dataset(f"folder:{root}")


@pytest.mark.parametrize("side, convention", [(32, ("cifar", "cifar-sized")), (64, ("imagenet", "imagenet"))])
def test_default_budget_follows_the_data_size(tmp_path, side, convention):
    ds = _folder(tmp_path / str(side), side)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10))
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec=f"folder:{tmp_path}", dataset=ds,
                      num_classes=10, device=torch.device("cpu"), seed=0, image_size=224)
    assert data_convention(ctx) == convention
    res = create_suite("pgd").settings(ctx)
    assert res["eps"] == pytest.approx(8 / 255 if side == 32 else 4 / 255)
    assert res["eps_source"] == f"default:{convention[1]}"
    ctx.options = {"norm": "l2"}
    assert create_suite("pgd").settings(ctx)["eps"] == pytest.approx(0.5 if side == 32 else 3.0)
