"""#33: the gradient-masking checks by default cost at most a quarter of the attack (``checks=auto``: the model and
zero-gradient checks on the first chunk, the attack-running ones on one chunk in m, none on a shorter suite — said
so), record their cost beside the attack's, and still flag a masking model; ``checks=all`` checks every attacked
image and ``checks=N`` the first N."""

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


def run(spec: str, model: nn.Module, tmp_path, chunks: int = 2) -> dict:
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="test", dataset=None,
                      num_classes=10, device=torch.device("cpu"), seed=0, out_dir=tmp_path)
    suite = create_suite(spec)
    stats: dict = {}
    for c in range(chunks):
        x = torch.rand(30, 3, 8, 8, generator=torch.Generator().manual_seed(c))
        with torch.no_grad():
            y = model(x).argmax(1)
        y[:6] = (y[:6] + 1) % 10                               # 24 of 30 attacked per chunk
        b = Batch(x, y, torch.arange(30) + 30 * c, torch.Generator().manual_seed(c), chunk=c, chunks=chunks)
        for part in suite.parts(ctx):
            stats.setdefault(part, []).append(suite.run(ctx, part, b))
    return suite.finalize(ctx, {p: sum_stats(v) for p, v in stats.items()})


def test_a_short_suite_gets_the_cheap_checks_and_says_which_it_left_out(tmp_path):
    res = run("pgd:eps=8/255:steps=4:check_queries=30", Net(), tmp_path)
    cost = res["checks_cost"]
    # the documented period: checks s (white) + 2s (more steps) + q (square) passes against the attack's s
    assert cost["mode"] == "auto" and cost["every"] == math.ceil(4 * (4 + 8 + 30) / 4) == 42
    assert cost["images"] == 0 and cost["gradient_images"] == 24                       # the first chunk's attacked
    assert cost["not_run"] == ["blackbox_stronger", "more_steps"] and "checks=all" in cost["why"]
    assert "more_steps" not in res["flags"] and "blackbox_stronger" not in res["flags"]
    assert res["flags"]["zero_gradients"]["detail"]["images"] == 24 and not res["flags"]["zero_gradients"]["flag"]
    assert cost["seconds"] > 0 and cost["attack_seconds"] > 0
    # the fraction of the unrounded times; both times are rounded to the millisecond
    rounding = 0.0005 * cost["attack_seconds"] + 0.002         # the fraction is rounded to 3 decimals
    assert cost["fraction_of_attack"] * cost["attack_seconds"] == pytest.approx(cost["seconds"], abs=rounding)
    full = run("pgd:eps=8/255:steps=4:check_queries=30:checks=all", Net(), tmp_path)
    assert full["checks_cost"]["images"] == 48 and full["checks_cost"]["mode"] == "all"
    assert "not_run" not in full["checks_cost"] and full["flags"]["more_steps"]["detail"]["images"] == 48
    first = run("pgd:eps=8/255:steps=4:check_queries=30:checks=10", Net(), tmp_path)
    assert first["checks_cost"]["images"] == 4 and first["checks_cost"]["mode"] == "first 10"   # 6 of 10 misclassified
    assert full["accuracy"] == res["accuracy"] == first["accuracy"]                      # the attack is unchanged
    assert "checks" not in create_suite("pgd:checks=0").parts(None)                       # off


def test_a_long_suite_runs_every_check_on_one_chunk_in_m(tmp_path):
    # m = ⌈4 × (2 + 4 + 4) / 2⌉ = 20 with steps 2 and 4 queries: chunks 19 and 39 of 45 are checked in full
    res = run("pgd:eps=8/255:steps=2:check_queries=4", Net(), tmp_path, chunks=45)
    cost = res["checks_cost"]
    assert cost["every"] == 20 and cost["images"] == 2 * 24 and cost["gradient_images"] == 3 * 24
    assert "not_run" not in cost
    assert res["flags"]["more_steps"]["detail"]["images"] == 48 and res["flags"]["more_steps"]["detail"]["steps"] == [2, 4]
    assert res["flags"]["blackbox_stronger"]["detail"]["images"] == 48


def test_the_cheap_checks_still_flag_a_masking_model(tmp_path):
    res = run("pgd:eps=8/255:steps=4:check_queries=30", Net(quantise=True), tmp_path)
    assert res["checks_cost"]["gradient_images"] == 24
    zero = res["flags"]["zero_gradients"]
    assert zero["flag"] and zero["detail"]["fraction"] == 1.0 and "zero input gradient" in zero["message"]


def test_the_report_shows_the_checks_cost_and_what_was_left_out(tmp_path):
    from robustvit.report.sections.adversarial import _flag_lines

    res = run("pgd:eps=8/255:steps=4:check_queries=30", Net(), tmp_path)
    line, = _flag_lines("pgd", [{"model": {"name": "m"}, "suites": {"pgd": res}}])
    assert "gradient-masking checks (auto): 24 images" in line and "% of the attack's time" in line
    assert "not run: blackbox_stronger, more_steps" in line and "checks=all" in line
