"""What a training run records and validates on: TrainConfig's options declared once (every field a flag with its
help; bad values one-line errors), a seeded class-stratified validation sample, results.json's times and
``pretrained`` as they happened, the data set built once, and segmentation through the same loop (resume)."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.cli import build_parser, main
from robustvit.data import SubsetDataset, create_dataset
from robustvit.data.subset import dataset_labels, select_subset
from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.runs import read_results
from robustvit.training import TrainConfig, train, trainer
from robustvit.training.tasks import Segment

TINY = {"embed_dim": 32, "depth": 1, "num_heads": 2, "img_size": 16}
DATA = "synthshapes:train,count=8,size=16,classes=4"


def _cfg(out, **kw):
    return TrainConfig(**{**dict(model="vit_cifar_micro", data=DATA, out=str(out), epochs=1, batch_size=8,
                                 model_kwargs=TINY, device="cpu", warmup_epochs=0), **kw})


# ---- options declared once -----------------------------------------------------------------------------------
def _train_actions():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {a.dest: a for a in sub.choices["train"]._actions}


def test_every_field_has_a_flag_with_its_declared_help():
    actions = _train_actions()
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f"TrainConfig.{f.name} declares no help"
        if f.name == "loss_options":                     # set through --loss-option KEY=VALUE
            assert "loss_option" in actions
            continue
        a = actions[f.name]
        assert a.option_strings == ["--" + f.name.replace("_", "-")] + (
            ["--no-" + f.name.replace("_", "-")] if f.type in ("bool", bool) else [])
        assert a.help.startswith(f.metadata["help"]) and a.default is None   # unset flags keep the config's value
    assert "one of: classify, segment" in actions["task"].help and "(default 1000)" in actions["val_limit"].help


@pytest.mark.parametrize("flag,value,says", [("--epochs", "0", "epochs must be >= 1"),
                                             ("--lr-scaling", "cubic", "linear, sqrt"),
                                             ("--val-limit", "many", "expected an integer"),
                                             ("--select-best", "best", "clean, robust"),
                                             ("--drop-path", "1.5", "drop_path must be <= 1"),
                                             ("--task", "detect", "classify, segment")])
def test_a_bad_value_is_a_one_line_error(capsys, tmp_path, flag, value, says):
    code = main(["train", "--model", "m", "--data", "d", "--out", str(tmp_path / "o"), flag, value,
                 "--print-config"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_an_interrupted_train_says_to_resume_with_the_flag(capsys, tmp_path, monkeypatch):
    import robustvit.training

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(robustvit.training, "train", interrupted)
    code = main(["train", "--model", "m", "--data", "d", "--out", str(tmp_path / "o")])
    assert code == 130 and "re-run it with --resume to resume" in capsys.readouterr().err


def test_a_config_built_in_python_is_checked_against_the_same_declarations():
    with pytest.raises(RobustvitError, match="batch_size must be >= 1"):
        _cfg("o", batch_size=0).validate()
    with pytest.raises(RobustvitError, match="expected one of linear, sqrt"):
        _cfg("o", lr_scaling="cubic").validate()
    with pytest.raises(RobustvitError, match="lr must be > 0"):
        _cfg("o", lr=0.0).validate()


# ---- the validation sample -----------------------------------------------------------------------------------
def _sorted_folder(root, classes=4, per_class=6):
    """An image folder sorted by class, as ImageFolder lists it: class k's images carry k in their colours."""
    rng = np.random.default_rng(0)
    for k in range(classes):
        (root / f"c{k}").mkdir(parents=True)
        for i in range(per_class):
            img = (rng.random((16, 16, 3)) * 60 + 60 * k).astype(np.uint8)
            Image.fromarray(img).save(root / f"c{k}" / f"{i}.png")
    return f"folder:{root}"


def test_validation_uses_a_seeded_class_stratified_sample(tmp_path):
    folder = _sorted_folder(tmp_path / "val")
    cfg = _cfg(tmp_path / "run", data=folder, val_data=folder, val_limit=8, seed=3)
    run = trainer.setup_run(cfg, resume=False)
    labels = dataset_labels(run.val)
    assert torch.bincount(labels).tolist() == [2, 2, 2, 2]            # the first 8 would be [6, 2, 0, 0]
    # the record equals top-1 on the images select_subset draws, computed here from the whole folder
    whole = trainer.dataset_for_model(folder, run.model.spec)
    idx = select_subset(dataset_labels(whole), 8, "stratified", seed=3)
    x, y = whole.get_batch(idx)
    with torch.no_grad():
        expected = float((run.model.eval()(x).argmax(1) == y).float().mean())
    assert trainer.validate(run)["val_acc"] == pytest.approx(expected, abs=1e-12)
    assert run.val_subset == {"method": "stratified", "seed": 3, "num_images": 8, "num_classes": 4, "of": 24}


