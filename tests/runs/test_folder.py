"""RunFolder: the run skeleton eval and analyze share (kind check, store, fingerprint, results.json)."""

from __future__ import annotations

import json

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.runs.folder import RunFolder
from robustvit.runs.store import MemoryStore


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return create_model("vit_cifar_micro", num_classes=10)


def _write(folder, model, payload):
    doc = folder.document(model, "m", None, device=torch.device("cpu"), seed=3, command="c", payload=payload,
                          data={"spec": "synthshapes:test", "num_images": 4, "num_classes": 10}, batch_size=2)
    return folder.write(doc)


def test_a_folder_keeps_other_analyses_and_refuses_another_kind(tmp_path, model):
    folder = RunFolder(tmp_path, "analysis")
    with folder.store:
        folder.store.check_fingerprint({"a": 1}, scope="lesion")
        first = _write(folder, model, {"lesion": {"figures": ["lesion.png"]}, "figures": ["lesion.png"]})
    assert first["run"]["started"] <= first["run"]["finished"] and first["run"]["batch_size"] == 2
    folder = RunFolder(tmp_path, "analysis")
    with folder.store:
        with pytest.raises(RobustvitError):
            folder.store.check_fingerprint({"a": 2}, scope="lesion")     # other settings for stored units
        second = _write(folder, model, {"attention_distance": {"y": 2}, "figures": []})
    assert set(second["analyses"]) == {"lesion", "attention_distance", "figures"}
    assert second["analyses"]["figures"] == ["lesion.png"]
    assert json.loads((tmp_path / "results.json").read_text()) == second
    with pytest.raises(RobustvitError, match="analysis run"):
        RunFolder(tmp_path, "eval")


def test_without_a_folder_the_units_are_in_memory_and_nothing_is_written(tmp_path, model):
    folder = RunFolder(None, "analysis")
    assert isinstance(folder.store, MemoryStore)
    doc = _write(folder, model, {"lesion": {}, "figures": []})
    assert doc["kind"] == "analysis" and doc["model"]["name"] == "m" and not list(tmp_path.iterdir())
