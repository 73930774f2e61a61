"""Training recipes: named, typed sets of :class:`~robustvit.training.config.TrainConfig` fields, each equal to
the configuration its source released (``tests/training/test_recipes.py`` checks every field against the
reference; sources cited in ``docs/training.md``). ``robustvit train --recipe light_at …`` starts from one; YAML
and flags override its fields. Hyphenated spellings (``light-at``) are aliases.

* ``light_at``: Debenedetti, "A Light Recipe to Train Robust Vision Transformers" (arXiv:2209.07399;
  dedeswim/vits-robustness-torch ``configs/xcit-adv-training.yaml``): PGD-1 at ε = 4/255 on [0, 1] inputs.
* ``light_at_cifar``: the same with CIFAR's pad-4 crop instead of RandomResizedCrop (not a released config).
* ``trades_finetune``: Debenedetti's CIFAR fine-tuning (``configs/xcit-adv-finetuning.yaml``), TRADES at 8/255.
* ``afat``: RSPC's training of AFAT (guoyongcs/RSPC ``RSPC_FAN/train_script.sh``, FAN-T), with the corruption
  model's AMP-scaled step.
* ``deit``: Touvron et al., DeiT (arXiv:2012.12877).
* ``mpp``: masked patch prediction (Dosovitskiy et al., arXiv:2010.11929, App. B.1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robustvit.registry import Registry

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2471, 0.2435, 0.2616)


@dataclass(frozen=True)
class Recipe:
    """A named set of TrainConfig fields (``settings``) with its source (``reference``)."""

    name: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    reference: str = ""
    aliases: tuple[str, ...] = ()


RECIPES: Registry[Recipe] = Registry("recipe", hint="see `robustvit list recipes`")


def register_recipe(recipe: Recipe) -> Recipe:
    """Register ``recipe`` under its name and aliases. Its settings are TrainConfig fields, checked against
    their declared types and bounds when a config starts from it (:meth:`TrainConfig.from_dict`)."""
    RECIPES.add(recipe.name, recipe)
    return recipe


_LIGHT = {
    "lr": 5e-4, "lr_batch_ref": 512, "lr_scaling": "linear", "min_lr": 1e-5, "weight_decay": 0.5,
    "epochs": 100, "cooldown_epochs": 10, "warmup_epochs": 10, "warmup_lr": 1e-6, "drop_path": 0.05,
    "label_smoothing": 0.1, "crop_scale": (0.08, 1.0), "crop_ratio": (3 / 4, 4 / 3), "flip": True,
    "color_jitter": 0.4, "rotation": 0.0, "rand_augment": None, "mixup": 0.0, "cutmix": 0.0, "random_erasing": 0.0,
    "normalize": False, "loss": "pgd_at", "eps": "4/255", "attack_steps": 1, "eps_schedule": "linear",
    "eps_warmup_epochs": 10, "select_best": "robust", "val_attack": "pgd", "val_eps": "4/255"}

register_recipe(Recipe("light_at", "Debenedetti's light recipe for adversarial training on ImageNet (arXiv:2209.07399)",
                       _LIGHT, "dedeswim/vits-robustness-torch configs/xcit-adv-training.yaml", aliases=("light-at",)))
register_recipe(Recipe("light_at_cifar", "The light recipe with CIFAR's pad-4 crop instead of RandomResizedCrop",
                       {**_LIGHT, "crop_scale": None, "crop_padding": 4}, "robustvit (after light_at)",
                       aliases=("light-at-cifar",)))
register_recipe(Recipe("trades_finetune", "Debenedetti's robust CIFAR fine-tuning with TRADES", {
    "lr": 2e-4, "lr_batch_ref": 512, "lr_scaling": "sqrt", "min_lr": 5e-6, "weight_decay": 0.5, "epochs": 20,
    "cooldown_epochs": 2, "warmup_epochs": 5, "warmup_lr": 1e-6, "label_smoothing": 0.0, "drop_path": 0.05,
    "loss": "trades", "loss_options": {"beta": 6.0, "step_size": 1.5 * 8 / 255 / 10}, "eps": "8/255",
    "attack_steps": 10, "eps_schedule": "constant", "crop_padding": 4, "crop_scale": None, "flip": True,
    "color_jitter": 0.25, "rotation": 2.0, "normalize": True, "mean": CIFAR10_MEAN, "std": CIFAR10_STD,
    "select_best": "robust", "val_eps": "8/255"},
    "dedeswim/vits-robustness-torch configs/xcit-adv-finetuning.yaml", aliases=("trades-finetune",)))
register_recipe(Recipe("afat", "AFAT as RSPC trains it: feature alignment against the learned patch-corruption model", {
    "loss": "afat", "loss_options": {"lam": 0.005, "rho": 0.1, "lr": 1e-4, "momentum": 0.9, "weight_decay": 0.05,
                                     "grad_clip": 5.0, "step_rule": "rspc", "noise_space": "normalized"},
    "lr": 20e-4, "lr_batch_ref": 2048, "lr_scaling": "linear", "min_lr": 1e-6, "weight_decay": 0.05,
    "epochs": 300, "warmup_epochs": 5, "warmup_lr": 1e-6, "drop_path": 0.1, "label_smoothing": 0.1,
    "rand_augment": "rand-m9-mstd0.5-inc1", "mixup": 0.8, "cutmix": 1.0, "random_erasing": 0.3,
    "ema_decay": 0.99992, "crop_scale": (0.08, 1.0), "crop_ratio": (3 / 4, 4 / 3), "flip": True, "color_jitter": 0.0,
    "normalize": True},
    "guoyongcs/RSPC RSPC_FAN/train_script.sh"))
register_recipe(Recipe("deit", "DeiT's data-efficient recipe with timm's augmentations (arXiv:2012.12877)", {
    "lr": 5e-4, "lr_batch_ref": 512, "lr_scaling": "linear", "weight_decay": 0.05, "warmup_epochs": 5,
    "drop_path": 0.1, "label_smoothing": 0.1, "rand_augment": "rand-m9-mstd0.5-inc1", "mixup": 0.8,
    "cutmix": 1.0, "random_erasing": 0.25, "loss": "ce"}, "facebookresearch/deit main.py defaults"))
register_recipe(Recipe("mpp", "Masked patch prediction pre-training (ViT paper, App. B.1.2): 3-bit mean colour of "
                       "50 % corrupted patches", {
    "loss": "mpp", "lr": 2e-4, "warmup_epochs": 1, "weight_decay": 0.05, "label_smoothing": 0.0,
    "crop_padding": 4, "flip": True}, "Dosovitskiy et al., arXiv:2010.11929, App. B.1.2"))


def list_recipes(pattern: str | None = None) -> list[str]:
    """Registered recipe names (``afat``, ``deit``, ``light_at``, ``light_at_cifar``, ``mpp``, ``trades_finetune``)."""
    return RECIPES.list(pattern)


def get_recipe(name: str) -> Recipe:
    return RECIPES.get(name)
