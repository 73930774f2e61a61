"""Non-finite logits are never counted correct nor robust: a model that emits NaN / inf for some images."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.metrics.accuracy import (accuracy, correct, nonfinite_rows, robust_accuracy, robust_correct,
                                        topk_correct)
from robustvit.utils import sum_stats

N, BAD = 16, (0, 1, 2)          # images 0-2 give NaN / inf logits


class SometimesNaN(nn.Module):
    """A small CNN whose logits are NaN (image 0, 1) or +inf (image 2) when the top-left red pixel is > 0.5."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                               nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.f(x - 0.5) * 4
        flag = (x[:, 0, 0, 0] > 0.5)[:, None]
        poison = torch.where(x[:, 1, 0, 0:1] > 0.5, torch.full_like(out, float("inf")), torch.full_like(out, float("nan")))
        return torch.where(flag, out * 0 + poison, out)


def data(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(N, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    x[:, 0, 0, 0] = 0.1
    x[:, 1, 0, 0] = 0.1
    x[list(BAD), 0, 0, 0] = 0.95
    x[2, 1, 0, 0] = 0.95                      # image 2: +inf everywhere
    with torch.no_grad():
        y = model(x).argmax(1)                # NaN rows: argmax picks class 0 — "correct" if the label is 0
    y[list(BAD)] = 0
    y[3] = (y[3] + 1) % 10                    # one finite image misclassified
    return x, y


def evaluate(spec: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="synthshapes:test", dataset=None,
                      num_classes=10, device=torch.device("cpu"), seed=0, options={})
    suite = create_suite(spec)
    stats = {}
    for lo in (0, 8):
        b = Batch(x[lo:lo + 8], y[lo:lo + 8], torch.arange(lo, lo + 8), torch.Generator().manual_seed(lo))
        for part in suite.parts(ctx):
            stats.setdefault(part, []).append(suite.run(ctx, part, b))
    return suite.finalize(ctx, {p: sum_stats(v) for p, v in stats.items()})


def test_metrics_never_count_nonfinite_rows():
    logits = torch.tensor([[1.0, 0.0], [float("nan"), 0.0], [float("inf"), 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 0, 0, 1])
    assert logits.argmax(1).eq(y).sum() == 4               # what a plain argmax would count
    assert nonfinite_rows(logits).tolist() == [False, True, True, False]
    assert correct(logits, y).tolist() == [True, False, False, True]
    assert accuracy(logits, y) == 0.5 and topk_correct(logits, y, (1, 2)) == [2, 2]
    adv = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, float("nan")]])
    assert robust_correct(logits, adv, y).tolist() == [False, False, False, False]
    assert robust_accuracy(logits, logits, y) == 0.5


def test_clean_counts_nonfinite_images_wrong_and_reports_them():
    model = SometimesNaN().eval()
    x, y = data(model)
    with torch.no_grad():
        logits = model(x)
    finite = torch.isfinite(logits).all(1)
    assert (~finite).nonzero().flatten().tolist() == list(BAD)
    expected = int(((logits.argmax(1) == y) & finite).sum())          # independent count
    with pytest.warns(UserWarning, match="3 image"):
        res = evaluate("clean", model, x, y)
    assert res["top1"] == pytest.approx(expected / N) and expected == N - 4
    assert res["num_nonfinite"] == 3


def test_attack_suite_counts_nonfinite_images_neither_clean_nor_robust():
    model = SometimesNaN().eval()
    x, y = data(model)
    with pytest.warns(UserWarning, match="NaN or infinite"):
        res = evaluate("pgd:eps=2/255:steps=2:checks=0", model, x, y)
    assert res["clean_accuracy"] == pytest.approx((N - 4) / N)
    assert res["accuracy"] <= res["clean_accuracy"] and res["num_nonfinite"] == 3


def test_no_key_when_every_logit_is_finite():
    model = SometimesNaN().eval()
    x, y = data(model)
    x[list(BAD), 0, 0, 0] = 0.1
    res = evaluate("clean", model, x, y)
    assert "num_nonfinite" not in res
