"""Every recipe against a table of its reference configuration (field by field), and TrainConfig's YAML round
trip. The tables are written from the released configurations, not from the recipes:

* dedeswim/vits-robustness-torch ``configs/xcit-adv-training.yaml`` @ c92989de3dc601153146e288676da30dc42e14cf
  (light recipe, ImageNet) and ``configs/xcit-adv-finetuning.yaml`` @ fc8fd64859d7bf4bbff85531a6f31694b16a73c7
  (CIFAR fine-tuning; its CIFAR transform adds colour jitter 0.25 and rotation 2°);
* guoyongcs/RSPC ``RSPC_FAN/train_script.sh`` (FAN-T) and ``main.py``'s corruption-model optimiser.
"""

import math

import pytest
import yaml

from robustvit.errors import RobustvitError
from robustvit.training import TrainConfig, get_recipe, list_recipes
from robustvit.training.losses import create_loss
from robustvit.training.trainer import build_loss

E4, E8 = 4 / 255, 8 / 255

# reference value → how it appears as TrainConfig fields (one line per reference setting)
LIGHT_AT = {
    "lr": 5e-4, "lr_batch_ref": 512, "lr_scaling": "linear",     # lr 5e-4 × global batch / 512
    "weight_decay": 0.5, "min_lr": 1e-5,                           # weight_decay 0.5, min_lr 1e-05, sched cosine
    "warmup_epochs": 10, "warmup_lr": 1e-6,                        # warmup_epochs 10, warmup_lr 1e-6
    "epochs": 100, "cooldown_epochs": 10,                          # epochs 100, cooldown_epochs 10
    "drop_path": 0.05, "label_smoothing": 0.1,                     # drop_path 0.05, smoothing 0.1
    "crop_scale": (0.08, 1.0), "crop_ratio": (0.75, 4 / 3),         # scale [0.08, 1], ratio [3/4, 4/3]
    "flip": True, "color_jitter": 0.4, "rotation": 0.0,            # hflip 0.5, color_jitter 0.4
    "rand_augment": None, "mixup": 0.0, "cutmix": 0.0, "random_erasing": 0.0,   # aa None, mixup/cutmix 0, reprob 0
    "normalize": False,                                            # no_normalize true
    "loss": "pgd_at", "eps": E4, "attack_steps": 1, "step_size": 1.5 * E4,   # adv_training pgd, eps 4, 1 step
    "eps_schedule": "linear", "eps_warmup_epochs": 10,            # eps_schedule linear, period 10
    "select_best": "robust",                                       # eval_metric robust_top1
}
LIGHT_AT_CIFAR = {**LIGHT_AT, "crop_scale": None, "crop_padding": 4}
TRADES_FINETUNE = {
    "loss": "trades", "beta": 6.0, "eps": E8, "attack_steps": 10,  # adv_training trades, trades_beta 6, eps 8, 10 steps
    "step_size": 1.5 * E8 / 10,                                   # attack_lr null → 1.5·ε/steps
    "eps_schedule": "constant",
    "epochs": 20, "cooldown_epochs": 2,                            # epochs 20, cooldown_epochs 2
    "lr": 2e-4, "lr_batch_ref": 512, "lr_scaling": "sqrt",         # lr 2e-4 · √(batch/512)
    "weight_decay": 0.5, "warmup_epochs": 5, "warmup_lr": 1e-6, "min_lr": 5e-6,
    "label_smoothing": 0.0, "drop_path": 0.05,                     # smoothing 0.0, drop_path 0.05
    "crop_padding": 4, "crop_scale": None, "flip": True,           # CIFAR: pad-4 crop + flip
    "color_jitter": 0.25, "rotation": 2.0,                         # CIFAR transform: jitter 0.25, rotation 2°
    "normalize": True, "mean": (0.4914, 0.4822, 0.4465), "std": (0.2471, 0.2435, 0.2616),   # normalize_model
    "select_best": "robust",
}
AFAT = {
    "loss": "afat", "lam": 0.005, "rho": 0.1,
    "lr": 20e-4, "lr_batch_ref": 2048, "lr_scaling": "linear",     # --lr 20e-4 at -b 128 × 16 GPUs
    "min_lr": 1e-6, "weight_decay": 0.05, "epochs": 300,           # --min-lr 1e-6 --weight-decay .05 --epochs 300
    "warmup_epochs": 5, "warmup_lr": 1e-6,                         # --warmup-epochs 5 --warmup-lr 1e-6
    "drop_path": 0.1, "label_smoothing": 0.1,                      # --drop-path .1 --smoothing 0.1
    "rand_augment": "rand-m9-mstd0.5-inc1", "mixup": 0.8, "cutmix": 1.0,   # --aa … --mixup 0.8 --cutmix 1.0
    "random_erasing": 0.3, "ema_decay": 0.99992,                   # --reprob 0.3 --model-ema-decay 0.99992
    "crop_scale": (0.08, 1.0), "flip": True, "color_jitter": 0.0,   # timm's train transform (no jitter with aa)
    "corruptor_lr": 1e-4, "corruptor_momentum": 0.9, "corruptor_weight_decay": 0.05, "corruptor_clip": 5.0,
    "step_rule": "rspc", "grad_scale": 65536.0, "noise_space": "normalized",   # AMP NativeScaler, noise in norm. space
}
REFERENCES = {"light_at": LIGHT_AT, "light_at_cifar": LIGHT_AT_CIFAR, "trades_finetune": TRADES_FINETUNE,
              "afat": AFAT}


