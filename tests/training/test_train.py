import json

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.runs import read_results, validate_results
from robustvit.training import TrainConfig, register_loss, train
from robustvit.training.losses import CrossEntropy
from robustvit.training.augment import random_crop_flip
from robustvit.training.trainer import lr_at


def test_lr_schedule():
    assert lr_at(0, 100, 10, 1.0, 0.0) == pytest.approx(0.1)
    assert lr_at(9, 100, 10, 1.0, 0.0) == pytest.approx(1.0)
    assert lr_at(10, 100, 10, 1.0, 0.0) == pytest.approx(1.0)
    assert lr_at(55, 100, 10, 1.0, 0.0) == pytest.approx(0.5)
    assert lr_at(100, 100, 10, 1.0, 0.1) == pytest.approx(0.1)


def test_crop_flip_is_a_shifted_copy():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6)
    g = torch.Generator().manual_seed(0)
    y = random_crop_flip(x, g, padding=0, flip=False)
    assert torch.equal(x, y)
    y = random_crop_flip(x, torch.Generator().manual_seed(1), padding=2, flip=True)
    assert y.shape == x.shape
    for i in range(2):  # every non-zero value comes from the same image, in order along rows (or reversed)
        vals = y[i][y[i] > 0]
        assert set(vals.tolist()) <= set(x[i].flatten().tolist())


def _cfg(tmp_path, epochs=2):
    return TrainConfig(model="resnet_cifar18", data="synthshapes:train,count=64,size=16", out=str(tmp_path / "run"),
                       epochs=epochs, batch_size=32, lr=1e-3, model_kwargs={"width_mult": 0.0625},
                       val_data="synthshapes:test,count=32,size=16", device="cpu")


class Interrupt(Exception):
    pass


@register_loss("_interrupt_at_epoch_2")
class _InterruptingCE(CrossEntropy):
    def forward(self, model, x, y, epoch):
        if epoch == 2:
            raise Interrupt()
        return super().forward(model, x, y, epoch)


def test_train_checkpoint_and_resume(tmp_path):
    cfg = _cfg(tmp_path)
    ck = train(cfg, progress=False)
    lines = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2] and all("val_acc" in r for r in lines)
    model = create_model(str(ck))
    assert model.spec.class_names[0] == "circle" and model.spec.num_classes == 10
    doc = read_results(tmp_path / "run")          # results.json of kind train, valid against the schema
    validate_results(doc)
    assert doc["kind"] == "train" and doc["train"]["epochs"] == lines and doc["train"]["config"]["epochs"] == 2
    assert doc["train"]["checkpoints"][0] == "checkpoint" and doc["data"]["num_images"] == 64
    assert doc["model"]["params"] == sum(p.numel() for p in model.parameters())
    with pytest.raises(RobustvitError, match="--resume"):
        train(cfg, progress=False)


def test_interrupted_run_resumes_to_the_same_model(tmp_path):
    straight = _cfg(tmp_path / "a", epochs=3)
    train(straight, progress=False)
    broken = _cfg(tmp_path / "b", epochs=3)
    broken.loss, broken.loss_options = "_interrupt_at_epoch_2", {"label_smoothing": 0.1}
    with pytest.raises(Interrupt):
        train(broken, progress=False)
    assert not (tmp_path / "b" / "run" / "checkpoint").exists()
    train(_cfg(tmp_path / "b", epochs=3), resume=True, progress=False)
    lines = [json.loads(s) for s in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2, 3]
    a = create_model(str(tmp_path / "a" / "run" / "checkpoint")).eval()
    b = create_model(str(tmp_path / "b" / "run" / "checkpoint")).eval()
    x = torch.rand(4, 3, 16, 16)
    assert torch.allclose(a(x), b(x), atol=1e-5)


def test_training_learns(tmp_path):
    # 1,024 images × 10 epochs: seeds 0-2 all end at 0.955-0.975 (8 epochs on 512 ended anywhere in 0.63-0.89)
    cfg = TrainConfig(model="resnet_cifar18", data="synthshapes:train,count=1024,size=16,classes=2",
                      out=str(tmp_path / "r"), epochs=10, batch_size=32, lr=5e-3, model_kwargs={"width_mult": 0.125},
                      val_data="synthshapes:test,count=200,size=16,classes=2", device="cpu", warmup_epochs=0.5)
    train(cfg, progress=False)
    last = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["val_acc"] > 0.85


def test_resume_without_state(tmp_path):
    with pytest.raises(RobustvitError, match="nothing to resume"):
        train(_cfg(tmp_path), resume=True, progress=False)


def _xcit_cfg(out, epochs=3):
    """An XCiT whose stem is adapted to 16-px images (patch 16 → 4: two stem convolutions get stride 1), with the
    best epoch kept by clean validation accuracy."""
    return TrainConfig(model="xcit_nano_12_p16_224", data="synthshapes:train,count=32,size=16,classes=3",
                       out=str(out), epochs=epochs, batch_size=16, lr=1e-3, img_size=16, patch_size=4,
                       model_kwargs={"depth": 1, "embed_dim": 16, "num_heads": 2, "img_size": 16},
                       val_data="synthshapes:test,count=16,size=16,classes=3", select_best="clean", device="cpu")


def _stem(model):
    return [tuple(c.stride) for c in model.net.patch_embed.proj.modules() if isinstance(c, torch.nn.Conv2d)]


def test_adapted_stem_survives_select_best_resume_and_eval(tmp_path):
    stem = [(1, 1), (1, 1), (2, 2), (2, 2)]
    straight = train(_xcit_cfg(tmp_path / "a"), progress=False)
    broken = _xcit_cfg(tmp_path / "b")
    broken.loss, broken.loss_options = "_interrupt_at_epoch_2", {}
    with pytest.raises(Interrupt):
        train(broken, progress=False)
    resumed = train(_xcit_cfg(tmp_path / "b"), resume=True, progress=False)     # --resume reloads last/
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    models = {p: create_model(str(p)).eval() for p in (straight, resumed, tmp_path / "a" / "best", tmp_path / "b" / "last")}
    for m in models.values():
        assert _stem(m) == stem and m.spec.patch_size == 4
        assert m.net.patch_embed(x)[1] == (4, 4)
    with torch.no_grad():   # the resumed run trained the adapted network, not the stride-16 one
        assert torch.allclose(models[straight](x), models[resumed](x), atol=1e-5)
    best = json.loads((tmp_path / "a" / "best" / "spec.json").read_text())
    final = json.loads((straight / "spec.json").read_text())
    assert best["spec"]["adaptations"] == final["spec"]["adaptations"]
    assert [a["op"] for a in final["spec"]["adaptations"]] == ["adapt_input"]
    # `robustvit eval --model DIR` loads the same adapted network: its clean accuracy is the reloaded model's
    from robustvit.cli import main
    from robustvit.data import create_dataset

    assert main(["eval", "--model", str(straight), "--data", "synthshapes:test,count=16,size=16,classes=3",
                 "--suite", "clean", "--out", str(tmp_path / "ev"), "--no-progress", "--device", "cpu"]) == 0
    res = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert res["model"]["spec"]["adaptations"] == final["spec"]["adaptations"]
    data = create_dataset("synthshapes:test,count=16,size=16,classes=3")
    xs = torch.stack([data[i][0] for i in range(len(data))])
    ys = torch.tensor([int(data[i][1]) for i in range(len(data))])
    with torch.no_grad():
        top1 = (models[straight](xs).argmax(1) == ys).float().mean().item()
    assert res["suites"]["clean"]["top1"] == pytest.approx(top1)
