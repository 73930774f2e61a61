"""#33/#36: AutoAttack as resumable (member, chunk) units — the same robust accuracy, per-member counts and
per-image examples as AutoAttack run in one go, and a resume after an interrupted member that re-attacks nothing
already done."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.attacks import create_attack
from robustvit.attacks.autoattack import AutoAttack
from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.utils import sum_stats

SPEC = ("autoattack:version=custom:attacks=apgd_ce+apgd_t+square:eps=3/255:steps=2:n_queries=15:n_target_classes=2:"
        "checks=0")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(192, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x - 0.5) * 4


def ctx_for(model: nn.Module, out) -> EvalContext:
    return EvalContext(model=model, model_name="m", models={"m": model}, data_spec="test", dataset=None,
                       num_classes=10, device=torch.device("cpu"), seed=3, out_dir=out)


def chunks(model: nn.Module) -> list[Batch]:
    out = []
    for c in range(2):
        x = torch.rand(12, 3, 8, 8, generator=torch.Generator().manual_seed(c))
        with torch.no_grad():
            y = model(x).argmax(1)
        y[:3] = (y[:3] + 1) % 10                   # three misclassified per chunk
        out.append(Batch(x, y, torch.arange(12) + 12 * c, torch.Generator().manual_seed(c)))
    return out


def run_units(suite, ctx, batches, parts=None) -> dict:
    stats: dict = {}
    for b in batches:
        for part in parts or suite.parts(ctx):
            stats.setdefault(part, []).append(suite.run(ctx, part, b))
    return stats


def test_member_units_equal_autoattack_in_one_go(tmp_path):
    from safetensors.torch import load_file

    model, ctx = Net(), ctx_for(Net(), tmp_path)
    batches = chunks(model)
    suite = create_suite(SPEC + ":save=all")
    assert suite.parts(ctx) == ["0:apgd_ce", "1:apgd_t", "2:square"]      # AutoAttack's own member list
    res = suite.finalize(ctx, {p: sum_stats(v) for p, v in run_units(suite, ctx, batches).items()})
    saved = load_file(str(tmp_path / res["saved"]["file"]))["x_adv"]
    per = {"apgd_ce": 0, "apgd_t": 0, "square": 0}
    robust = 0
    for b in batches:                                  # the reference: the whole cascade in one call, same seed
        aa = create_attack("autoattack", model, eps=3 / 255, version="custom", attacks=["apgd_ce", "apgd_t", "square"],
                           steps=2, n_queries=15, n_target_classes=2, run_checks=False,
                           seed=suite.cascade_seed(ctx, b))
        with torch.no_grad():
            ok = model(b.x).argmax(1) == b.y
        expected = b.x.clone()
        expected[ok] = aa(b.x[ok], b.y[ok])
        assert torch.equal(saved[b.index], expected)               # every image's example, bit-identical
        n_ok = int(ok.sum())
        for k, v in aa.last_report["per_attack"].items():
            per[k] += round(v * n_ok)
        robust += round(aa.last_report["robust_accuracy"] * n_ok)
    assert res["accuracy"] == pytest.approx(robust / 24) and res["accuracy"] < res["clean_accuracy"] == 18 / 24
    assert res["per_attack"] == pytest.approx({k: v / 24 for k, v in per.items()})
    assert per["apgd_ce"] > per["apgd_t"] >= per["square"]              # a later member breaks more points
    assert set(res["member_seconds"]) == {"apgd_ce", "apgd_t", "square"}
    assert not (tmp_path / "adversarial" / suite.key / "cascade").exists()   # the resume states are dropped at the end


def test_resume_after_an_interrupted_member_reattacks_nothing_done(tmp_path, monkeypatch):
    model = Net()
    batches = chunks(model)
    whole = create_suite(SPEC)
    ref = whole.finalize(ctx_for(model, tmp_path / "ref"),
                         {p: sum_stats(v) for p, v in run_units(whole, ctx_for(model, tmp_path / "ref"), batches).items()})
    calls: list[str] = []
    real = AutoAttack.run_member

    def counted(self, atk, *a):
        calls.append(atk.name)
        return real(self, atk, *a)

    monkeypatch.setattr(AutoAttack, "run_member", counted)
    ctx = ctx_for(model, tmp_path / "run")
    first = create_suite(SPEC)                        # process 1: chunk 0's apgd_ce, then killed during apgd_t
    done = {("0:apgd_ce", 0): first.run(ctx, "0:apgd_ce", batches[0])}
    assert calls == ["apgd_ce"]
    # process 2 (a fresh suite, nothing in memory): the store lost the killed chunk's units, so the runner asks
    # for apgd_ce again — read back from the unit's state, not re-attacked — then the rest.
    second = create_suite(SPEC)
    stats: dict = {}
    for c, b in enumerate(batches):
        for part in second.parts(ctx):
            stats.setdefault(part, []).append(second.run(ctx, part, b))
    assert stats["0:apgd_ce"][0] | {"seconds": 0} == done[("0:apgd_ce", 0)] | {"seconds": 0}
    assert calls == ["apgd_ce", "apgd_t", "square", "apgd_ce", "apgd_t", "square"]
    res = second.finalize(ctx, {p: sum_stats(v) for p, v in stats.items()})
    assert (res["accuracy"], res["per_attack"]) == (ref["accuracy"], ref["per_attack"])
    # without an output folder a lost state is replayed: the same numbers
    lone = create_suite(SPEC)
    replay = lone.run(ctx_for(model, None), "2:square", batches[1])
    assert replay["robust"] == stats["2:square"][1]["robust"]
