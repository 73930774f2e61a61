import json
import sqlite3

import pytest
import torch

from robustvit.analysis import analyses_for, list_analyses, run_analyses
from robustvit.runs import DB_NAME
from robustvit.cli import main
from robustvit.errors import RobustvitError

ALL = ["attention_distance", "attention_maps", "attention_stability", "correlation", "grouping", "lesion",
       "perturbation_semantics", "pos_embed_similarity", "restricted_attention"]


def test_registry_lists_every_analysis_and_families():
    assert list_analyses() == ALL
    assert list_analyses("attention_*") == ALL[:3]
    assert analyses_for("cnn") == ["correlation", "lesion", "perturbation_semantics"]
    assert set(analyses_for("vit")) == set(ALL)
    assert "restricted_attention" not in analyses_for("xcit") and "attention_stability" in analyses_for("swin")


def test_unsupported_pair_is_a_one_line_error_naming_what_applies(tiny_resnet, tiny_data):
    with pytest.raises(RobustvitError, match="for cnn use: correlation, lesion, perturbation_semantics") as e:
        run_analyses(tiny_resnet, tiny_data, ["restricted_attention"], None)
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="no option 'depth'"):
        run_analyses(tiny_resnet, tiny_data, ["lesion:depth=3"], None)


def test_resume_after_lost_units_gives_the_same_result(cls_vit, tiny_data, tmp_path):
    first = run_analyses(cls_vit, tiny_data, "lesion:samples=2", tmp_path, batch_size=4, device="cpu")["lesion"]
    db = sqlite3.connect(tmp_path / DB_NAME)
    total = db.execute("SELECT COUNT(*) FROM units").fetchone()[0]
    assert total == 3 * (1 + 3 * 3 + 3 * 2 * 2)    # chunks × (clean + 9 single + {block, attn, mlp} × n∈{1,2} × 2 samples)
    db.execute("DELETE FROM units WHERE chunk = 2 AND part LIKE 'random%'")   # as if killed in chunk 2
    db.commit()
    db.close()
    again = run_analyses(cls_vit, tiny_data, "lesion:samples=2", tmp_path, batch_size=4, device="cpu")["lesion"]
    assert {k: again[k] for k in ("clean_accuracy", "single", "random", "random_attention", "random_mlp")} == \
           {k: first[k] for k in ("clean_accuracy", "single", "random", "random_attention", "random_mlp")}
    with pytest.raises(RobustvitError, match="other settings"):
        run_analyses(cls_vit, tiny_data, "lesion:samples=3", tmp_path, batch_size=4, device="cpu")


def test_stand_in_fan_runs_its_analyses(stand_in_fan, tiny_data):
    names = analyses_for("fan")
    assert "pos_embed_similarity" not in names and "restricted_attention" in names
    opts = {"lesion": "lesion:samples=2", "attention_stability": "attention_stability:masks=2:images=2",
            "perturbation_semantics": "perturbation_semantics:steps=1:vis_steps=1:classes=2",
            "attention_maps": "attention_maps:images=2", "grouping": "grouping:images=2"}
    res = run_analyses(stand_in_fan, tiny_data, [opts.get(n, n) for n in names], None, batch_size=6, limit=6)
    r = res["restricted_attention"]
    assert r["local"]["3"] == r["clean_accuracy"] == res["lesion"]["clean_accuracy"]
    assert r["cls_only_first"]["0"] == r["clean_accuracy"]
    assert torch.tensor(res["attention_distance"]["distance"]).shape == (3, 2)


def test_cli_analyze_writes_json_keys_and_report(tmp_path, capsys):
    out = tmp_path / "an"
    rc = main(["analyze", "correlation,lesion:samples=2,restricted_attention,attention_distance,attention_stability:masks=2",
               "--model", "vit_cifar_micro", "--data", "synthshapes:test,count=8", "--out", str(out), "--limit", "8",
               "--batch-size", "8", "--device", "cpu", "--no-progress"])
    assert rc == 0
    keys = {"correlation": ["all_tokens", "cls_token"], "lesion": ["clean_accuracy", "single", "random"],
            "restricted_attention": ["clean_accuracy", "local", "random", "cls_only_first", "cls_only_last"],
            "attention_distance": ["distance"], "attention_stability": ["cosine"]}
    for name, ks in keys.items():
        r = json.loads((out / f"{name}.json").read_text())
        assert all(k in r for k in ks), name
        assert r["model"] == "vit_cifar_micro" and r["num_images"] == 8 and r["seed"] == 0 and "protocol" in r
        assert all((out / f).is_file() for f in r["figures"])
    les = json.loads((out / "lesion.json").read_text())
    assert set(les["single"]) == {"block", "attention", "mlp"} and len(les["single"]["block"]) == 4
    assert set(les["random"]["2"]) >= {"mean", "stderr", "min", "max"}
    assert len(json.loads((out / "attention_distance.json").read_text())["distance"]) == 4
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Inside the models" in md and "clean accuracy (analysis images)" in md
    assert main(["list", "analyses"]) == 0
    assert "restricted_attention" in capsys.readouterr().out
    assert main(["analyze", "restricted_attention", "--model", "resnet_cifar18", "--data", "synthshapes:test,count=4",
                 "--out", str(tmp_path / "x"), "--device", "cpu"]) == 2
    assert "for cnn use: correlation, lesion, perturbation_semantics" in capsys.readouterr().err


