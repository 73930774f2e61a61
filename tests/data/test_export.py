"""``robustvit corrupt`` (data/export.py) and the ImageNet-C / CIFAR-C readers (data/corrupted.py):
round trips through both layouts, resumption, reproducibility, and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.cli import main
from robustvit.corruptions import corrupt, to_uint8
from robustvit.data.export import ExportConfig, export_corrupted
from robustvit.data import create_dataset
from robustvit.data.corrupted import detect_layout, open_corrupted
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.models import create_model, save_checkpoint
from robustvit.utils import derive_seed

DATA = "synthshapes:test,count=20,size=16"
NAMES = "fog+gaussian_noise"


def _export(out, layout, **kw):
    cfg = dict(data=DATA, out=str(out), layout=layout, corruptions=NAMES, batch_size=8, device="cpu", progress=False)
    cfg.update(kw)
    return export_corrupted(ExportConfig(**cfg))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("exp")
    _export(root / "cc", "cifar-c")
    _export(root / "ic", "imagenet-c", image_format="png")
    return root


def test_cifar_c_layout_and_reproducibility(exported):
    ds = create_dataset(DATA)
    x, y = ds.get_batch(torch.arange(20))
    a = np.load(exported / "cc" / "fog.npy")
    assert a.dtype == np.uint8 and a.shape == (100, 16, 16, 3)
    assert np.array_equal(np.load(exported / "cc" / "labels.npy"), np.tile(y.numpy(), 5))
    assert not (exported / "cc" / ".partial").exists()
    # severity 3, chunk 1 (images 8-15): the engine with the unit's seed, truncated to uint8
    g = torch.Generator().manual_seed(derive_seed(0, "gaussian_noise", 3, 1))
    ref = to_uint8(corrupt(x[8:16], "gaussian_noise", 3, generator=g)).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(np.load(exported / "cc" / "gaussian_noise.npy")[48:56], ref)
    src = open_corrupted(exported / "cc")
    assert detect_layout(exported / "cc") == "cifar-c" and src.corruptions == ["gaussian_noise", "fog"]
    assert src.num_images == 20 and not src.imagenet_like
    xs, ys = src.unit("fog", 2).get_batch(torch.arange(20))
    assert torch.equal(ys, y) and torch.allclose(xs, torch.from_numpy(a[20:40]).permute(0, 3, 1, 2).float() / 255)
    meta = json.loads((exported / "cc" / "corrupt.json").read_text())
    assert meta["seed"] == 0 and meta["preset"] == "cifar" and meta["num_images"] == 20
    assert meta["frost_source"] is None                    # no frost in this export; else its source


def test_imagenet_c_png_equals_cifar_c_rows(exported):
    root = exported / "ic"
    classes = (root / "classes.txt").read_text().split()
    ds = create_dataset(DATA)
    assert classes == ds.classes
    a = np.load(exported / "cc" / "fog.npy")
    for i in (0, 7, 19):                                   # file <index>.png in its class folder
        f = root / "fog" / "4" / classes[int(ds.labels[i])] / f"{i:08d}.png"
        assert np.array_equal(np.array(Image.open(f)), a[60 + i])
    src = open_corrupted(root)
    assert src.layout == "imagenet-c" and src.classes == classes and src.num_images == 20
    u = src.unit("fog", 4)
    assert sorted(lab for _, lab in u.samples) == sorted(ds.labels.tolist())
    assert all((root / n / str(s) / ".done").is_file() for n in ("fog", "gaussian_noise") for s in range(1, 6))


def test_resume_skips_finished_units(tmp_path):
    out = tmp_path / "ic"
    r = _export(out, "imagenet-c", corruptions="brightness", severities="1,2")
    assert r["units_written"] == 2 and r["units_skipped"] == 0 and r["preset"] == "cifar"
    assert len(list((out / "brightness" / "1").rglob("*.JPEG"))) == 20
    assert _export(out, "imagenet-c", corruptions="brightness", severities="1,2")["units_written"] == 0
    (out / "brightness" / "2" / ".done").unlink()          # an interrupted unit is redone
    r = _export(out, "imagenet-c", corruptions="brightness", severities="1-2")
    assert (r["units_written"], r["units_skipped"]) == (1, 1)
    # the files are the exact uint8 values saved by PIL as JPEG quality 85 (like the released ImageNet-C)
    import io

    x = create_dataset(DATA).get_batch(torch.arange(1))[0]
    ref = to_uint8(corrupt(x, "brightness", 1)).permute(0, 2, 3, 1).numpy()[0]
    buf = io.BytesIO()
    Image.fromarray(ref).save(buf, format="JPEG", quality=85)
    f = next(p for p in (out / "brightness" / "1").rglob("00000000.JPEG"))
    assert np.array_equal(np.array(Image.open(f)), np.array(Image.open(buf)))
    with pytest.raises(RobustvitError, match="other settings"):
        _export(out, "imagenet-c", corruptions="brightness", seed=1)
    cc = tmp_path / "cc"                                  # cifar-c: a finished partial is kept, then assembled
    _export(cc, "cifar-c", corruptions="contrast")
    a = np.load(cc / "contrast.npy")
    (cc / "contrast.npy").unlink()
    (cc / ".partial").mkdir()
    for s in range(1, 6):
        np.save(cc / ".partial" / f"contrast_{s}.npy", a[20 * (s - 1):20 * s])
    r = _export(cc, "cifar-c", corruptions="contrast")
    assert r["units_written"] == 0 and np.array_equal(np.load(cc / "contrast.npy"), a)


def test_export_errors(tmp_path):
    with pytest.raises(RobustvitError, match="all 5 severities"):
        _export(tmp_path / "a", "cifar-c", severities="3")
    with pytest.raises(RobustvitError, match="format"):
        _export(tmp_path / "b", "imagenet-p")
    with pytest.raises(RobustvitError, match="did you mean"):
        _export(tmp_path / "c", "cifar-c", corruptions="fgo")
    with pytest.raises(RobustvitError, match="severities"):
        _export(tmp_path / "d", "imagenet-c", severities="0-9")


def test_reader_errors(tmp_path, exported):
    with pytest.raises(RobustvitError, match="does not exist"):
        open_corrupted(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RobustvitError, match="neither"):
        open_corrupted(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "fog.npy", np.zeros((7, 4, 4, 3), np.uint8))
    np.save(bad / "labels.npy", np.zeros(7, np.uint8))
    with pytest.raises(RobustvitError, match="multiple of 5"):
        open_corrupted(bad).unit("fog", 1)
    np.save(bad / "fog.npy", np.zeros((10, 4, 4, 3), np.uint8))
    with pytest.raises(RobustvitError, match="labels"):
        open_corrupted(bad).unit("fog", 1)
    (bad / "labels.npy").unlink()
    with pytest.raises(RobustvitError, match="labels.npy is missing"):
        open_corrupted(bad).unit("fog", 1)
    src = open_corrupted(exported / "cc")
    with pytest.raises(RobustvitError, match="no data for corruption 'snow'"):
        src.unit("snow", 1)
    # an ImageNet-C unit with fewer images than the others
    import shutil

    ic = tmp_path / "ic"
    shutil.copytree(exported / "ic", ic)
    victim = next((ic / "fog" / "2").rglob("*.png"))
    victim.unlink()
    with pytest.raises(RobustvitError, match="fog severity 2 has 19 images"):
        open_corrupted(ic).num_images
    with pytest.raises(RobustvitError, match="corruption=NAME"):
        create_dataset(f"cifar_c:{exported / 'cc'}")
    ds = create_dataset(f"cifar_c:{exported / 'cc'},corruption=fog,severity=5")
    assert len(ds) == 20 and ds.num_classes == 10


def test_suite_reads_both_layouts(tmp_path, exported):
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10).eval()
    with torch.no_grad():
        m.model.head.weight.normal_(0, 1.0)
    ck = str(save_checkpoint(m, tmp_path / "ck"))
    out = {}
    for lay in ("cc", "ic"):
        spec = f"corruptions:source={exported / lay}"
        res = run_eval(EvalConfig(models=[ck], data=DATA, suites=[spec], out=str(tmp_path / lay), batch_size=8,
                                  device="cpu", progress=False))
        out[lay] = next(iter(res.values()))["suites"][spec]
    cc, ic = out["cc"], out["ic"]
    assert cc["source_layout"] == "cifar-c" and ic["source_layout"] == "imagenet-c"
    assert cc["corruptions"] == ["gaussian_noise", "fog"] and cc["num_images"] == 20
    assert cc["mce"] is None and "ImageNet-C" in cc["mce_reason"]
    # same pixels (PNG is lossless), other order: the same accuracy per unit over the whole set
    assert cc["accuracy"] == ic["accuracy"]
    a = np.load(exported / "cc" / "fog.npy")[40:60]
    y = np.load(exported / "cc" / "labels.npy")[40:60]
    with torch.no_grad():
        pred = create_model(ck)(torch.from_numpy(a).permute(0, 3, 1, 2).float() / 255).argmax(1)
    assert cc["accuracy"]["fog"]["3"] == pytest.approx((pred == torch.from_numpy(y).long()).float().mean().item())
    assert cc["clean_accuracy"] == pytest.approx(ic["clean_accuracy"])


def test_cli_corrupt(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["corrupt", "--data", DATA, "--out", str(out), "--format", "cifar-c", "--corruptions", "brightness,contrast",
               "--device", "cpu", "--batch-size", "16", "--no-progress", "--limit", "10"])
    assert rc == 0 and "wrote 10" in capsys.readouterr().out
    assert np.load(out / "brightness.npy").shape == (50, 16, 16, 3) and np.load(out / "labels.npy").shape == (50,)
    assert main(["corrupt", "--data", DATA, "--out", str(out), "--format", "cifar-c", "--severities", "2"]) == 2
    assert "all 5 severities" in capsys.readouterr().err


def test_frost_source_is_recorded_and_fixed_for_resumption(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBUSTVIT_FROST_DIR", "procedural")
    _export(tmp_path / "f", "cifar-c", corruptions="frost", limit=4)
    assert json.loads((tmp_path / "f" / "corrupt.json").read_text())["frost_source"] == "procedural"
    rng = np.random.default_rng(0)
    for f in ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / f)
    monkeypatch.setenv("ROBUSTVIT_FROST_DIR", str(tmp_path))       # resuming with the photos would mix sources
    with pytest.raises(RobustvitError, match="frost_source"):
        _export(tmp_path / "f", "cifar-c", corruptions="frost", limit=4)


def test_limit_exports_a_stratified_sample_that_eval_reads_back(tmp_path):
    """``corrupt --limit`` writes a seeded class-stratified sample in data-set order, records it and lists its
    indices; ``eval --subset OUT/subset.txt --suite corruptions:source=OUT`` scores the same clean images."""
    from robustvit.data.subset import select_subset

    out = tmp_path / "cc"
    r = _export(out, "cifar-c", corruptions="brightness", limit=8, seed=1)
    ds = create_dataset(DATA)
    ids = select_subset(ds.labels, 8, "stratified", seed=1)
    assert r["num_images"] == 8
    assert [int(v) for v in (out / "subset.txt").read_text().split()] == ids.tolist()
    meta = json.loads((out / "corrupt.json").read_text())
    assert meta["subset"] == {"method": "stratified", "seed": 1, "num_images": 8,
                              "num_classes": int(ds.labels[ids].unique().numel()), "of": 20}
    assert meta["comparable"] is False and "8 of 20 images" in meta["notes"][0]
    assert np.load(out / "labels.npy")[:8].tolist() == ds.labels[ids].tolist()
    x = ds.get_batch(ids)[0]
    g = torch.Generator().manual_seed(derive_seed(1, "brightness", 3, 0))
    expect = to_uint8(corrupt(x, "brightness", 3, generator=g), "floor").permute(0, 2, 3, 1).numpy()
    assert np.array_equal(np.load(out / "brightness.npy")[16:24], expect)           # severity 3, data-set order
    with pytest.raises(RobustvitError, match="other settings"):                     # another sample: refused
        _export(out, "cifar-c", corruptions="brightness", limit=8, seed=2)
    first = _export(tmp_path / "first", "cifar-c", corruptions="brightness", limit=8, subset_method="first")
    assert first["num_images"] == 8 and np.load(tmp_path / "first" / "labels.npy")[:8].tolist() == ds.labels[:8].tolist()

    torch.manual_seed(0)
    ck = str(save_checkpoint(create_model("resnet_cifar18", width_mult=0.0625, num_classes=10).eval(), tmp_path / "ck"))
    res = run_eval(EvalConfig(models=[ck], data=DATA, out=str(tmp_path / "e"), suites=[f"corruptions:source={out}"],
                              subset=str(out / "subset.txt"), batch_size=4, device="cpu", progress=False))
    cc = next(iter(res.values()))["suites"][f"corruptions:source={out}"]
    m = create_model(ck).eval()
    with torch.no_grad():
        clean = (m(x).argmax(1) == ds.labels[ids]).float().mean().item()
    assert cc["clean_accuracy"] == pytest.approx(clean) and cc["num_images"] == 8


def test_cli_corrupt_subset_flags(tmp_path, capsys):
    base = ["corrupt", "--data", DATA, "--format", "cifar-c", "--corruptions", "brightness", "--device", "cpu",
            "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "a"), "--limit", "4", "--subset-seed", "3"]) == 0
    meta = json.loads((tmp_path / "a" / "corrupt.json").read_text())
    assert meta["subset"]["seed"] == 3 and meta["subset"]["method"] == "stratified" and meta["num_images"] == 4
    f = tmp_path / "ids.txt"
    f.write_text("7\n2\n")
    assert main(base + ["--out", str(tmp_path / "b"), "--subset", str(f)]) == 0
    meta = json.loads((tmp_path / "b" / "corrupt.json").read_text())
    assert meta["subset"]["method"] == "file" and meta["comparable"] is True
    assert (tmp_path / "b" / "subset.txt").read_text().split() == ["2", "7"]
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "c"), "--subset", str(f), "--limit", "1"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "d"), "--limit", "3", "--subset-method", "first"]) == 0
    assert json.loads((tmp_path / "d" / "corrupt.json").read_text())["subset"]["method"] == "first"


def test_resumed_or_extended_export_keeps_the_first_runs_corruption_order(tmp_path):
    out = tmp_path / "o"
    _export(out, "imagenet-c", corruptions="gaussian_noise+contrast", severities="1")
    first = json.loads((out / "corrupt.json").read_text())["corruptions"]
    assert first == ["gaussian_noise", "contrast"]                 # the command's order, not sorted
    _export(out, "imagenet-c", corruptions="gaussian_noise+contrast", severities="1")   # a resume: the same list
    assert json.loads((out / "corrupt.json").read_text())["corruptions"] == first
    _export(out, "imagenet-c", corruptions="fog+contrast", severities="1")               # extended: new names appended
    assert json.loads((out / "corrupt.json").read_text())["corruptions"] == [*first, "fog"]
