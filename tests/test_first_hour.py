"""The first hour of a new user (issue #33) end to end on synthshapes: train two tiny models on a sample of the
data, evaluate both in two steps with different suites into one parent folder, and report that folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from robustvit.cli import main

DATA = "synthshapes:{split},size=16,count={count},classes=4"
TINY_VIT = '{"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}'


def _train(out: Path, model: str, kwargs: str) -> None:
    assert main(["train", "--model", model, "--model-kwargs", kwargs, "--data", DATA.format(split="train", count=64),
                 "--limit", "24", "--epochs", "1", "--batch-size", "12", "--val-data",
                 DATA.format(split="test", count=32), "--val-limit", "8", "--out", str(out), "--device", "cpu",
                 "--threads", "1"]) == 0


def _eval(runs: Path, out: Path, suite: str) -> None:
    models = ",".join(str(runs / r / "checkpoint") for r in ("vit-a", "vit-b"))
    assert main(["eval", "--model", models, "--data", DATA.format(split="test", count=32), "--suite", suite,
                 "--limit", "8", "--out", str(out), "--device", "cpu", "--threads", "1", "--workers", "0",
                 "--no-progress"]) == 0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_hour(tmp_path, capsys):
    runs, evals = tmp_path / "runs", tmp_path / "evals"
    _train(runs / "vit-a", "vit_cifar_micro", TINY_VIT)
    _train(runs / "vit-b", "vit_cifar_micro", TINY_VIT.replace('"depth": 2', '"depth": 1'))
    trained = json.loads((runs / "vit-a" / "results.json").read_text())
    assert trained["data"]["num_images"] == 24          # --limit: a class-stratified sample of 24 of the 64
    assert trained["data"]["subset"] == {"method": "stratified", "seed": 0, "num_images": 24, "num_classes": 4,
                                         "of": 64}
    assert trained["run"]["threads"] == 1
    assert trained["model"]["pretrained"] is False
    assert trained["model"]["name"] == "vit-a" and trained["model"]["source"] == "vit_cifar_micro"
    for f in (runs / "vit-a" / "results.json", runs / "vit-a" / "checkpoint" / "model.safetensors"):
        assert _mode(f) & 0o044 == 0o044, f"{f.name} is {oct(_mode(f))}: others cannot read it"

    _eval(runs, evals, "clean")
    _eval(runs, evals, "fgsm")
    for name in ("vit-a", "vit-b"):                     # folders named by the training run, not the architecture
        doc = json.loads((evals / name / "results.json").read_text())
        assert doc["model"]["name"] == name
        assert set(doc["suites"]) == {"clean", "fgsm"}  # the second step added to the first
        assert doc["suites"]["clean"]["num_images"] == 8
        assert doc["run"]["threads"] == 1
        assert _mode(evals / name / "results.json") & 0o044 == 0o044
    out = capsys.readouterr().out
    assert "vit-a:" in out and "vit-b:" in out

    assert main(["report", str(evals), "--out", str(tmp_path / "report")]) == 0    # the parent folder
    text = (tmp_path / "report" / "report.md").read_text()
    assert "vit-a" in text and "vit-b" in text


def test_plain_module_reads_the_data_at_its_own_size():
    """#33: a plain nn.Module (no timm pretrained_cfg) gets the data's image size and no crop for small images
    (not ImageNet's 224 px / crop 0.875: a 32-px image resized to 36 and cropped, CIFAR upsampled to 224)."""
    import torch
    from torch import nn

    from robustvit.facade import wrap_module

    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    norm = {"mean": (0.5,) * 3, "std": (0.5,) * 3}
    m = wrap_module(net, data="synthshapes:test,count=4,size=24", **norm)
    assert m.spec.input_size == (3, 24, 24) and m.spec.crop_pct == 1.0
    m = wrap_module(net, input_size=32, **norm)
    assert m.spec.crop_pct == 1.0                          # small: read as it is
    m = wrap_module(net, **norm)                            # files of any size: the ImageNet default stays
    assert m.spec.input_size == (3, 224, 224) and m.spec.crop_pct == 0.875
    x = torch.rand(2, 3, 24, 24)
    with torch.no_grad():
        assert torch.equal(wrap_module(net, data="synthshapes:test,count=4,size=24", **norm)(x), net((x - 0.5) / 0.5))


def test_folder_count_is_a_stratified_sample(tmp_path):
    from PIL import Image

    from robustvit.data import create_dataset

    for c in "abcd":
        (tmp_path / c).mkdir()
        for i in range(5):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / c / f"{i}.png")
    ds = create_dataset(f"folder:{tmp_path},count=8")
    labels = [y for _, y in ds.samples]
    assert len(ds) == 8 and sorted(labels) == [0, 0, 1, 1, 2, 2, 3, 3]     # 2 of each class, not the first 8
    assert ds.samples == create_dataset(f"folder:{tmp_path},count=8").samples
    assert ds.samples != create_dataset(f"folder:{tmp_path},count=8,seed=1").samples
    assert set(ds.samples) <= set(create_dataset(f"folder:{tmp_path}").samples)


def test_plain_progress_lines_without_a_terminal(monkeypatch, capsys):
    import robustvit.progress as progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)
    with progress.progress_bar(True, "vit · clean", 3) as tick:
        for i in range(3):
            tick(f"loss {i}")
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[:3] == [f"robustvit: vit · clean: {i + 1}/3, loss {i}, 0 s" for i in range(3)]
    with progress.progress_bar(False, "off", 3) as tick:
        tick()
    assert capsys.readouterr().err == ""


def test_written_files_are_readable_by_others(tmp_path):
    import os

    from robustvit.runs import write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "results.json", {"schema": 2})
    finally:
        os.umask(old)
    assert _mode(tmp_path / "results.json") == 0o644


def test_shipped_cifar_to_imagenet_class_map():
    from timm.data import ImageNetInfo

    from robustvit.data.classmap import load_class_map

    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    groups = load_class_map("cifar_to_imagenet.json", classes)        # the README's command: found by name
    flat = [i for g in groups for i in g]
    assert len(flat) == len(set(flat)) and all(0 <= i < 1000 for i in flat)     # no ImageNet class twice
    info = ImageNetInfo()
    words = {"cat": "cat", "dog": None, "frog": "frog", "truck": ("truck", "van")}
    for name, word in words.items():
        if word is not None:
            for i in groups[classes.index(name)]:
                text = info.index_to_description(i)
                assert any(w in text for w in ((word,) if isinstance(word, str) else word)), (name, text)
    assert len(groups[classes.index("dog")]) == 118        # ImageNet's 118 dog breeds, 151–268
