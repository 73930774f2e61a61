"""Contract over the whole loss registry (as tests/attacks/test_registry.py for attacks): every built-in loss
gives a finite scalar, restores the model's mode, sends gradients to the model's parameters, leaves none on the
inputs, declares typed options whose defaults parse, and answers to its hyphenated alias."""

import dataclasses

import pytest
import torch

from robustvit.options import describe, parse_options
from robustvit.training import create_loss, list_losses
from robustvit.training.losses import LOSSES

BUILTINS = [n for n in list_losses() if not n.startswith("_")]
FAST = {"trades": {"attack_steps": 2}, "pgd_at": {"attack_steps": 2}, "mpp": {}}


def test_builtin_names_are_snake_case_with_hyphenated_aliases():
    assert {"ce", "pgd_at", "fgsm_rs", "trades", "afat", "afat_random", "afat_patchdrop", "mpp"} <= set(BUILTINS)
    assert all("-" not in n for n in BUILTINS)
    for alias, name in [("pgd-at", "pgd_at"), ("fgsm-rs", "fgsm_rs"), ("afat-random", "afat_random"),
                        ("afat-patchdrop", "afat_patchdrop")]:
        assert LOSSES.canonical(alias) == name and type(create_loss(alias)) is LOSSES.get(name)


@pytest.mark.parametrize("name", BUILTINS)
def test_loss_contract(name, tiny_vit, batch):
    x, y = batch
    x = x.clone()
    loss_fn = create_loss(name, **FAST.get(name, {}))
    loss_fn.setup(tiny_vit)
    for mode in (True, False):
        tiny_vit.train(mode)
        tiny_vit.zero_grad(set_to_none=True)
        loss, clean, adv = loss_fn(tiny_vit, x, y, 5)
        assert loss.ndim == 0 and torch.isfinite(loss) and clean.shape == (len(x), 4)
        assert tiny_vit.training is mode                                    # mode restored
        loss.backward()
        grads = [p.grad for p in tiny_vit.parameters() if p.requires_grad]
        assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0
        assert x.grad is None and not x.requires_grad                       # nothing left on the inputs
        loss_fn.after_step()


@pytest.mark.parametrize("name", BUILTINS)
def test_options_are_typed_dataclasses_whose_defaults_parse(name):
    cls = LOSSES.options_class(name)
    assert dataclasses.is_dataclass(cls)
    defaults = parse_options(cls, {})
    as_strings = {d["name"]: str(d["default"]) for d in describe(cls) if d["default"] is not None}
    assert parse_options(cls, as_strings) == defaults                     # the spec grammar reads every default back
