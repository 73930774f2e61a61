"""model-vs-human: metrics against hand computations, readers of the released layouts on tiny synthetic files,
the parametric conditions in closed form (and against scipy), the 16-class decision and the suite."""

import math

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.ndimage import gaussian_filter

from robustvit.data.modelvshuman import read_human_trials, read_stimuli
from robustvit.data.mvh_conditions import BG_GREY, apply_condition, greyscale, high_pass, low_pass
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.evaluation.suites.model_vs_human import sixteen_class_decisions
from robustvit.metrics.modelvshuman import Trial, compare_with_humans, error_consistency, short_image_name
from robustvit.metrics.shape_bias import geirhos_categories
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized
from robustvit.utils import add_stats, to_plain

CATS = list(geirhos_categories())
HEADER = "subj,Session,trial,rt,object_response,category,condition,imagename\n"


def test_error_consistency_is_cohens_kappa_by_hand():
    a = [True, True, True, False, False, True, False, True]       # p1 = 5/8
    b = [True, False, True, False, True, True, False, False]      # p2 = 4/8
    r = error_consistency(a, b)
    c_obs = 5 / 8                                                 # agree at 0, 2, 3, 5, 6
    c_exp = 5 / 8 * 4 / 8 + 3 / 8 * 4 / 8
    assert r["observed_consistency"] == pytest.approx(c_obs) and r["expected_consistency"] == pytest.approx(c_exp)
    assert r["error_consistency"] == pytest.approx((c_obs - c_exp) / (1 - c_exp))
    assert error_consistency(a, a)["error_consistency"] == 1.0
    assert short_image_name("0001_cop_s01_c30_knife_10_n03041632_7380.png") == "n03041632_7380.png"
    assert short_image_name("0002_ske_s01_0_dog_00_dog-4581-sketch-16.png") == "dog-4581-sketch-16.png"


def _write_humans(folder, dataset, rows):
    folder.mkdir(parents=True, exist_ok=True)
    for subj, trials in rows.items():
        lines = [f"{subj},1,{i + 1},0.5,{resp},{cat},{cond},{i + 1:04d}_x_s01_{cond}_{cat}_10_n0000_{img}.png"
                 for i, (cond, img, cat, resp) in enumerate(trials)]
        (folder / f"{dataset}_{subj}_session_1.csv").write_text(HEADER + "\n".join(lines) + "\n")


def test_human_data_reader_and_comparison_by_hand(tmp_path):
    # high-pass: CSV "1" is model-vs-human's condition "1.0" (pandas reads the column as floats); "inf" is excluded
    h = {"subject-01": [("1", 1, "dog", "dog"), ("1", 2, "cat", "dog"), ("inf", 3, "car", "car"), ("inf", 4, "cat", "cat")],
         "subject-02": [("1", 1, "dog", "cat"), ("1", 2, "cat", "cat"), ("inf", 3, "car", "car"), ("inf", 4, "cat", "dog")]}
    _write_humans(tmp_path / "high-pass", "high-pass", h)
    humans = read_human_trials(tmp_path, "high-pass")
    assert {t.condition for t in humans} == {"1.0", "inf"} and len(humans) == 8
    model = [Trial("model", "1.0", "n0000_1.png", "dog", "dog"), Trial("model", "1.0", "n0000_2.png", "cat", "cat"),
             Trial("model", "inf", "n0000_3.png", "car", "bear"), Trial("model", "inf", "n0000_4.png", "cat", "cat")]
    r = compare_with_humans("high-pass", model, humans)
    assert r["benchmark_conditions"] == ["1.0"] and r["ood_accuracy"] == 1.0
    c = r["conditions"]["1.0"]
    # model correct on both; each human on one: p = 1 and ½, c_obs = ½, c_exp = ½, κ = 0; (1 − ½)² = ¼
    assert c["human_accuracy"] == 0.5 and c["accuracy_difference"] == 0.25
    assert c["observed_consistency"] == 0.5 and c["error_consistency"] == 0.0
    assert r["error_consistency"] == 0.0 and r["conditions"]["inf"]["accuracy"] == 0.5
    with pytest.raises(RobustvitError, match="same images"):
        compare_with_humans("high-pass", model[:1] + [Trial("model", "1.0", "n0000_9.png", "cat", "cat")], humans)
    with pytest.raises(RobustvitError, match="raw-data"):
        read_human_trials(tmp_path, "contrast")


