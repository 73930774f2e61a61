"""Trainer features on tiny models: exact resume (optimizer, EMA, AFAT's corruption model, RNG), gradient
accumulation, best-epoch selection, recipes and CLI overrides, DDP under torchrun."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from robustvit.cli import build_parser
from robustvit.cli import _train_config
from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.training import TrainConfig, list_recipes, register_loss, train
from robustvit.training.losses.afat import AFAT
from robustvit.training.losses import FGSMRS
from robustvit.training.recipes import RECIPES

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}
DATA = "synthshapes:train,count=48,size=16,classes=4"
VAL = "synthshapes:test,count=16,size=16,classes=4"


def _cfg(out, **kw):
    base = dict(model="vit_cifar_micro", data=DATA, out=str(out), epochs=3, batch_size=16, lr=1e-3,
                model_kwargs=TINY, device="cpu", warmup_epochs=0.5)
    return TrainConfig(**{**base, **kw})


class Interrupt(Exception):
    pass


@register_loss("_fgsm_rs_interrupt")
class _InterruptFGSM(FGSMRS):
    def forward(self, model, x, y, epoch):
        if epoch == 2:
            raise Interrupt()
        return super().forward(model, x, y, epoch)


@register_loss("_afat_interrupt")
class _InterruptAFAT(AFAT):
    def forward(self, model, x, y, epoch):
        if epoch == 2:
            raise Interrupt()
        return super().forward(model, x, y, epoch)


def _weights(path):
    return create_model(str(path)).state_dict()


@pytest.mark.parametrize("loss,extra", [("fgsm_rs", {"eps": "8/255", "ema_decay": 0.9, "drop_path": 0.1}),
                                        ("afat", {"loss_options": {"lam": 0.5, "lr": 0.1}})])
def test_resume_equals_uninterrupted(tmp_path, loss, extra):
    straight = train(_cfg(tmp_path / "a", loss=loss, **extra), progress=False)
    with pytest.raises(Interrupt):
        train(_cfg(tmp_path / "b", loss=f"_{loss}_interrupt", **extra), progress=False)
    resumed = train(_cfg(tmp_path / "b", loss=loss, **extra), resume=True, progress=False)
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    ma = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    mb = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(s)["train_loss"] for s in ma] == pytest.approx([json.loads(s)["train_loss"] for s in mb], abs=1e-6)
    if loss == "afat":
        state = torch.load(tmp_path / "b" / "last" / "train_state.pt", weights_only=True)
        assert any(k.startswith("corruptor.") for k in state["loss"])


def test_gradient_accumulation_equals_the_full_batch(tmp_path):
    one = train(_cfg(tmp_path / "one", epochs=2, crop_padding=0, flip=False), progress=False)
    acc = train(_cfg(tmp_path / "acc", epochs=2, crop_padding=0, flip=False, accum_steps=4), progress=False)
    a, b = _weights(one), _weights(acc)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k


def test_best_epoch_selection_on_robust_validation(tmp_path):
    cfg = _cfg(tmp_path / "r", loss="trades", eps="4/255", attack_steps=1, val_data=VAL, select_best="robust",
               val_attack="fgsm", normalize=False)
    ck = train(cfg, progress=False)
    lines = [json.loads(s) for s in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert all({"val_acc", "val_robust_acc", "best"} <= set(r) for r in lines)
    assert lines[0]["best"] is True
    best_epoch = max(range(len(lines)), key=lambda i: (lines[i]["val_robust_acc"], -i))
    assert json.loads((tmp_path / "r" / "best" / "spec.json").read_text())["epoch"] == best_epoch + 1
    m = create_model(str(ck))
    assert m.spec.mean == (0.0, 0.0, 0.0) and m.spec.std == (1.0, 1.0, 1.0)   # [0, 1] inputs (light recipe)
    best = create_model(str(tmp_path / "r" / "best")).state_dict()
    assert all(torch.equal(v, best[k]) for k, v in m.state_dict().items())


def test_recipes_are_valid_configs():
    assert list_recipes() == ["afat", "deit", "light_at", "light_at_cifar", "mpp", "trades_finetune"]
    for name, recipe in RECIPES.items():
        TrainConfig.from_dict({"recipe": name, "model": "m", "data": "d", "out": "o"})
        assert set(recipe.settings) <= {f.name for f in dataclasses.fields(TrainConfig)}
    with pytest.raises(RobustvitError, match="unknown recipe"):
        TrainConfig.from_dict({"recipe": "nope", "model": "m", "data": "d", "out": "o"})


def test_recipe_fields_are_overridden_from_the_command_line(tmp_path):
    argv = ["train", "--recipe", "light-at", "--model", "vit_cifar_micro", "--data", DATA, "--out", str(tmp_path / "o"),
            "--lr", "0.01", "--eps", "2/255", "--set", "weight_decay=0.1", "--set", "accum_steps=2",
            "--loss-option", "step_size=1/255", "--select-best", "clean"]
    cfg = _train_config(build_parser().parse_args(argv))
    assert cfg.recipe == "light_at" and cfg.loss == "pgd_at" and cfg.drop_path == 0.05 and cfg.normalize is False
    assert (cfg.lr, cfg.eps, cfg.weight_decay, cfg.accum_steps, cfg.select_best) == (0.01, "2/255", 0.1, 2, "clean")
    assert cfg.loss_options == {"step_size": "1/255"}
    assert cfg.effective_lr() == pytest.approx(0.01 * 128 / 512)
    yml = tmp_path / "c.yaml"
    yml.write_text(yaml.safe_dump({"recipe": "trades-finetune", "model": "m", "data": "d", "out": "o", "epochs": 3}))
    cfg = _train_config(build_parser().parse_args(["train", "--config", str(yml), "--epochs", "5"]))
    assert (cfg.loss, cfg.eps, cfg.epochs, cfg.lr_scaling) == ("trades", "8/255", 5, "sqrt")
    with pytest.raises(RobustvitError, match="KEY=VALUE"):
        _train_config(build_parser().parse_args(argv + ["--set", "oops"]))


def test_train_command_with_recipe_trades_and_afat(tmp_path):
    from robustvit.cli import main

    common = ["--model", "vit_cifar_micro", "--data", DATA, "--epochs", "1", "--batch-size", "16", "--device", "cpu",
              "--model-kwargs", json.dumps(TINY)]
    assert main(["train", "--recipe", "light-at", "--out", str(tmp_path / "l"), "--val-data", VAL, *common,
                 "--set", "val_attack=fgsm", "--set", "cooldown_epochs=0"]) == 0
    saved = yaml.safe_load((tmp_path / "l" / "config.yaml").read_text())
    assert saved["recipe"] == "light_at" and saved["weight_decay"] == 0.5 and saved["crop_scale"] == [0.08, 1.0]
    assert main(["train", "--loss", "trades", "--eps", "4/255", "--attack-steps", "1", "--loss-option", "beta=3",
                 "--out", str(tmp_path / "t"), *common]) == 0
    assert main(["train", "--loss", "afat", "--out", str(tmp_path / "a"), *common]) == 0
    assert "align_loss" in json.loads((tmp_path / "a" / "metrics.jsonl").read_text())
    assert main(["train", "--recipe", "deit", "--out", str(tmp_path / "d"), *common]) == 0


@pytest.mark.slow
def test_ddp_two_processes_equal_one_process_with_the_doubled_batch(tmp_path):
    kw = dict(crop_padding=0, flip=False, epochs=2)
    train(_cfg(tmp_path / "one", batch_size=16, **kw), progress=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29541", "-m",
           "robustvit.cli", "train", "--model", "vit_cifar_micro", "--data", DATA, "--out", str(tmp_path / "two"),
           "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--warmup-epochs", "0.5", "--device", "cpu",
           "--model-kwargs", json.dumps(TINY), "--set", "crop_padding=0", "--set", "flip=false"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-3000:]
    a, b = _weights(tmp_path / "one" / "checkpoint"), _weights(tmp_path / "two" / "checkpoint")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    la = [json.loads(s) for s in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(s) for s in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["train_loss"] for r in la] == pytest.approx([r["train_loss"] for r in lb], abs=1e-5)