def _resolved(name: str) -> dict:
    """The recipe's configuration and its loss's resolved options, flattened to the table's keys."""
    cfg = TrainConfig.from_dict({"recipe": name, "model": "m", "data": "d", "out": "o", "val_data": "v"})
    cfg.validate()
    loss = build_loss(cfg)           # the loss exactly as the trainer builds it from the configuration
    out = dict(vars(cfg))
    o = vars(loss.options)
    out.update({k: v for k, v in o.items() if k in ("beta", "lam", "rho", "step_rule", "grad_scale", "noise_space",
                                                    "label_smoothing")})
    if "eps" in o:
        out["eps"] = float(o["eps"])
        out["step_size"] = loss.step_for(float(loss.options.eps))
    if cfg.loss == "afat":
        out.update(corruptor_lr=o["lr"], corruptor_momentum=o["momentum"], corruptor_weight_decay=o["weight_decay"],
                   corruptor_clip=o["grad_clip"])
    return out


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_recipe_equals_its_reference_field_by_field(name):
    got = _resolved(name)
    for key, want in REFERENCES[name].items():
        have = got[key]
        if isinstance(want, float):
            assert have == pytest.approx(want, rel=1e-12), key
        elif isinstance(want, tuple):
            assert tuple(have) == pytest.approx(want), key
        else:
            assert have == want, key


def test_light_at_alone_leaves_its_warmups():
    cfg = TrainConfig.from_dict({"recipe": "light-at", "model": "m", "data": "d", "out": "o"})
    assert cfg.recipe == "light_at" and cfg.epochs + cfg.cooldown_epochs == 110
    assert cfg.epochs > cfg.warmup_epochs and cfg.epochs > cfg.eps_warmup_epochs


def test_hyphenated_recipe_names_are_aliases():
    for alias, name in [("light-at", "light_at"), ("trades-finetune", "trades_finetune"),
                        ("light-at-cifar", "light_at_cifar")]:
        assert get_recipe(alias) is get_recipe(name)
    assert "light-at" not in list_recipes()


@pytest.mark.parametrize("name", ["light_at", "light_at_cifar", "trades_finetune", "afat", "deit", "mpp"])
def test_config_dumps_to_yaml_and_reloads_identically(tmp_path, name):
    cfg = TrainConfig.from_dict({"recipe": name, "model": "m", "data": "d", "out": "o",
                                 "loss_options": {"seed": 3} if name != "mpp" else {}})
    cfg.save(tmp_path / "c.yaml")
    again = TrainConfig.load(tmp_path / "c.yaml")
    assert again == cfg
    assert yaml.safe_load(yaml.safe_dump(cfg.to_dict())) == cfg.to_dict()


def test_config_fields_are_typed_with_one_line_errors():
    cfg = TrainConfig.from_dict({"model": "m", "data": "d", "out": "o", "epochs": "3", "crop_scale": "0.2+1",
                                 "attack_mode": "train"})
    assert cfg.epochs == 3 and cfg.crop_scale == (0.2, 1.0) and cfg.attack_mode == "train"
    with pytest.raises(RobustvitError, match="attack_mode") as e:
        TrainConfig.from_dict({"model": "m", "data": "d", "out": "o", "attack_mode": "sideways"})
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="crop_scale"):
        TrainConfig(model="m", data="d", out="o", crop_scale=(0.5, 0.2)).validate()


def test_loss_options_go_through_the_options_parser():
    loss = create_loss("trades", eps="8/255", beta="3", forward="concat")
    assert loss.options.eps == pytest.approx(E8) and loss.options.beta == 3.0 and loss.options.forward == "concat"
    with pytest.raises(RobustvitError, match="beta") as e:
        create_loss("trades", beta="many")
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="did you mean"):
        create_loss("afat", lamda=0.1)
    assert math.isclose(create_loss("trades").step_for(0.031), 0.007)


def test_bad_loss_options_are_refused_by_validate_in_one_line():
    cfg = TrainConfig(model="m", data="d", out="o", loss="trades", loss_options={"beta": "lots"})
    with pytest.raises(RobustvitError, match="beta") as e:
        cfg.validate()
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="no option 'gamma'"):
        TrainConfig(model="m", data="d", out="o", loss="pgd_at", loss_options={"gamma": 1}).validate()
    with pytest.raises(RobustvitError, match="unknown training loss"):
        TrainConfig(model="m", data="d", out="o", loss="nope").validate()