def test_released_layout_reader(tmp_path):
    d = tmp_path / "contrast" / "dnn" / "session-1"
    d.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(d / "0001_cop_s01_c05_knife_10_n03041632_7380.png")
    Image.new("RGB", (8, 8)).save(d / "0002_cop_s01_c100_bear_10_n02132136_1.png")
    (tmp_path / "sketch" / "cat").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "sketch" / "cat" / "cat-1-sketch-2.png")
    s = read_stimuli(tmp_path, "contrast", CATS)
    assert [(x.condition, x.category, x.image) for x in s] == [("c05", "knife", "n03041632_7380.png"),
                                                              ("c100", "bear", "n02132136_1.png")]
    assert [(x.condition, x.category) for x in read_stimuli(tmp_path, "sketch", CATS)] == [("0", "cat")]
    with pytest.raises(RobustvitError, match="does not exist"):
        read_stimuli(tmp_path, "rotation", CATS)


def test_parametric_conditions_in_closed_form_and_against_scipy():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 24, 20, generator=g, dtype=torch.float64)
    grey = 0.2125 * x[:, 0] + 0.7154 * x[:, 1] + 0.0721 * x[:, 2]
    assert torch.allclose(greyscale(x)[:, 2], grey)
    assert torch.allclose(apply_condition(x, "contrast", "c05")[:, 0], 0.475 + 0.05 * grey)
    assert torch.equal(apply_condition(x, "colour", "cr"), x)
    assert torch.allclose(apply_condition(x, "rotation", "90")[:, 0], torch.from_numpy(np.rot90(grey.numpy(), 1, (1, 2)).copy()))
    n = apply_condition(x, "uniform-noise", "0.1", g)
    base = 0.35 + 0.3 * grey
    assert float((n[:, 0] - base).abs().max()) <= 0.1 + 1e-12 and torch.equal(n[:, 0], n[:, 1])
    assert torch.allclose(apply_condition(x, "uniform-noise", "0.0", g)[:, 0], base)
    # scipy gaussian_filter(mode='constant', cval=0.4423), as generalisation-humans-DNNs' low_pass_filter
    lp = np.clip(gaussian_filter(grey[0].numpy(), 1.5, mode="constant", cval=BG_GREY), 0, 1)
    assert np.allclose(low_pass(x, 1.5)[0, 0].numpy(), lp, atol=1e-12)
    d = grey[0].numpy() - gaussian_filter(grey[0].numpy(), 1.5, mode="constant", cval=BG_GREY)
    assert np.allclose(high_pass(x, 1.5)[0, 0].numpy(), np.clip(d + BG_GREY - d.mean(), 0, 1), atol=1e-12)
    assert torch.allclose(low_pass(x, 0), greyscale(x)) and torch.allclose(high_pass(x, math.inf), greyscale(x))
    # phase scrambling by 0°: the greyscale image back
    assert torch.allclose(apply_condition(x, "phase-scrambling", "0", g), greyscale(x), atol=1e-9)
    with pytest.raises(RobustvitError, match="no condition"):
        apply_condition(x, "contrast", "c07")
    with pytest.raises(RobustvitError, match="released files"):
        apply_condition(x, "sketch", "0")


def test_sixteen_class_decision_averages_probabilities_per_category():
    cats = geirhos_categories()
    knife, dog = cats["knife"], cats["dog"]
    logits = torch.full((1, 1000), -20.0)
    logits[0, knife[0]] = 2.0                     # one knife class: the highest logit
    logits[0, list(dog)] = 1.9                    # every dog class a little lower
    p = logits.softmax(1)[0]
    mean_knife, mean_dog = p[list(knife)].mean(), p[list(dog)].mean()
    want = "knife" if mean_knife > mean_dog else "dog"
    assert CATS[int(sixteen_class_decisions(logits, []))] == want
    small = torch.zeros(1, 16)
    small[0, 3] = 1.0
    shuffled = CATS[::-1]
    assert CATS[int(sixteen_class_decisions(small, shuffled))] == shuffled[3]
    with pytest.raises(RobustvitError, match="1000-class"):
        sixteen_class_decisions(torch.zeros(1, 10), [])


class Constant(torch.nn.Module):
    """A 1000-class model whose decision is the class index coded in the mean red value (round(255·mean))."""

    def forward(self, x):
        logits = torch.zeros(len(x), 1000)
        logits[torch.arange(len(x)), (x[:, 0].mean((1, 2)) * 255).round().long()] = 30.0
        return logits


def _ctx(model, dataset=None):
    return EvalContext(model=model, model_name="m", models={"m": model}, data_spec="fake", dataset=dataset,
                       num_classes=1000, device=torch.device("cpu"), seed=0)


