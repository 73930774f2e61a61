"""``TrainConfig``: every setting of a training run; saved as ``config.yaml`` next to its results.

Precedence when a run is set up: the dataclass defaults < the recipe (``recipe``, :mod:`.recipes`) < a
YAML file (``--config``) < command-line flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from robustvit.errors import RobustvitError
from robustvit.options import options_dict, parse_options
from robustvit.training.schedules import check_schedule

LR_SCALINGS = ("linear", "sqrt")
SELECT_BEST = ("clean", "robust")


@dataclass
class TrainConfig:
    model: str
    data: str
    out: str
    recipe: str | None = None        # the recipe whose settings this config started from (saved for the record)
    epochs: int = 10                 # epochs of the learning-rate schedule (warm-up + cosine)
    cooldown_epochs: int = 0         # further epochs at min_lr after the schedule (timm's cooldown_epochs)
    batch_size: int = 128            # images per optimizer step and process (global batch = batch_size × processes)
    lr: float = 1e-3                 # peak learning rate (AdamW), reached after the warm-up
    lr_batch_ref: int | None = None  # if set, lr is for this global batch and is rescaled to the actual one
    lr_scaling: str = "linear"       # rescaling rule with lr_batch_ref: linear or sqrt
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    warmup_lr: float = 0.0           # learning rate the linear warm-up starts from (timm's warmup_lr)
    label_smoothing: float | None = None  # None: the loss's default (0.1 for ce/pgd_at/fgsm_rs/afat, 0 for trades)
    drop_path: float = 0.0           # stochastic depth rate (timm ``drop_path_rate``)
    normalize: bool = True           # False: the model sees [0, 1] inputs (mean 0, std 1), as in the light recipe
    mean: tuple[float, float, float] | None = None  # normalisation inside the model (None: the model's own)
    std: tuple[float, float, float] | None = None
    crop_padding: int = 4            # random crop after zero padding (0 = off; ignored with crop_scale)
    crop_scale: tuple[float, float] | None = None    # RandomResizedCrop area range, e.g. (0.08, 1.0) (None = off)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # RandomResizedCrop aspect-ratio range
    flip: bool = True                # random horizontal flip
    color_jitter: float = 0.0        # ColorJitter brightness = contrast = saturation strength (0 = off)
    rotation: float = 0.0            # random rotation by U(−r, r) degrees (0 = off)
    rand_augment: str | None = None  # timm RandAugment config string, e.g. rand-m9-mstd0.5-inc1
    mixup: float = 0.0               # timm Mixup alpha (0 = off)
    cutmix: float = 0.0              # timm CutMix alpha (0 = off)
    random_erasing: float = 0.0      # timm RandomErasing probability (0 = off)
    loss: str = "ce"
    loss_options: dict[str, Any] = field(default_factory=dict)
    eps: str | None = None           # adversarial budget, e.g. "4/255" (None: the loss's default)
    attack_steps: int | None = None  # inner attack steps K (None: the loss's default)
    eps_schedule: str | None = None  # constant or linear (ε warm-up)
    eps_warmup_epochs: float | None = None
    attack_mode: Literal["eval", "train"] | None = None  # model mode of the inner attack (None: the loss's, eval)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    pretrained: bool = False         # fine-tuning: start from the architecture's pretrained weights
    weights: str | None = None       # … or from a .safetensors/.pth state dict of the architecture
    img_size: int | None = None      # fine-tuning: new input resolution (position embeddings resampled)
    patch_size: int | None = None    # fine-tuning: new patch size (linear projection resampled / conv stem strides)
    pos_embed_interp: str = "bicubic"  # bicubic (DeiT's, not antialiased) or linear
    val_data: str | None = None
    val_limit: int | None = 1000
    select_best: str | None = None   # keep the best epoch by "robust" or "clean" validation accuracy
    val_attack: str = "pgd"          # robust validation attack (pgd or fgsm)
    val_eps: str = "4/255"
    val_attack_steps: int = 10
    seed: int = 0
    device: str = "auto"
    amp: bool = True                 # bf16 autocast on CUDA (ignored on CPU)
    channels_last: bool = False
    accum_steps: int = 1             # gradient accumulation: micro-batches per optimizer step
    ema_decay: float | None = None   # timm ModelEmaV3; validation and checkpoint/ then use the EMA weights
    workers: int = 0
    grad_clip: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (tuples as lists): JSON/YAML-ready; ``from_dict`` reads it back equal."""
        return options_dict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> "TrainConfig":
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise RobustvitError(f"cannot read config {path} ({e})") from None
        return cls.from_dict(data, str(path), overrides)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config",
                  overrides: dict[str, Any] | None = None) -> "TrainConfig":
        """Defaults < the recipe named in ``values``/``overrides`` < ``values`` < ``overrides`` (None skipped)."""
        from robustvit.training.recipes import get_recipe

        data = {**values, **{k: v for k, v in (overrides or {}).items() if v is not None}}
        unknown = set(data) - cls.field_names()
        if unknown:
            raise RobustvitError(f"{source} has unknown key {sorted(unknown)[0]!r}")
        recipe = data.get("recipe")
        if recipe:
            r = get_recipe(recipe)
            data["recipe"] = r.name
            merged = {**r.settings, **data}
        else:
            merged = data
        missing = [k for k in ("model", "data", "out") if merged.get(k) is None]
        if missing:
            raise RobustvitError(f"training needs {', '.join('--' + m for m in missing)} (or --config FILE)")
        return parse_options(cls, merged, what=source)

    def loss_kwargs(self) -> dict[str, Any]:
        """The keywords the loss is built with: the shared fields it takes (ε, steps, schedule, attack mode, label
        smoothing, seed; unset ones skipped), overridden by ``loss_options``."""
        from robustvit.training.losses import loss_keywords

        shared = {"eps": self.eps, "attack_steps": self.attack_steps, "eps_schedule": self.eps_schedule,
                  "eps_warmup_epochs": self.eps_warmup_epochs, "label_smoothing": self.label_smoothing,
                  "seed": self.seed, "attack_mode": self.attack_mode}
        accepted = loss_keywords(self.loss)
        opts = {k: v for k, v in shared.items() if v is not None and (accepted is None or k in accepted)}
        return {**opts, **self.loss_options}

    def validate(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.accum_steps < 1:
            raise RobustvitError("epochs, batch size and accum steps must be >= 1")
        if self.accum_steps > self.batch_size:
            raise RobustvitError(f"accum_steps {self.accum_steps} exceeds the batch size {self.batch_size}")
        if self.lr <= 0:
            raise RobustvitError(f"lr must be > 0, got {self.lr}")
        if self.lr_scaling not in LR_SCALINGS:
            raise RobustvitError(f"lr_scaling must be one of {', '.join(LR_SCALINGS)}, got {self.lr_scaling!r}")
        if self.select_best is not None and self.select_best not in SELECT_BEST:
            raise RobustvitError(f"select_best must be one of {', '.join(SELECT_BEST)}, got {self.select_best!r}")
        if self.select_best and not self.val_data:
            raise RobustvitError("select_best needs validation data; pass --val-data (a held-out split)")
        if self.val_attack not in ("pgd", "fgsm"):
            raise RobustvitError(f"val_attack must be pgd or fgsm, got {self.val_attack!r}")
        if self.eps_schedule is not None:
            check_schedule(self.eps_schedule)
        from robustvit.training.losses import LOSSES, parse_loss_options

        from robustvit.options import NoOptions

        if getattr(LOSSES.get(self.loss), "Options", NoOptions) is not NoOptions:
            parse_loss_options(self.loss, self.loss_kwargs())     # one-line errors before any data is read
        if (self.mixup > 0 or self.cutmix > 0) and not getattr(LOSSES.get(self.loss), "soft_targets", False):
            takes = ", ".join(n for n, c in LOSSES.items() if getattr(c, "soft_targets", False))
            raise RobustvitError(f"MixUp/CutMix give soft targets, which the {self.loss!r} loss does not take "
                                 f"(losses that do: {takes})")
        if self.crop_scale is not None and not 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1:
            raise RobustvitError(f"crop_scale must be two numbers 0 < lo <= hi <= 1, got {self.crop_scale}")
        if self.cooldown_epochs < 0 or self.color_jitter < 0 or self.rotation < 0:
            raise RobustvitError("cooldown_epochs, color_jitter and rotation must be >= 0")
        if self.pos_embed_interp not in ("bicubic", "linear"):
            raise RobustvitError(f"pos_embed_interp must be bicubic or linear, got {self.pos_embed_interp!r}")

    def effective_lr(self, world_size: int = 1) -> float:
        """``lr`` rescaled from ``lr_batch_ref`` to the global batch (linear: × B/ref; sqrt: × √(B/ref))."""
        if not self.lr_batch_ref:
            return self.lr
        r = self.batch_size * world_size / self.lr_batch_ref
        return self.lr * (r if self.lr_scaling == "linear" else r ** 0.5)
