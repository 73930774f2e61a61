"""``robustvit study``: a typed spec with one-line errors, two tiny models evaluated, analysed and compared
(report, leaderboard, transfer heat map, size plot), resumable; FLOPs against a hand count."""

import csv
import json

import pytest
import torch
from torch import nn

from robustvit.cli import main
from robustvit.errors import RobustvitError
from robustvit.models import create_model, save_checkpoint
from robustvit.study import count_flops, load_study, parse_study, run_study


def test_spec_errors_are_one_line(tmp_path):
    with pytest.raises(RobustvitError, match="needs option 'data'"):
        parse_study({"models": ["a"]})
    with pytest.raises(RobustvitError, match="did you mean models"):
        parse_study({"modles": ["a"], "data": "x"})
    with pytest.raises(RobustvitError, match="limit"):
        parse_study({"models": ["a"], "data": "x", "limit": 0})
    with pytest.raises(RobustvitError, match="at least one model"):
        parse_study({"models": [], "data": "x"})
    with pytest.raises(RobustvitError, match="not in 'models': b"):
        parse_study({"models": {"a": "x"}, "data": "x", "analyses": {"b": ["lesion"]}})
    s = parse_study({"models": ["runs/vit/checkpoint", "resnet50"], "data": "x", "limit": "8", "suites": ["clean", "pgd:eps=4/255"]})
    assert s.named_models() == {"vit": "runs/vit/checkpoint", "resnet50": "resnet50"} and s.limit == 8
    bad = tmp_path / "s.yaml"
    bad.write_text("models: [a\n")
    with pytest.raises(RobustvitError, match="not valid YAML"):
        load_study(bad)
    assert main(["study", str(tmp_path / "missing.yaml")]) == 2


def test_flops_of_a_linear_model_match_a_hand_count():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5))
    model.spec = type("S", (), {"input_size": (3, 4, 4)})()
    assert count_flops(model) == 2 * 48 * 5          # one multiply and one add per weight


@pytest.mark.slow
def test_study_end_to_end_and_resume(tmp_path):
    torch.manual_seed(0)
    ck = {"vit": save_checkpoint(create_model("vit_cifar_micro", num_classes=10).eval(), tmp_path / "ck_vit"),
          "cnn": save_checkpoint(create_model("resnet_cifar18", num_classes=10, width_mult=0.0625).eval(), tmp_path / "ck_cnn")}
    spec = tmp_path / "study.yaml"
    spec.write_text(
        f"models: {{vit: {ck['vit']}, cnn: {ck['cnn']}}}\n"
        "data: synthshapes:test,count=24\nlimit: 12\nbatch_size: 12\ndevice: cpu\n"
        "suites: [clean, 'pgd:eps=1/255:steps=2:checks=0', 'pgd:eps=4/255:steps=2:checks=0', 'transfer:eps=4/255:steps=2']\n"
        "analyses: {vit: [attention_distance]}\n"
        f"out: {tmp_path / 'out'}\n")
    assert main(["study", str(spec), "--no-progress"]) == 0
    out = tmp_path / "out"
    for name in ("vit", "cnn"):
        res = json.loads((out / name / "results.json").read_text())
        assert res["model"]["name"] == name and res["model"]["flops"] > 0
        assert {"clean", "pgd:eps=4/255:steps=2:checks=0"} <= set(res["suites"])
    assert (out / "vit" / "analysis" / "attention_distance.json").is_file()
    transfer = [json.loads(p.read_text()) for p in (out / "transfer").glob("*/results.json")]
    assert sorted(t["model"]["name"] for t in transfer) == ["cnn", "vit"]
    assert all(set(next(iter(t["suites"].values()))["accuracy"]) == {"vit", "cnn"} for t in transfer)
    html = (out / "report.html").read_text()
    assert html.index("<table") == html.index("<table id='scorecard'>")
    md = (out / "report.md").read_text()
    assert "robustness_vs_size.png" in md and "figures/transfer_matrix" in md and "adversarial_accuracy_vs_eps.png" in md
    inside = md.split("## Inside the models")[1].split("\n## ")[0]          # the table filled, not a bare header
    assert "| attention distance: first block (px) |" in inside and "| attention distance: last block (px) |" in inside
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    clean = {name: json.loads((out / name / "results.json").read_text())["suites"]["clean"]["top1"] for name in ("vit", "cnn")}
    assert {(r["model"], float(r["clean"])) for r in rows} == {(n, c) for n, c in clean.items()}
    assert len(rows) == 4                                 # 2 models × 2 threat models
    assert json.loads((out / "leaderboard.json").read_text())[0]["threat_model"] == "Linf"
    again = run_study(load_study(spec), progress=False)   # resumes: the same numbers
    assert {n: r["suites"]["clean"]["top1"] for n, r in again["runs"].items()} == clean
