"""The ``corruptions`` suite: options, on-the-fly results against a by-hand computation, mCE on an
ImageNet-C-like tree, and the report section."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.corruptions import BENCHMARK_CORRUPTIONS, corrupt, list_corruptions
from robustvit.data import create_dataset
from robustvit.protocols import attach
from robustvit.data.shift import imagenet_wnids
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import create_suite
from robustvit.corruptions.params import parse_corruptions, parse_severities
from robustvit.metrics.corruption import ALEXNET_CLEAN_ERROR, ALEXNET_ERRORS
from robustvit.models import create_model, save_checkpoint
from robustvit.utils import derive_seed

DATA = "synthshapes:test,count=24,size=16"
REQUIRED = {"accuracy", "clean_accuracy", "mean_accuracy", "mean_accuracy_all", "groups", "retention", "mce",
            "relative_mce", "mce_reason", "mean_accuracy_without_noise", "preset", "severities", "corruptions",
            "num_images"}


def _vit(num_classes: int) -> torch.nn.Module:
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=num_classes).eval()
    with torch.no_grad():
        m.model.head.weight.normal_(0, 1.0)       # varied predictions from an untrained model
    return m


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(save_checkpoint(_vit(10), tmp_path_factory.mktemp("ck") / "ck"))


def _eval(ckpt, out, spec, data=DATA, bs=8):
    res = run_eval(EvalConfig(models=[ckpt], data=data, suites=[spec], out=str(out), batch_size=bs, device="cpu",
                              progress=False))
    return next(iter(res.values()))["suites"][spec]


def test_options_and_errors():
    assert parse_corruptions("noise") == ["gaussian_noise", "shot_noise", "impulse_noise"]
    assert parse_corruptions("fog+snow+fog") == ["fog", "snow"]
    assert parse_corruptions("benchmark") == list(BENCHMARK_CORRUPTIONS)
    assert create_suite("corruptions").names == list_corruptions() and len(list_corruptions()) == 19
    assert parse_severities("1-5") == [1, 2, 3, 4, 5] and parse_severities("5+1") == [1, 5] and parse_severities(3) == [3]
    for bad in ("0-2", "x", "6"):
        with pytest.raises(RobustvitError, match="severities"):
            parse_severities(bad)
    with pytest.raises(RobustvitError, match="did you mean"):
        create_suite("corruptions:corruptions=fgo")
    with pytest.raises(RobustvitError, match="jpeg_quality"):
        create_suite("corruptions:jpeg_quality=0")
    with pytest.raises(RobustvitError, match="preset"):
        create_suite("corruptions:preset=huge")
    with pytest.raises(RobustvitError, match="does not exist"):
        create_suite("corruptions:source=/nonexistent/imagenet-c")
    with pytest.raises(RobustvitError, match="no option"):
        create_suite("corruptions:severity=3")
    s = create_suite("corruptions:corruptions=fog+snow:severities=2-3")
    ctx = SimpleNamespace(dataset=None)
    assert s.parts(ctx) == ["clean", "fog/2", "fog/3", "snow/2", "snow/3"]


def test_on_the_fly_matches_manual(tmp_path, ckpt):
    spec = "corruptions:corruptions=gaussian_noise+brightness+fog:severities=1+5"
    r = _eval(ckpt, tmp_path / "a", spec)
    assert REQUIRED <= set(r)
    assert r["severities"] == [1, 5] and r["preset"] == "cifar" and r["num_images"] == 24
    assert r["corruptions"] == ["gaussian_noise", "brightness", "fog"]
    assert set(r["accuracy"]["fog"]) == {"1", "5"}
    # by hand: the runner's chunks of 8, each unit's generator seeded from (seed, key, part, chunk)
    m = create_model(ckpt).eval()
    x, y = create_dataset(DATA).get_batch(torch.arange(24))
    with torch.no_grad():
        assert r["clean_accuracy"] == pytest.approx((m(x).argmax(1) == y).float().mean().item())
        for name in ("gaussian_noise", "brightness", "fog"):
            for s in (1, 5):
                correct = 0
                for c in range(3):
                    g = torch.Generator().manual_seed(derive_seed(0, spec, f"{name}/{s}", c))
                    xc = corrupt(x[8 * c:8 * c + 8], name, s, generator=g)
                    correct += int((m(xc).argmax(1) == y[8 * c:8 * c + 8]).sum())
                assert r["accuracy"][name][str(s)] == pytest.approx(correct / 24), (name, s)
    mean = {n: (r["accuracy"][n]["1"] + r["accuracy"][n]["5"]) / 2 for n in r["corruptions"]}
    assert r["corruption_accuracy"] == pytest.approx(mean)
    assert r["mean_accuracy"] == pytest.approx(sum(mean.values()) / 3)
    assert r["mean_accuracy_all"] == pytest.approx(sum(mean.values()) / 3)
    assert r["mean_accuracy_without_noise"] == pytest.approx((mean["brightness"] + mean["fog"]) / 2)
    assert r["groups"] == pytest.approx({"noise": mean["gaussian_noise"], "weather": (mean["fog"] + mean["brightness"]) / 2})
    assert r["retention"] == pytest.approx(r["mean_accuracy"] / r["clean_accuracy"])
    assert r["severity_accuracy"]["5"] == pytest.approx(sum(r["accuracy"][n]["5"] for n in mean) / 3)
    assert r["mce"] is None and r["relative_mce"] is None and "ImageNet" in r["mce_reason"]
    # extra corruptions are not in the benchmark mean
    r3 = _eval(ckpt, tmp_path / "c", "corruptions:corruptions=saturate+fog:severities=2")
    assert r3["mean_over"] == ["fog"] and r3["mean_accuracy"] == pytest.approx(r3["accuracy"]["fog"]["2"])
    assert r3["mean_accuracy_all"] == pytest.approx((r3["accuracy"]["fog"]["2"] + r3["accuracy"]["saturate"]["2"]) / 2)
    assert set(r3["groups"]) == {"weather", "extra"}


def test_mce_reason_rules():
    suite = create_suite("corruptions")
    spec = SimpleNamespace(image_size=224)
    ctx = lambda data, nc, size=224: SimpleNamespace(  # noqa: E731
        data_spec=data, dataset=SimpleNamespace(num_classes=nc), model=SimpleNamespace(spec=SimpleNamespace(image_size=size)))
    assert spec.image_size == 224
    assert suite._mce_reason(ctx("imagenet:/val", 1000)) is None
    assert "not ImageNet" in suite._mce_reason(ctx("cifar10:test", 10))
    assert "not ImageNet" in suite._mce_reason(ctx("folder:/x", 1000))
    assert "cifar preset" in suite._mce_reason(ctx("imagenet:/val", 1000, 32))
    assert "15 benchmark" in create_suite("corruptions:corruptions=noise")._mce_reason(ctx("imagenet:/val", 1000))
    assert "severities 1-5" in create_suite("corruptions:severities=1-3")._mce_reason(ctx("imagenet:/val", 1000))


def _png(path, rng):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)


def test_mce_on_imagenet_c_tree(tmp_path):
    """A tiny ImageNet-C-like tree (wnid folders, 15 corruptions × 5 severities × 4 images) and a matching
    clean ``imagenet:`` folder (1000 wnid folders, 4 images): mCE and relative mCE from the AlexNet table."""
    rng = np.random.default_rng(0)
    wnids = imagenet_wnids()[:2]
    root, val = tmp_path / "inc", tmp_path / "val"
    for w in imagenet_wnids():
        (val / w).mkdir(parents=True)
    for w in wnids:
        for i in range(2):
            _png(val / w / f"img{i}.png", rng)
            for n in BENCHMARK_CORRUPTIONS:
                for s in range(1, 6):
                    _png(root / n / str(s) / w / f"img{i}.png", rng)
    ck = str(save_checkpoint(_vit(1000), tmp_path / "ck"))
    r = _eval(ck, tmp_path / "e", f"corruptions:source={root}", data=f"imagenet:{val}", bs=4)
    assert r["mce_reason"] is None and r["source_layout"] == "imagenet-c" and r["num_images"] == 4
    assert r["corruptions"] == list(BENCHMARK_CORRUPTIONS)
    err = {n: [1 - r["accuracy"][n][str(s)] for s in range(1, 6)] for n in BENCHMARK_CORRUPTIONS}
    ce = {n: 100 * sum(err[n]) / sum(ALEXNET_ERRORS[n]) for n in err}
    assert r["ce"] == pytest.approx(ce)
    assert r["mce"] == pytest.approx(sum(ce.values()) / 15)
    clean_err = 1 - r["clean_accuracy"]
    rce = {n: 100 * sum(e - clean_err for e in err[n]) / sum(a - ALEXNET_CLEAN_ERROR for a in ALEXNET_ERRORS[n])
           for n in err}
    assert r["relative_mce"] == pytest.approx(sum(rce.values()) / 15)
    # one unit by hand: the files of fog/3 in class order, through the model
    m = create_model(ck).eval()
    files = sorted((root / "fog" / "3" / wnids[0]).iterdir()) + sorted((root / "fog" / "3" / wnids[1]).iterdir())
    x = torch.stack([torch.from_numpy(np.array(Image.open(f))).permute(2, 0, 1).float() / 255 for f in files])
    y = torch.tensor([0, 0, 1, 1])                       # the first two of the 1000 sorted wnids
    with torch.no_grad():
        assert r["accuracy"]["fog"]["3"] == pytest.approx((m(x).argmax(1) == y).float().mean().item())


def test_report_section():
    from robustvit.report.sections.corruptions import corruptions_section

    res = {"accuracy": {"fog": {"1": 0.5, "2": 0.25}}, "clean_accuracy": 0.75, "corruption_accuracy": {"fog": 0.375},
           "severity_accuracy": {"1": 0.5, "2": 0.25}, "mean_accuracy": 0.375, "mean_accuracy_all": 0.375,
           "mean_accuracy_without_noise": 0.375, "groups": {"weather": 0.375}, "retention": 0.5, "mce": 61.25,
           "relative_mce": 80.5, "mce_reason": None, "preset": "imagenet", "severities": [1, 2], "num_images": 8}
    results = [{"model": {"name": "vit"}, "suites": {"corruptions": res}},
               {"model": {"name": "cnn"}, "suites": {"corruptions": dict(res, mce=None, relative_mce=None)}}]
    sec = corruptions_section("corruptions", results)
    assert "| fog | 0.3750 | 0.3750 |" in sec.markdown
    assert "| **mCE (%)** | 61.2 | – |" in sec.markdown or "| **mCE (%)** | 61.3 | – |" in sec.markdown
    assert "| **retention** | 0.5000 | 0.5000 |" in sec.markdown
    assert len(sec.figures) == 1 and sec.figures[0].name == "corruptions"
    line = sec.figures[0].fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [0, 1, 2] and list(line.get_ydata()) == [0.75, 0.5, 0.25]
    assert corruptions_section("corruptions", [{"model": {"name": "x"}, "suites": {}}]) is None



def test_mce_protocol_in_memory(monkeypatch, tmp_path):
    """In-memory ImageNet corruption: JPEG 85 by default (the released files' pipeline); anything that
    differs from the released files (size, no JPEG, procedural frost) is listed and labels mCE approximate."""
    from robustvit.corruptions.frost import FROST_ENV

    ctx = lambda data, nc, size=224: SimpleNamespace(  # noqa: E731
        data_spec=data, dataset=SimpleNamespace(num_classes=nc), model=SimpleNamespace(spec=SimpleNamespace(image_size=size)))
    auto = create_suite("corruptions")
    assert auto._jpeg_quality(ctx("imagenet:/val", 1000)) == 85
    assert auto._jpeg_quality(ctx("cifar10:test", 10)) is None
    assert create_suite("corruptions:jpeg_quality=none")._jpeg_quality(ctx("imagenet:/val", 1000)) is None
    monkeypatch.setenv(FROST_ENV, "procedural")
    approx = auto._approximations(ctx("imagenet:/val", 1000, 384))
    assert len(approx) == 2 and "384 px" in approx[0] and "frost" in approx[1]
    no_jpeg = create_suite("corruptions:jpeg_quality=none")._approximations(ctx("imagenet:/val", 1000))
    assert any("JPEG" in a for a in no_jpeg)
    rng = np.random.default_rng(0)
    for f in ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"):
        Image.fromarray(rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)).save(tmp_path / f)
    monkeypatch.setenv(FROST_ENV, str(tmp_path))
    assert auto._approximations(ctx("imagenet:/val", 1000)) == []          # the released files' pipeline


def test_report_marks_approximate_mce():
    from robustvit.report.sections.corruptions import corruptions_section

    res = {"corruption_accuracy": {"fog": 0.5}, "clean_accuracy": 0.75, "severity_accuracy": {"1": 0.5},
           "mce": 61.25, "relative_mce": 80.5, "mce_protocol": "approximate", "frost_source": "procedural",
           "mce_approximations": ["no JPEG quality-85 round trip"], "severities": [1], "num_images": 8}
    md = corruptions_section("corruptions", [attach({"model": {"name": "vit"}, "suites": {"corruptions": res}})]).markdown
    assert "61.2 (not comparable)" in md and "mCE approximate: no JPEG quality-85 round trip" in md
    assert "frost layer: procedural" in md
