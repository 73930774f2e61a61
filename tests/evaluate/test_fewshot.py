import json

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import create_suite
from robustvit.evaluation.suites.fewshot import (BIAS_CONSTANT, class_balanced_draw, pre_logits, ridge_fit,
                                               train_spec_for)
from robustvit.models import create_model
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized
from robustvit.utils import derive_seed


def numpy_ridge(x, y, k, lam):
    """Independent solution: the ridge problem as an augmented ordinary least-squares problem (numpy lstsq)."""
    x = np.asarray(x, dtype=np.float64)
    mean, std = x.mean(0), x.std(0) + 1e-5
    a = np.hstack([(x - mean) / std, np.full((len(x), 1), BIAS_CONSTANT)])
    t = 2.0 * np.eye(k)[np.asarray(y)] - 1.0
    a_aug = np.vstack([a, np.sqrt(lam) * np.eye(a.shape[1])])
    t_aug = np.vstack([t, np.zeros((a.shape[1], k))])
    w = np.linalg.lstsq(a_aug, t_aug, rcond=None)[0]
    return w, mean, std


@pytest.mark.parametrize("n,d", [(40, 6), (8, 30)])      # primal (N ≥ D) and dual (N < D) forms
@pytest.mark.parametrize("lam", [0.5, 1024.0])
def test_ridge_fit_matches_an_independent_closed_form(n, d, lam):
    g = torch.Generator().manual_seed(n + d)
    x = torch.randn(n, d, generator=g) * torch.linspace(0.1, 5, d) + 3.0
    y = torch.arange(n) % 4
    fit = ridge_fit(x, y, 4, lam)
    w, mean, std = numpy_ridge(x.numpy(), y.numpy(), 4, lam)
    np.testing.assert_allclose(fit.weight.numpy(), w, rtol=1e-6, atol=1e-8)
    xt = torch.randn(25, d, generator=g) * 3
    expect = (np.hstack([(xt.numpy() - mean) / std, np.full((25, 1), BIAS_CONSTANT)]) @ w).argmax(1)
    assert fit.predict(xt).tolist() == expect.tolist()
    grid = ridge_fit(x, y, 4, (lam, 2 * lam))     # one eigendecomposition, several λ
    np.testing.assert_allclose(grid[0].weight.numpy(), w, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grid[1].weight.numpy(), numpy_ridge(x.numpy(), y.numpy(), 4, 2 * lam)[0],
                               rtol=1e-6, atol=1e-8)


def test_class_balanced_draw_is_balanced_seeded_and_errors_on_small_classes():
    labels = torch.tensor([0, 1, 2] * 7 + [1, 1])
    a = class_balanced_draw(labels, 3, 5, torch.Generator().manual_seed(3))
    b = class_balanced_draw(labels, 3, 5, torch.Generator().manual_seed(3))
    c = class_balanced_draw(labels, 3, 5, torch.Generator().manual_seed(4))
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and not all(torch.equal(u, v) for u, v in zip(a, c))
    for k, idx in enumerate(a):
        assert len(set(idx.tolist())) == 5 and bool((labels[idx] == k).all())
    with pytest.raises(RobustvitError, match="class 0 has 7 training images but 8"):
        class_balanced_draw(labels, 3, 8, torch.Generator().manual_seed(0))


def test_pre_logits_go_through_the_wrappers_normalisation():
    torch.manual_seed(0)
    model = create_model("vit_cifar_micro", num_classes=3, embed_dim=32, depth=1, num_heads=2, img_size=16)
    model.mean.fill_(0.3)
    model.std.fill_(0.2)
    x = torch.rand(4, 3, 16, 16)
    with torch.no_grad():
        f = pre_logits(model.eval(), x)
        torch.testing.assert_close(model.net.head(f), model(x))      # head(pre-logits) = the wrapper's logits
    assert f.shape == (4, 32)
    with pytest.raises(RobustvitError, match="forward_features"):
        pre_logits(Normalized(nn.Sequential(nn.Flatten(), nn.LazyLinear(3)), model.spec), x)


def test_train_split_is_derived_from_the_evaluation_data(tmp_path):
    assert train_spec_for("synthshapes:test,size=16,count=50,seed=3", None) == "synthshapes:train,size=16"
    assert train_spec_for("cifar10:test,root=/d", None) == "cifar10:train,root=/d"
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    assert train_spec_for(f"folder:{tmp_path / 'val'}", None) == f"folder:{tmp_path / 'train'}"
    assert train_spec_for("npz:/x.npz", str(tmp_path / "train")) == f"folder:{tmp_path / 'train'}"
    with pytest.raises(RobustvitError, match="train=PATH"):
        train_spec_for("npz:/x.npz", None)
    with pytest.raises(RobustvitError, match="not a folder"):
        train_spec_for("npz:/x.npz", str(tmp_path / "nope"))
    with pytest.raises(RobustvitError, match="no option"):
        create_suite("fewshot:steps=3")
    with pytest.raises(RobustvitError, match="shots must be"):
        create_suite("fewshot:shots=0+1")