def test_suite_on_released_images_against_humans(tmp_path):
    cats = geirhos_categories()
    d = tmp_path / "datasets" / "colour" / "dnn" / "session-1"
    d.mkdir(parents=True)
    files = [("bw", "bird", cats["bird"][0]), ("bw", "dog", cats["bird"][0]), ("cr", "dog", cats["dog"][0])]
    for i, (cond, cat, cls) in enumerate(files):
        Image.new("RGB", (16, 16), (cls, 0, 0)).save(d / f"{i + 1:04d}_cl_s01_{cond}_{cat}_40_n0000_{i}.png")
    h = {"subject-01": [("bw", 0, "bird", "bird"), ("bw", 1, "dog", "dog"), ("cr", 2, "dog", "dog")],
         "subject-02": [("bw", 0, "bird", "dog"), ("bw", 1, "dog", "bird"), ("cr", 2, "dog", "dog")]}
    _write_humans(tmp_path / "raw" / "colour", "colour", h)
    model = Normalized(Constant(), ModelSpec("c", 1000, (3, 16, 16), (0, 0, 0), (1, 1, 1))).eval()
    suite = create_suite(f"model_vs_human:root={tmp_path / 'datasets'}:raw_data={tmp_path / 'raw'}")
    ctx = _ctx(model)
    ds = suite.dataset(ctx)
    x = torch.stack([ds[i][0] for i in range(len(ds))])
    y = torch.tensor([ds[i][1] for i in range(len(ds))])
    stats = {}
    for lo in (0, 2):                                             # two chunks, added as the runner does
        s = suite.run(ctx, "all", Batch(x[lo:lo + 2], y[lo:lo + 2], torch.arange(lo, min(lo + 2, 3)),
                                        torch.Generator()))
        stats["all"] = add_stats(stats["all"], s) if "all" in stats else s
    r = suite.finalize(ctx, stats)
    assert r["images"] == "released" and r["num_images"] == 3
    c = r["datasets"]["colour"]
    assert c["benchmark_conditions"] == ["bw"] and c["conditions"]["bw"]["accuracy"] == 0.5
    # bw: model right, wrong; subject-01 right, right (κ = 0: c_exp = ½ = c_obs); subject-02 wrong, wrong (κ = 0)
    assert c["conditions"]["bw"]["human_accuracy"] == 0.5 and c["accuracy_difference"] == 0.25
    assert c["error_consistency"] == 0.0 and r["ood_accuracy"] == 0.5


def test_suite_generates_the_parametric_sets_from_16_class_images():
    cats = geirhos_categories()
    suite = create_suite("model_vs_human:datasets=contrast+rotation")
    assert suite.parts(None) == [f"contrast/{c}" for c in ("c100", "c50", "c30", "c15", "c10", "c05", "c03", "c01")] \
        + [f"rotation/{a}" for a in ("0", "90", "180", "270")]
    k = cats["dog"][0]
    x = torch.full((3, 3, 8, 8), k / 255)                          # grey images coding a `dog` class
    y = torch.tensor([k, k, 5])                                    # class 5 is in no category: not counted
    ds = type("D", (), {"classes": [str(i) for i in range(1000)]})()
    model = Normalized(Constant(), ModelSpec("c", 1000, (3, 8, 8), (0, 0, 0), (1, 1, 1))).eval()
    ctx = _ctx(model, ds)
    stats = {p: to_plain(suite.run(ctx, p, Batch(x, y, torch.arange(3), torch.Generator().manual_seed(0))))
             for p in suite.parts(ctx)}
    r = suite.finalize(ctx, stats)
    assert r["images"] == "generated" and r["num_images"] == 2
    con = r["datasets"]["contrast"]["conditions"]
    assert con["c100"]["accuracy"] == 1.0 and con["c50"]["accuracy"] == 0.0   # c50 codes class 140 (a bird)
    assert r["datasets"]["rotation"]["conditions"]["270"]["accuracy"] == 1.0
    with pytest.raises(RobustvitError, match="unknown data set"):
        create_suite("model_vs_human:datasets=sketch")
    with pytest.raises(RobustvitError, match="root="):
        create_suite("model_vs_human:raw_data=/x")


def test_report_section_tabulates_and_plots_per_condition():
    from robustvit.report.sections.model_vs_human import model_vs_human_section
    conds = {"c100": {"accuracy": 0.9, "human_accuracy": 0.95, "num_images": 2},
             "c05": {"accuracy": 0.3, "human_accuracy": 0.7, "num_images": 2}}
    res = {"images": "released", "human_data": "/raw", "ood_accuracy": 0.3, "error_consistency": 0.25,
           "datasets": {"contrast": {"conditions": conds}, "sketch": {"conditions": {"0": {"accuracy": 0.5}}}}}
    sec = model_vs_human_section("model_vs_human", [{"model": {"name": "vit"}, "suites": {"model_vs_human": res}}])
    assert "| vit | 0.3000 | 0.2500 |" in sec.markdown and "released" in sec.markdown
    assert len(sec.figures) == 1                                   # one panel set: contrast (sketch has one condition)
