"""``robustvit eval --shard K/N`` + ``robustvit merge``: the merged results.json equals one unsharded run's."""

import copy
import json

import pytest

from robustvit.cli import main
from robustvit.models import create_model, save_checkpoint
from robustvit.runs import validate_results

DATA = "synthshapes:test,count=40,size=16"
SUITES = "clean,corruptions:corruptions=gaussian_noise+contrast:severities=1+3"   # gaussian noise draws per unit
TIMING = ("started", "finished", "command", "shard")


@pytest.fixture
def ckpt(tmp_path):
    import torch

    torch.manual_seed(0)
    m = create_model("resnet_cifar18", width_mult=0.0625, num_classes=10).eval()
    return str(save_checkpoint(m, tmp_path / "ck"))


def _untimed(doc):
    d = copy.deepcopy(doc)
    for k in TIMING:
        d["run"].pop(k)
    for r in d["suites"].values():
        r.pop("seconds")
    return d


def _eval(model, out, *extra):
    return main(["eval", "--model", model, "--data", DATA, "--suite", SUITES, "--out", str(out), "--batch-size", "8",
                 "--limit", "30", "--device", "cpu", "--no-progress", *extra])


def test_merged_shards_equal_one_run(tmp_path, ckpt, capsys):
    assert _eval(ckpt, tmp_path / "one") == 0
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    shards = [tmp_path / f"s{k}" for k in (1, 2, 3)]
    for k, d in zip((3, 1, 2), [shards[2], shards[0], shards[1]]):      # any order
        assert _eval(ckpt, d, "--shard", f"{k}/3") == 0
        assert not (d / "results.json").exists() and (d / "shard.json").is_file()
    done = [len(json.loads((d / "shard.json").read_text())["models"]) for d in shards]
    assert done == [1, 1, 1]
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "m"), "--no-progress"]) == 0
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    validate_results(merged)
    assert _untimed(merged) == _untimed(one)
    assert merged["run"]["shard"]["count"] == 3 and merged["run"]["shard"]["merge"].startswith("robustvit merge")
    assert "--shard" not in merged["run"]["command"] and merged["run"]["command"].startswith("robustvit eval")
    assert merged["data"]["num_images"] == 30 and one["run"]["shard"] is None
    # each shard evaluated only its own chunks: 30 images in chunks of 8 → 4 chunks, shard k holds chunk k−1 (mod 3)
    import sqlite3

    chunks = [sorted({c for (c,) in sqlite3.connect(d / "units.sqlite").execute("SELECT chunk FROM units")})
              for d in shards]
    assert chunks == [[0, 3], [1], [2]]


def test_shards_of_several_models_merge_per_model(tmp_path, ckpt, capsys):
    vit = str(save_checkpoint(create_model("vit_cifar_micro", num_classes=10).eval(), tmp_path / "vit"))
    models = f"{ckpt},{vit}"
    assert _eval(models, tmp_path / "one") == 0
    for k in (1, 2):
        assert _eval(models, tmp_path / f"s{k}", "--shard", f"{k}/2") == 0
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"),
                 "--no-progress"]) == 0
    for name in ("ck", "vit"):                     # checkpoint folders: named by their folders
        one = json.loads((tmp_path / "one" / name / "results.json").read_text())
        merged = json.loads((tmp_path / "m" / name / "results.json").read_text())
        assert _untimed(merged) == _untimed(one)


def test_shard_and_merge_errors_are_one_line(tmp_path, ckpt, capsys):
    def err(argv):
        assert main(argv) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("robustvit: warning:")]
        assert len(lines) == 1 and lines[0].startswith("robustvit: error: ")
        return lines[0]

    assert "K must be 1 … N" in err(["eval", "--model", ckpt, "--data", DATA, "--out", str(tmp_path / "x"),
                                     "--shard", "3/2", "--device", "cpu"])
    assert "--shard takes K/N" in err(["eval", "--model", ckpt, "--data", DATA, "--out", str(tmp_path / "x"),
                                       "--shard", "2", "--device", "cpu"])
    for k in (1, 2):
        assert _eval(ckpt, tmp_path / f"s{k}", "--shard", f"{k}/3") == 0
    assert "shards 3/3 are missing" in err(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out",
                                            str(tmp_path / "m")])
    assert "given twice" in err(["merge", str(tmp_path / "s1"), str(tmp_path / "s1"), str(tmp_path / "s2"),
                                 "--out", str(tmp_path / "m")])
    assert "random ones" in err(["eval", "--model", "vit_cifar_micro", "--data", DATA, "--out", str(tmp_path / "x"),
                                 "--shard", "1/2", "--device", "cpu"])
    assert "holds no shard.json" in err(["merge", str(tmp_path / "ck"), "--out", str(tmp_path / "m")])
    other = tmp_path / "s3"
    assert main(["eval", "--model", ckpt, "--data", DATA, "--suite", "clean", "--out", str(other), "--batch-size", "8",
                 "--limit", "30", "--device", "cpu", "--no-progress", "--shard", "3/3"]) == 0
    assert "other settings" in err(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), str(other), "--out",
                                    str(tmp_path / "m")])
