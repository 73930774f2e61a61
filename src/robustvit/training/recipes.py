"""Training recipes: named, typed sets of :class:`~robustvit.training.config.TrainConfig` fields.

``robustvit train --recipe light-at --model … --data … --out …`` starts from the recipe's settings; any
field can be overridden from a YAML config or the command line, and the resulting TrainConfig (with
``recipe``) is saved as ``config.yaml`` with the run.

* ``light-at`` — Debenedetti, "A Light Recipe to Train Robust Vision Transformers" (arXiv:2209.07399):
  AdamW, weight decay 0.5, lr 5e-4 × batch/512, cosine with warm-up, drop-path 0.05, label smoothing 0.1,
  crop + flip only (no RandAugment/MixUp/CutMix/RandomErasing), [0, 1] inputs without normalisation,
  PGD-1 adversarial training (step 1.5·ε) at ε = 4/255 with a linear ε warm-up, best epoch by robust
  validation accuracy.
* ``deit`` — Touvron et al., DeiT (arXiv:2012.12877): timm's RandAugment rand-m9-mstd0.5-inc1, MixUp 0.8,
  CutMix 1.0, RandomErasing 0.25, label smoothing 0.1, drop-path 0.1, AdamW lr 5e-4 × batch/512, wd 0.05.
* ``trades-finetune`` — Debenedetti's CIFAR fine-tuning: TRADES (β = 6), ε = 8/255, PGD-10, 20 epochs,
  lr 2e-4 · √(batch/512), wd 0.5, pad-4 crop + flip, normalisation inside the model.
* ``afat`` — min-max feature-alignment training (λ = 0.005, ρ = 0.1; :mod:`robustvit.training.afat`)
  on top of a standard crop + flip recipe.
* ``mpp`` — masked patch prediction, the ViT paper's self-supervised pre-training (Dosovitskiy et al.,
  arXiv:2010.11929, App. B.1.2; :mod:`robustvit.training.mpp`): 50 % of the patch embeddings corrupted
  (80/10/10), 3-bit mean colour targets, Adam(W) with lr 2e-4, linear warm-up and cosine decay as in the
  paper; crop + flip, no label smoothing. Fine-tune the resulting checkpoint with ``robustvit finetune``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robustvit.registry import Registry


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)


RECIPES: Registry[Recipe] = Registry("recipe", hint="see `robustvit list recipes`")

RECIPES.register(Recipe("light-at", "Debenedetti's light recipe for adversarial training (arXiv:2209.07399)", {
    "lr": 5e-4, "lr_batch_ref": 512, "lr_scaling": "linear", "min_lr": 1e-5, "weight_decay": 0.5,
    "warmup_epochs": 10, "drop_path": 0.05, "label_smoothing": 0.1, "crop_padding": 4, "flip": True,
    "normalize": False, "loss": "pgd_at", "eps": "4/255", "attack_steps": 1, "eps_schedule": "linear",
    "eps_warmup_epochs": 10, "select_best": "robust", "val_attack": "pgd", "val_eps": "4/255"}))
RECIPES.register(Recipe("deit", "DeiT's data-efficient recipe with timm's augmentations (arXiv:2012.12877)", {
    "lr": 5e-4, "lr_batch_ref": 512, "lr_scaling": "linear", "weight_decay": 0.05, "warmup_epochs": 5,
    "drop_path": 0.1, "label_smoothing": 0.1, "rand_augment": "rand-m9-mstd0.5-inc1", "mixup": 0.8,
    "cutmix": 1.0, "random_erasing": 0.25, "loss": "ce"}))
RECIPES.register(Recipe("trades-finetune", "Debenedetti's robust CIFAR fine-tuning with TRADES", {
    "lr": 2e-4, "lr_batch_ref": 512, "lr_scaling": "sqrt", "weight_decay": 0.5, "epochs": 20,
    "warmup_epochs": 1, "loss": "trades", "eps": "8/255", "attack_steps": 10, "eps_schedule": "constant",
    "crop_padding": 4, "flip": True, "select_best": "robust", "val_eps": "8/255"}))
RECIPES.register(Recipe("afat", "Min-max feature-alignment training with the learned patch-corruption model", {
    "loss": "afat", "loss_options": {"lam": 0.005, "rho": 0.1}, "weight_decay": 0.05, "label_smoothing": 0.1,
    "crop_padding": 4, "flip": True}))

RECIPES.register(Recipe("mpp", "Masked patch prediction pre-training (ViT paper, App. B.1.2): 3-bit mean colour of "
                        "50 % corrupted patches", {
    "loss": "mpp", "lr": 2e-4, "warmup_epochs": 1, "weight_decay": 0.05, "label_smoothing": 0.0,
    "crop_padding": 4, "flip": True}))


def list_recipes(pattern: str | None = None) -> list[str]:
    """Registered recipe names (``light-at``, ``deit``, ``trades-finetune``, ``afat``, ``mpp``)."""
    return RECIPES.list(pattern)


def get_recipe(name: str) -> Recipe:
    return RECIPES.get(name)
