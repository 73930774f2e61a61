"""The ``certify`` and ``certify_patch`` suites on the run engine, against closed forms: a constant classifier is
certified at radius σ·Φ⁻¹(α^(1/n)) exactly and against every patch the margin rule allows; results.json holds the
settings, ``per_image`` and locuslab's tab-separated table; an interrupted run resumes to the same result."""

from __future__ import annotations

import functools

import pytest
import torch
from scipy.stats import norm
from torch import nn

from robustvit.data import create_dataset
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites import create_suite
from robustvit.facade import evaluate

DATA = "synthshapes:test,count=10,size=16"


class Constant(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(x), 10)
        logits[:, 8] = 1.0
        return logits


@functools.lru_cache(maxsize=1)
def data_labels() -> list[int]:
    data = create_dataset(DATA)
    return [int(data[i][1]) for i in range(10)]


CERTIFY = "certify:sigma=0.5:n0=5:n=40:alpha=0.01:radii=0+0.5+0.6+0.7"
PATCH = "certify_patch:ablation=column:size=4:patch=2+4+5"
SCALED = "certify_patch:size=19:patch=32:reference=224"           # on 16 px: size 1, patch 2
THETA = "certify_patch:size=4:patch=2:threshold=0.05"             # softmax 0.23 / 0.085: every class votes


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One run of every spec (the run engine's start-up dominates a tiny run)."""
    out = tmp_path_factory.mktemp("certify")
    with pytest.warns(UserWarning, match="ablated pixels zero-filled: Constant is not a timm VisionTransformer"):
        res = evaluate(Constant(), DATA, [CERTIFY, PATCH, SCALED, THETA, "clean"], out=out, mean=(0, 0, 0), std=(1, 1, 1),
                       num_classes=10, input_size=16, name="constant", device="cpu", batch_size=4)
    out.joinpath("full.json").write_text(__import__("json").dumps(res))
    return out, res["suites"]


def test_certify_suite_closed_form_and_locuslab_table(results):
    out, suites = results
    res = suites[CERTIFY]
    labels = data_labels()
    share = sum(lab == 8 for lab in labels) / 10
    radius = 0.5 * norm.ppf(0.01 ** (1 / 40))                    # 0.6166…: every draw votes class 8
    assert share == 0.3 and res["certified_accuracy"] == {"0": share, "0.5": share, "0.6": share, "0.7": 0.0}
    assert res["abstain_rate"] == 0.0 and res["num_images"] == 10
    assert {k: res["settings"][k] for k in ("sigma", "n0", "n", "alpha")} == {"sigma": 0.5, "n0": 5, "n": 40, "alpha": 0.01}
    rows = res["per_image"]
    assert [r["idx"] for r in rows] == list(range(10)) and [r["label"] for r in rows] == labels
    assert all(r["predict"] == 8 and r["radius"] == pytest.approx(radius) and r["correct"] == (r["label"] == 8)
               for r in rows)
    table = (out / res["table"]).read_text().splitlines()
    assert table[0] == "idx\tlabel\tpredict\tradius\tcorrect\ttime"
    idx, lab, pred, rad, corr, _ = table[1].split("\t")
    assert (int(idx), int(lab), int(pred), float(rad), int(corr)) == (0, labels[0], 8, round(radius, 3), 0)


def test_certify_patch_suite_closed_form(results):
    """All 16 column bands vote class 8: certified iff 16 > 2(m + s − 1); s = 4 → m ≤ 4."""
    cp, clean = results[1][PATCH], results[1]["clean"]["top1"]
    assert clean == 0.3 and cp["certified_accuracy"] == {"2": clean, "4": clean, "5": 0.0}
    assert cp["clean_accuracy"] == clean and cp["ablated_accuracy"] == pytest.approx(clean)
    assert cp["tokens"] == "zero_fill" and "not a timm VisionTransformer" in cp["tokens_note"]
    assert cp["encoding"] == "rgb" and cp["settings"]["votes"] == "argmax"
    assert cp["settings"]["positions"] == 16 and cp["settings"]["delta"] == [5, 7, 8]


def test_certify_patch_threshold_votes(results):
    """θ = 0.05 below every class's softmax: all 10 classes get all 16 votes, the tie goes to class 0, no margin."""
    cp = results[1][THETA]
    labels = data_labels()
    assert cp["clean_accuracy"] == sum(lab == 0 for lab in labels) / 10 and cp["certified_accuracy"] == {"2": 0.0}
    assert cp["ablated_accuracy"] is None and cp["settings"]["threshold"] == 0.05
    assert cp["settings"]["votes"] == "every class with softmax >= 0.05"


def test_reference_scales_sizes(results):
    s = results[1][SCALED]["settings"]
    assert (s["size_pixels"], s["patch_pixels"], s["delta"]) == (1, [2], [2])


def test_bad_options_are_one_line():
    with pytest.raises(RobustvitError, match="ablation"):
        create_suite("certify_patch:ablation=diagonal")
    with pytest.raises(RobustvitError, match="sigma"):
        create_suite("certify:sigma=0")


def test_report_sections_and_leaderboard_columns(results):
    """The report draws the certified-accuracy curve and the patch table; the leaderboard row reads both suites
    and labels n < 100,000 as a reduced certification (the protocol's deviation)."""
    import json

    from robustvit.report.builder import build_sections
    from robustvit.report.headline import labels, rows

    run = json.loads((results[0] / "full.json").read_text())
    sections = {s.title: s for s in build_sections([run])}
    curve = sections[f"Certified accuracy (`{CERTIFY}`)"]
    assert len(curve.figures) == 1 and "| constant | 0.3000 | 0.3000 | 0.3000 | 0.0000 | 0.0000 | 10 |" in curve.markdown
    patch = sections[f"Certified patch robustness (`{PATCH}`)"]
    assert "| constant | 0.3000 | 0.3000 | 0.3000 | 0.0000 | zero_fill | rgb | 10 |" in patch.markdown
    row = rows(run)[0]
    assert row["certified_l2"] == 0.3 and row["certified_patch"] == 0.3
    assert any("reduced: n = " in lab and "Cohen et al.: 100000" in lab for lab in labels(run))