class MeanColour(nn.Module):
    """timm-style net: pre-logits = the mean colour plus a little texture; a fixed random head."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward_features(self, x):
        return torch.cat([x.mean((2, 3)), x.std((2, 3)).mean(1, keepdim=True)], 1)

    def forward_head(self, f, pre_logits=False):
        return f if pre_logits else self.head(f)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


def _write_split(root, n_per_class, seed):
    g = np.random.default_rng(seed)
    base = {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}
    for c, rgb in base.items():
        (root / c).mkdir(parents=True)
        for i in range(n_per_class):
            arr = np.clip(np.array(rgb) + g.normal(0, 50, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(root / c / f"{i}.png")


def test_fewshot_suite_end_to_end_matches_an_independent_regression(tmp_path, monkeypatch):
    _write_split(tmp_path / "train", 12, 0)
    _write_split(tmp_path / "val", 6, 1)
    spec = ModelSpec("meancolour", 3, (3, 8, 8), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3), crop_pct=1.0)
    model = Normalized(MeanColour(), spec)
    monkeypatch.setattr("robustvit.evaluation.runner.create_model", lambda *a, **k: model)
    monkeypatch.setattr("robustvit.evaluation.runner.warn_if_random", lambda *a: None)
    out = tmp_path / "out"
    res = run_eval(EvalConfig(models=["meancolour"], data=f"folder:{tmp_path / 'val'}", out=str(out),
                              suites=["fewshot:shots=1+5:draws=3:l2=2", "fewshot:shots=2:draws=2:l2=auto:holdout=3"],
                              batch_size=7, progress=False, seed=11))["meancolour"]
    saved = json.loads((out / "results.json").read_text())["suites"]
    r = saved["fewshot:shots=1+5:draws=3:l2=2"]
    assert set(r["accuracy"]) == {"1", "5"} and r["num_images"] == 18 and r["feature_dim"] == 4
    assert r["train_data"].startswith(f"folder:{tmp_path / 'train'}")
    # independent: the same draws, features computed by hand, numpy's least squares
    from robustvit.data import dataset_for_model
    train = dataset_for_model(f"folder:{tmp_path / 'train'}", spec)
    test = dataset_for_model(f"folder:{tmp_path / 'val'}", spec)
    xtr, ytr = train.get_batch(torch.arange(len(train)))
    xte, yte = test.get_batch(torch.arange(len(test)))

    def feats(x):
        z = (x - torch.tensor(spec.mean).view(1, 3, 1, 1)) / torch.tensor(spec.std).view(1, 3, 1, 1)
        return torch.cat([z.mean((2, 3)), z.std((2, 3)).mean(1, keepdim=True)], 1).numpy()

    ftr, fte = feats(xtr), feats(xte)
    for shots in (1, 5):
        accs = []
        for d in range(3):
            idx = torch.stack(class_balanced_draw(ytr, 3, 5, torch.Generator().manual_seed(
                derive_seed(11, "fewshot", d) % 2**63)))[:, :shots].flatten().numpy()
            w, mean, std = numpy_ridge(ftr[idx], ytr.numpy()[idx], 3, 2.0)
            pred = (np.hstack([(fte - mean) / std, np.full((len(fte), 1), BIAS_CONSTANT)]) @ w).argmax(1)
            accs.append(float((pred == yte.numpy()).mean()))
        got = r["accuracy"][str(shots)]
        assert got["per_draw"] == pytest.approx(accs)
        assert got["mean"] == pytest.approx(np.mean(accs)) and got["std"] == pytest.approx(np.std(accs, ddof=1))
    assert r["accuracy"]["5"]["mean"] > 0.9                      # the colours separate the classes
    auto = res["suites"]["fewshot:shots=2:draws=2:l2=auto:holdout=3"]
    assert auto["l2"] == "auto" and len(auto["l2_chosen"]["2"]) == 2
    assert all(v in [2.0 ** k for k in range(0, 21, 2)] for v in auto["l2_chosen"]["2"])


def test_report_section_shows_mean_and_std_per_shot():
    import robustvit.report.sections  # noqa: F401  (registers the sections)
    from robustvit.report.builder import renderer_for

    res = {"model": {"name": "vit"}, "suites": {"fewshot": {
        "accuracy": {"1": {"mean": 0.25, "std": 0.05, "per_draw": [0.2, 0.3]},
                     "10": {"mean": 0.75, "std": 0.0, "per_draw": [0.75, 0.75]}},
        "draws": 2, "l2": 1024.0, "train_data": "synthshapes:train", "feature_dim": 8}}}
    sec = renderer_for("fewshot")("fewshot", [res])
    assert "| vit | 0.2500 ± 0.0500 | 0.7500 ± 0.0000 | 8 |" in sec.markdown
    assert "1-shot | 10-shot" in sec.markdown and "λ = 1024.0" in sec.markdown


def test_fewshot_probes_a_model_whose_head_has_other_classes(tmp_path):
    """fewshot reads features only: a model with another class count (an ImageNet model on CIFAR) is probed
    without a class map, while a suite that reads the head still refuses the mismatch in one line."""
    torch.manual_seed(0)
    model = create_model("vit_cifar_micro", num_classes=7)           # the data have 3 classes
    data = "synthshapes:test,count=24,size=16,classes=3"
    res = run_eval(EvalConfig(models=[model], data=data, out=str(tmp_path / "a"), progress=False,
                              suites=["fewshot:shots=1+2:draws=2"]))
    r = next(iter(res.values()))["suites"]
    fs = next(v for k, v in r.items() if k.startswith("fewshot"))
    assert fs["num_classes"] == 3 and fs["num_images"] == 24 and set(fs["accuracy"]) == {"1", "2"}
    with pytest.raises(RobustvitError, match="class"):
        run_eval(EvalConfig(models=[model], data=data, out=str(tmp_path / "b"), progress=False,
                            suites=["clean", "fewshot:shots=1:draws=1"]))