# ---- results.json: times, pretrained, the data built once ----------------------------------------------------
def test_results_record_the_run_as_it_happened(tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(trainer, "now", lambda: "2000-01-01T00:00:00+0000")
    train(_cfg(out, val_data="synthshapes:test,count=4,size=16,classes=4"), progress=False)
    first = read_results(out)
    monkeypatch.setattr(trainer, "now", lambda: "2001-01-01T00:00:00+0000")
    train(_cfg(out, epochs=2), resume=True, progress=False)                      # a second session
    doc = read_results(out)
    run = doc["run"]
    assert run["started"] == "2000-01-01T00:00:00+0000" < run["finished"]        # the first session's start
    assert doc["model"]["pretrained"] is False and doc["model"]["weights"]["started_from"] == "random initialisation"
    epochs = doc["train"]["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2] and epochs[0] == first["train"]["epochs"][0]
    assert epochs == [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    # the whole training's wall time: both sessions, at least their epochs
    assert run["training_seconds"] >= first["run"]["training_seconds"] + epochs[1]["seconds"]
    assert first["data"]["val_subset"] is None                                    # 8 images < val_limit: all
    tuned = tmp_path / "tuned"
    train(_cfg(tuned, model=str(out / "checkpoint")), progress=False)             # starts from trained weights
    assert read_results(tuned)["model"]["pretrained"] is True


def test_the_training_data_set_is_built_once(tmp_path, monkeypatch):
    built = []
    real = trainer.create_dataset

    def counting(spec, *a, **k):
        built.append(spec)
        return real(spec, *a, **k)

    monkeypatch.setattr(trainer, "create_dataset", counting)
    monkeypatch.setattr(trainer, "dataset_for_model", lambda spec, *a, **k: built.append(spec) or real(spec))
    trainer.setup_run(_cfg(tmp_path / "run"), resume=False)
    assert built == [DATA]


# ---- segmentation through the one loop -----------------------------------------------------------------------
class Interrupt(Exception):
    pass


def test_segmentation_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    seg = dict(task="segment", data="synthshapes:train,count=4,size=16,classes=3,masks=1", batch_size=4,
               val_data="synthshapes:test,count=2,size=16,classes=3,masks=1", select_best="clean",
               model_kwargs={**TINY, "head_channels": 8}, epochs=2)
    train(_cfg(tmp_path / "a", **seg), progress=False)
    real = trainer.train_epoch

    def stop_at_epoch_2(run, epoch, progress):
        if epoch == 1:
            raise Interrupt
        return real(run, epoch, progress)

    monkeypatch.setattr(trainer, "train_epoch", stop_at_epoch_2)
    with pytest.raises(Interrupt):
        train(_cfg(tmp_path / "b", **seg), progress=False)
    monkeypatch.setattr(trainer, "train_epoch", real)
    train(_cfg(tmp_path / "b", **seg), resume=True, progress=False)
    a, b = read_results(tmp_path / "a"), read_results(tmp_path / "b")
    strip = [[{k: v for k, v in e.items() if k != "seconds"} for e in d["train"]["epochs"]] for d in (a, b)]
    assert strip[0] == strip[1] and {"train_pixel_accuracy", "val_miou", "val_pixel_accuracy"} <= set(strip[0][0])
    assert a["kind"] == "train" and a["train"]["config"]["task"] == "segment"
    ma, mb = (create_model(str(tmp_path / d / "checkpoint")).eval() for d in "ab")
    x = torch.rand(2, 3, 16, 16)
    assert torch.equal(ma(x), mb(x)) and ma(x).shape == (2, 4, 16, 16)       # 3 shapes + background
    meta = json.loads((tmp_path / "a" / "checkpoint" / "spec.json").read_text())
    assert meta["task"] == "segment" and meta["head"]["head_channels"] == 8


def test_a_validation_sample_gives_the_masks_of_its_own_images():
    ds = create_dataset("synthshapes:test,count=12,size=16,classes=3,masks=1")
    chosen = torch.tensor([1, 5, 10])
    masks = Segment().targets(SubsetDataset(ds, chosen), torch.tensor([0, 2]), None)
    assert torch.equal(masks, ds.get_masks(torch.tensor([1, 10]))) and not torch.equal(masks[0], masks[1])
