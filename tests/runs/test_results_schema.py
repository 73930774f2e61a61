"""results.json, schema 2: the shipped JSON Schema, and every kind of run validated against it."""

import json
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.runs import read_results, validate_results, write_train_results
from robustvit.runs.results import schema

ROOT = Path(__file__).resolve().parents[2]
DATA = "synthshapes:test,count=12,size=16"


def _validate(doc):
    jsonschema.Draft202012Validator(schema()).validate(doc)      # the schema itself, independently of our wrapper
    validate_results(doc)


def test_the_schema_is_a_valid_json_schema_shipped_as_package_data():
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["properties"]["schema"] == {"const": 2}
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1].split("[")[0:2]
    assert '"runs/*.json"' in "[".join(section)           # the robustvit = [...] line ships the schema


def test_eval_results_validate_and_keep_their_keys(tmp_path):
    from robustvit.evaluation.runner import EvalConfig, run_eval

    torch.manual_seed(0)
    res = run_eval(EvalConfig(models=["resnet_cifar18"], data=DATA, out=str(tmp_path), batch_size=8, device="cpu",
                              progress=False))["resnet_cifar18"]
    doc = read_results(tmp_path)
    assert doc == json.loads(json.dumps(res))
    _validate(doc)
    assert doc["kind"] == "eval" and doc["schema"] == 2
    assert {"robustvit", "torch", "device", "device_name", "seed", "started", "finished", "command", "world_size",
            "batch_size", "limit", "options"} <= set(doc["run"])
    assert {"name", "source", "params", "spec", "pretrained", "weights", "preprocessing", "class_map"} <= set(doc["model"])
    assert doc["data"]["num_images"] == 12 and doc["data"]["num_unreadable"] == 0 and doc["data"]["num_classes"] == 10
    assert doc["comparable"] is False and doc["notes"]                    # random weights say so
    bad = {k: v for k, v in doc.items() if k != "suites"}
    with pytest.raises(RobustvitError, match="suites") as e:
        validate_results(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="data/num_images"):
        validate_results({**doc, "data": {**doc["data"], "num_images": -1}})


def test_analysis_results_hold_every_analysis_and_its_figures(tmp_path):
    from robustvit.analysis import run_analyses
    from robustvit.data import dataset_for_model
    from robustvit.models import create_model

    torch.manual_seed(0)
    model = create_model("vit_cifar_micro", num_classes=10)
    data = dataset_for_model(DATA, model.spec)
    run_analyses(model, data, "attention_distance", tmp_path, batch_size=6, device="cpu", data_spec=DATA)
    run_analyses(model, data, "lesion:samples=1:random=false", tmp_path, batch_size=6, device="cpu", data_spec=DATA)
    doc = read_results(tmp_path)
    _validate(doc)
    assert doc["kind"] == "analysis" and set(doc["analyses"]) == {"attention_distance", "lesion", "figures"}
    assert doc["analyses"]["lesion"] == json.loads((tmp_path / "lesion.json").read_text())
    assert doc["analyses"]["figures"] and all((tmp_path / f).is_file() for f in doc["analyses"]["figures"])
    assert not any(k.startswith("_") for r in doc["analyses"].values() if isinstance(r, dict) for k in r)
    assert not (tmp_path / "analyses.json").exists()                         # results.json is the one record
    assert doc["data"]["num_images"] == 12 and doc["model"]["params"] == sum(p.numel() for p in model.parameters())
    from robustvit.evaluation.runner import EvalConfig, run_eval

    with pytest.raises(RobustvitError, match="holds the results of an analysis run"):     # one kind per folder
        run_eval(EvalConfig(models=["vit_cifar_micro"], data=DATA, out=str(tmp_path), device="cpu", progress=False))


def test_write_train_results(tmp_path):
    epochs = [{"epoch": 0, "loss": 2.3, "val_acc": 0.1}, {"epoch": 1, "loss": 1.9, "val_acc": 0.3}]
    model = {"name": "vit_cifar_micro", "source": "vit_cifar_micro", "params": 1234, "spec": {"family": "vit"}}
    data = {"spec": "synthshapes:train", "num_images": 64, "num_classes": 10}
    f = write_train_results(tmp_path, {"model": "vit_cifar_micro", "epochs": 2, "seed": 3, "device": "cpu"}, epochs,
                            ["checkpoint", "best"], model, data)
    doc = read_results(f)
    _validate(doc)
    assert doc["kind"] == "train" and doc["train"]["epochs"] == epochs and doc["train"]["checkpoints"] == ["checkpoint", "best"]
    assert doc["run"]["seed"] == 3 and doc["run"]["device"] == "cpu"
    assert doc["data"] == {"spec": "synthshapes:train", "num_images": 64, "num_unreadable": 0, "num_classes": 10,
                           "subset": None}
    with pytest.raises(RobustvitError, match="model"):
        write_train_results(tmp_path / "x", {}, epochs, [], {"name": "m"}, data)


def test_validation_without_jsonschema_checks_the_required_keys(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)          # not installed
    doc = {"schema": 2, "kind": "analysis", "run": {}, "model": {}, "data": {}, "comparable": True, "notes": []}
    with pytest.raises(RobustvitError, match="missing analyses"):
        validate_results(doc)
    validate_results({**doc, "analyses": {}})
    with pytest.raises(RobustvitError, match="schema is 1"):
        validate_results({**doc, "analyses": {}, "schema": 1})
