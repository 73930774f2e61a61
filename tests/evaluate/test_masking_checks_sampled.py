"""#33: the gradient-masking checks by default run on a sample sized to cost about a quarter of the attack
(``checks=auto``), record their cost beside the attack's, and still flag a masking model; ``checks=all`` checks
every attacked image and ``checks=N`` the first N."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.utils import sum_stats


class Net(nn.Module):
    def __init__(self, quantise: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(192, 10))
        self.quantise = quantise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quantise:                      # a masking defence: the input is rounded, every gradient is zero
            x = torch.round(x * 4) / 4
        return self.f(x - 0.5) * 4


def run(spec: str, model: nn.Module, tmp_path) -> dict:
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="test", dataset=None,
                      num_classes=10, device=torch.device("cpu"), seed=0, out_dir=tmp_path)
    suite = create_suite(spec)
    stats: dict = {}
    for c in range(2):
        x = torch.rand(30, 3, 8, 8, generator=torch.Generator().manual_seed(c))
        with torch.no_grad():
            y = model(x).argmax(1)
        y[:6] = (y[:6] + 1) % 10                               # 24 of 30 attacked per chunk
        b = Batch(x, y, torch.arange(30) + 30 * c, torch.Generator().manual_seed(c))
        for part in suite.parts(ctx):
            stats.setdefault(part, []).append(suite.run(ctx, part, b))
    return suite.finalize(ctx, {p: sum_stats(v) for p, v in stats.items()})


def test_default_checks_are_a_sample_sized_to_the_attack_with_their_cost_recorded(tmp_path):
    res = run("pgd:eps=8/255:steps=4:check_queries=30", Net(), tmp_path)
    cost = res["checks_cost"]
    # the documented stride: checks 2 + s (white) + 2s (more steps) + q/3 (square) against the attack's s
    every = math.ceil(4 * (2 + 4 + 8 + 30 / 3) / 4)
    assert cost["mode"] == "auto" and cost["every"] == every == 24
    assert cost["images"] == 2 * math.ceil(24 / every) == 2                  # ranks 0, k, 2k … of each chunk
    assert cost["seconds"] > 0 and cost["attack_seconds"] > 0
    assert cost["fraction_of_attack"] == pytest.approx(cost["seconds"] / cost["attack_seconds"], rel=0.2, abs=0.01)
    assert res["flags"]["more_steps"]["detail"]["images"] == 2 and res["flags"]["more_steps"]["detail"]["steps"] == [4, 8]
    assert not any(f["flag"] for f in res["flags"].values())
    full = run("pgd:eps=8/255:steps=4:check_queries=30:checks=all", Net(), tmp_path)
    assert full["checks_cost"]["images"] == 48 and full["checks_cost"]["mode"] == "all"
    first = run("pgd:eps=8/255:steps=4:check_queries=30:checks=10", Net(), tmp_path)
    assert first["checks_cost"]["images"] == 4 and first["checks_cost"]["mode"] == "first 10"   # 6 of 10 misclassified
    assert full["accuracy"] == res["accuracy"] == first["accuracy"]                      # the attack is unchanged
    assert "checks" not in create_suite("pgd:checks=0").parts(None)                       # off


def test_the_sample_still_flags_a_masking_model(tmp_path):
    res = run("pgd:eps=8/255:steps=4:check_queries=30", Net(quantise=True), tmp_path)
    assert res["checks_cost"]["images"] == 2
    zero = res["flags"]["zero_gradients"]
    assert zero["flag"] and zero["detail"]["fraction"] == 1.0 and "zero input gradient" in zero["message"]
