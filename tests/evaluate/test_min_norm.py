"""Suite ``min_norm``: the curve against an independent computation from the distances in the unit store, at ε = 0
the clean accuracy, monotone; the distances equal FMN's (and FAB's) run directly on the same images; the curve no
higher than fixed-ε PGD at its ε; quantiles; the protocol label; the report section with the fixed-ε points."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from robustvit.attacks import create_attack
from robustvit.data import create_dataset
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import Batch, create_suite
from robustvit.evaluation.suites.adversarial import chunk_seed
from robustvit.evaluation.suites.min_norm import accuracy_at, accuracy_curve, quantile
from robustvit.models import load_checkpoint
from robustvit.protocols import assess
from robustvit.runs.store import UnitStore
from robustvit.utils import derive_seed

DATA = "synthshapes:test,count=24,size=16"
FMN_KEY, FAB_KEY, PGD_KEY = "min_norm:steps=20", "min_norm:attack=fab:norm=l2:steps=3:restarts=1", "pgd:eps=1/255:checks=0"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models gain nothing from threads; on a loaded 2-core box two threads are many times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def run(sharp_vit_checkpoint, tmp_path_factory):
    """24 images labelled with the model's predictions except the last 6 (clean accuracy 0.75); one chunk of 16
    and one of 8; FMN (L∞) and FAB (L2) curves and PGD at 1/255."""
    out = tmp_path_factory.mktemp("minnorm")
    model = load_checkpoint(sharp_vit_checkpoint).eval()
    x = (create_dataset(DATA).get_batch(torch.arange(24))[0] * 255).round().byte()
    with torch.no_grad():
        y = model(x.float() / 255).argmax(1)
    y[18:] = (y[18:] + 1) % 10
    np.savez(out / "data.npz", x=x.permute(0, 2, 3, 1).numpy(), y=y.numpy(), classes=np.arange(10).astype(str))
    cfg = EvalConfig(models=[sharp_vit_checkpoint], data=f"npz:{out / 'data.npz'}", suites=[FMN_KEY, FAB_KEY, PGD_KEY],
                     out=str(out), batch_size=16, device="cpu", progress=False)
    doc = next(iter(run_eval(cfg).values()))
    return doc, model, x.float() / 255, y, out


def stored_distances(out, key: str) -> dict[int, float]:
    """The per-image distances as the units hold them (every chunk's), read from the store itself."""
    with UnitStore(next(out.rglob("units.sqlite")).parent) as store:
        tasks = {t for t, _, _ in store.done()}
        task = next(t for t in tasks if t.endswith(key))
        chunks = store.stats(task)["all"]
    merged: dict[int, float] = {}
    for c in chunks:
        merged.update({int(k): math.inf if v is None else v for k, v in c["per_image"].items()})
    return merged


def test_curve_is_the_distances_robust_fraction(run):
    doc, model, x, y, out = run
    res = doc["suites"][FMN_KEY]
    json.dumps(res)
    d = stored_distances(out, FMN_KEY)
    assert sorted(d) == list(range(24))
    with torch.no_grad():
        clean_ok = (model(x).argmax(1) == y).tolist()
    assert res["clean_accuracy"] == sum(clean_ok) / 24 == 0.75
    assert all((d[i] == 0) != clean_ok[i] for i in range(24))     # misclassified ⇔ distance 0
    curve = res["curve"]
    assert curve[0] == [0.0, res["clean_accuracy"]]
    accs = [a for _, a in curve]
    assert all(a >= b for a, b in zip(accs, accs[1:])) and len(curve) > 5
    eps_grid = sorted({0.0, *(v for v in d.values() if 0 < v < math.inf)})
    for eps, acc in curve:                                         # independent: count the distances above ε
        assert acc == sum(v > eps for v in d.values()) / 24
    assert [e for e, _ in curve] == eps_grid
    for eps in (0.3 / 255, 1 / 255, 3 / 255):                      # between the points: the step's value
        assert accuracy_at(curve, eps) == sum(v > eps for v in d.values()) / 24
    assert res["per_image"] == [{"idx": i, "distance": None if math.isinf(d[i]) else d[i]} for i in range(24)]


def test_distances_are_fmns_and_fabs_on_the_same_images(run):
    doc, model, x, y, out = run
    with torch.no_grad():
        ok = model(x).argmax(1) == y
    for key, attack, kw in ((FMN_KEY, "fmn", {"steps": 20}),
                            (FAB_KEY, "fab", {"norm": "l2", "steps": 3, "restarts": 1, "eps": 0.5})):
        d = stored_distances(out, key)
        for start, n in ((0, 16), (16, 8)):                        # each chunk: its seed, its correct images
            idx = torch.arange(start, start + n)
            gen = torch.Generator().manual_seed(derive_seed(0, key, "all", start // 16))
            seed = chunk_seed(Batch(x[idx], y[idx], idx, gen))
            atk = create_attack(attack, model, seed=seed, **kw)
            sel = idx[ok[idx]]
            atk(x[sel], y[sel])
            assert [d[int(i)] for i in sel] == atk.last_distance.double().tolist(), key
    fab = doc["suites"][FAB_KEY]
    assert (fab["attack"], fab["norm"], fab["eps"], fab["restarts"]) == ("fab", "l2", 0.5, 1)


def test_curve_is_no_higher_than_pgd_at_its_eps(run):
    doc, *_ = run
    pgd = doc["suites"][PGD_KEY]
    fmn = accuracy_at(doc["suites"][FMN_KEY]["curve"], pgd["eps"])
    assert fmn <= pgd["accuracy"] + 1 / 24 and fmn < doc["suites"][FMN_KEY]["clean_accuracy"]


def test_quantiles_and_median(run):
    doc, _, _, _, out = run
    res = doc["suites"][FMN_KEY]
    attacked = sorted(v for v in stored_distances(out, FMN_KEY).values() if v > 0)
    assert len(attacked) == 18 and res["num_not_found"] == sum(map(math.isinf, attacked))
    assert res["median_distance"] == pytest.approx((attacked[8] + attacked[9]) / 2)
    assert res["quantiles"]["0.5"] == res["median_distance"]
    qs = [res["quantiles"][k] for k in ("0.1", "0.25", "0.5", "0.75", "0.9")]
    assert qs == sorted(qs) and qs[0] >= attacked[0] and qs[-1] <= attacked[-1]


def test_curve_and_quantile_helpers_by_hand():
    d = [0.0, 0.2, math.inf, 0.2, 0.1, 0.0]
    assert accuracy_curve(d) == [[0.0, 4 / 6], [0.1, 3 / 6], [0.2, 1 / 6]]
    assert accuracy_at(accuracy_curve(d), 5.0) == 1 / 6 and accuracy_at(accuracy_curve(d), -1) is None
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and quantile([1.0, 2.0, 3.0, 4.0], 0.25) == 1.75
    assert quantile([1.0, math.inf], 0.5) == math.inf and quantile([1.0, math.inf], 0.0) == 1.0
    assert math.isnan(quantile([], 0.5))


def test_protocol_is_labelled_not_robustbench(run):
    doc, *_ = run
    p = doc["suites"][FMN_KEY]["protocol"]
    assert p["name"] == "min-norm" and "robustbench" not in p["name"]
    assert assess("min_norm", {"attack": "deepfool"}, {"data": {}, "model": {}})["comparable"] is False
    assert doc["suites"][PGD_KEY]["protocol"]["name"] == "none"


def test_bad_options_are_one_line_errors():
    with pytest.raises(RobustvitError, match="attack=fab only"):
        create_suite("min_norm:eps=1/255")
    with pytest.raises(RobustvitError, match="attack"):
        create_suite("min_norm:attack=pgd")
    with pytest.raises(RobustvitError, match="linf or l2 or l1, not .l0."):
        create_suite("min_norm:attack=fab:norm=l0")
    assert create_suite("min_norm:norm=L1").opts.norm == "L1"     # the spellings canonical_norm knows


def test_report_draws_the_curve_and_the_fixed_eps_points(run):
    from robustvit.report.sections.min_norm import fixed_eps_points, min_norm_section

    doc, *_ = run
    doc = json.loads(json.dumps(doc))
    doc["suites"]["pgd:norm=l2"] = {"attack": "pgd", "eps": 0.5, "norm": "l2", "accuracy": 0.4}   # other norm
    assert fixed_eps_points(doc, "linf") == [(PGD_KEY, 1 / 255, doc["suites"][PGD_KEY]["accuracy"])]
    assert [k for k, *_ in fixed_eps_points(doc, "l2")] == ["pgd:norm=l2"]
    section = min_norm_section(FMN_KEY, [doc])
    assert section is not None and len(section.figures) == 1
    ax = section.figures[0].fig.axes[0]
    line = next(ln for ln in ax.get_lines() if ln.get_label().endswith("· fmn"))
    assert list(line.get_ydata()[:-1]) == [a for _, a in doc["suites"][FMN_KEY]["curve"]]
    point = next(ln for ln in ax.get_lines() if ln.get_label().endswith("· pgd"))
    assert list(point.get_xdata()) == [pytest.approx(1.0)]        # ε = 1/255 on the grey-level axis
    assert "0.75" in section.markdown and "min-norm" in section.markdown


@pytest.mark.gpu
def test_the_suite_on_cuda_gives_the_cpu_curve(run, sharp_vit_checkpoint):
    """``--device cuda``: the same images, the same misclassified ones at distance 0, distances within 5 %."""
    doc, _, _, _, out = run
    cfg = EvalConfig(models=[sharp_vit_checkpoint], data=f"npz:{out / 'data.npz'}", suites=[FMN_KEY],
                     out=str(out / "cuda"), batch_size=16, device="cuda", progress=False)
    gpu = next(iter(run_eval(cfg).values()))["suites"][FMN_KEY]
    cpu = doc["suites"][FMN_KEY]
    assert gpu["clean_accuracy"] == cpu["clean_accuracy"] and gpu["curve"][0] == cpu["curve"][0]
    pairs = [(g["distance"], c["distance"]) for g, c in zip(gpu["per_image"], cpu["per_image"])]
    assert all((g == 0) == (c == 0) for g, c in pairs)
    close = [abs(g / c - 1) < 0.05 for g, c in pairs if g and c]
    assert len(close) >= 12 and sum(close) >= 0.8 * len(close)