@pytest.mark.slow
def test_every_vit_analysis_on_vit_small_patch16_224(tmp_path):
    from robustvit.data import create_dataset
    from robustvit.models import create_model

    torch.manual_seed(0)
    model = create_model("vit_small_patch16_224", num_classes=10)
    data = create_dataset("synthshapes:test,count=2", image_size=224)
    specs = {"lesion": "lesion:samples=1:random=false", "restricted_attention": "restricted_attention:distances=13",
             "attention_stability": "attention_stability:masks=1:images=1", "attention_maps": "attention_maps:images=1",
             "grouping": "grouping:images=1", "perturbation_semantics": "perturbation_semantics:steps=1:vis_steps=1:classes=1"}
    res = run_analyses(model, data, [specs.get(n, n) for n in ALL], tmp_path, limit=2, batch_size=2, device="cpu")
    assert set(res) == set(ALL)
    assert torch.tensor(res["attention_distance"]["distance"]).shape == (12, 6)
    assert torch.tensor(res["correlation"]["all_tokens"]).shape == (12, 12)
    assert res["restricted_attention"]["local"]["13"] == res["restricted_attention"]["clean_accuracy"]
    assert torch.tensor(res["pos_embed_similarity"]["similarity"]).shape == (196, 196)


def _sorted_data(n_per=4, classes=5):
    """Images sorted by class (like folder: data): a prefix of them holds the first classes only."""
    from robustvit.data import TensorImageDataset

    g = torch.Generator().manual_seed(1)
    x = torch.rand(n_per * classes, 3, 16, 16, generator=g)
    return TensorImageDataset(x, torch.arange(n_per * classes) // n_per, [str(i) for i in range(classes)], "tensor:sorted")


def test_limit_is_a_stratified_sample_recorded_everywhere(cls_vit, tmp_path):
    from robustvit.data.subset import select_subset

    data = _sorted_data()
    res = run_analyses(cls_vit, data, "lesion:samples=1:random=false", tmp_path, limit=5, batch_size=2,
                       device="cpu", seed=0)["lesion"]
    ids = select_subset(data.labels, 5, "stratified", seed=0)
    assert torch.bincount(data.labels[ids], minlength=5).tolist() == [1] * 5        # every class, not class 0 only
    with torch.no_grad():
        x, y = data.get_batch(ids)
        assert res["clean_accuracy"] == pytest.approx((cls_vit(x).argmax(1) == y).float().mean().item())
    record = {"method": "stratified", "seed": 0, "num_images": 5, "num_classes": 5, "of": 20}
    assert json.loads((tmp_path / "lesion.json").read_text())["subset"] == record
    man = json.loads((tmp_path / "results.json").read_text())
    assert man["data"]["subset"] == record and man["run"]["limit"] == 5 and man["data"]["num_images"] == 5
    assert res["protocol"]["comparable"] is False and "subset 5/20 (stratified)" in res["protocol"]["deviations"]
    assert man["comparable"] is False and any(n.startswith("5 of 20 images") for n in man["notes"])
    with pytest.raises(RobustvitError, match="other settings.*subset"):       # resuming with another subset
        run_analyses(cls_vit, data, "lesion:samples=1:random=false", tmp_path, limit=5, batch_size=2, device="cpu",
                     subset_seed=1)
    first = run_analyses(cls_vit, data, "lesion:samples=1:random=false", None, limit=5, batch_size=2,
                         device="cpu", subset_method="first")["lesion"]
    with torch.no_grad():
        x, y = data.get_batch(torch.arange(5))
        assert first["clean_accuracy"] == pytest.approx((cls_vit(x).argmax(1) == y).float().mean().item())
    assert first["subset"]["method"] == "first" and first["subset"]["num_classes"] == 2


def test_analyze_rejects_a_class_count_mismatch_and_takes_a_class_map(tmp_path, capsys):
    from robustvit.data import dataset_for_model
    from robustvit.data.subset import select_subset
    from robustvit.models import create_model, save_checkpoint

    torch.manual_seed(0)      # a CNN: its lesions run the wrapper's own forward, class map included
    model = create_model("resnet_cifar18", width_mult=0.0625).eval()
    ckpt = str(save_checkpoint(model, tmp_path / "ck"))
    base = ["analyze", "lesion:samples=1:random=false", "--model", ckpt, "--data",
            "synthshapes:test,count=8,classes=4", "--batch-size", "8", "--device", "cpu", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "a")]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("robustvit: warning:")]
    assert len(err) == 1 and err[0].startswith("robustvit: error: ")
    assert "model ck has 10 classes but synthshapes:test,count=8,classes=4 has 4; give --class-map" in err[0]
    cmap = tmp_path / "map.json"
    cmap.write_text(json.dumps([3, [0, 1], 2, 9]))
    assert main(base + ["--out", str(tmp_path / "b"), "--class-map", str(cmap), "--limit", "4"]) == 0
    les = json.loads((tmp_path / "b" / "lesion.json").read_text())
    man = json.loads((tmp_path / "b" / "results.json").read_text())
    assert man["model"]["class_map"] == str(cmap) and man["data"]["subset"]["num_images"] == 4
    # the clean accuracy in the data's 4 classes, by hand: data class i scores as its best mapped model class
    data = dataset_for_model("synthshapes:test,count=8,classes=4", model.spec)
    ids = select_subset(data.labels, 4, "stratified", seed=0)
    assert man["data"]["subset"]["num_classes"] == len(data.labels[ids].unique())
    x, y = data.get_batch(ids)
    with torch.no_grad():
        logits = model(x)
    mapped = torch.stack([logits[:, 3], logits[:, [0, 1]].max(1).values, logits[:, 2], logits[:, 9]], 1)
    assert les["clean_accuracy"] == pytest.approx((mapped.argmax(1) == y).float().mean().item())
