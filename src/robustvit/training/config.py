"""``TrainConfig``: every setting of a training run; saved as ``config.yaml`` next to its results.

Precedence when a run is set up: the dataclass defaults < the recipe (``recipe``, :mod:`.recipes`) < a
YAML file (``--config``) < command-line flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from robustvit.errors import RobustvitError
from robustvit.options import NoOptions, option, options_dict, parse_options, parse_spec
from robustvit.training.recipes import get_recipe
from robustvit.training.schedules import EpsSchedule


@dataclass
class TrainConfig:
    """Every setting of a training run; ``robustvit train`` has one flag per field, generated from its help,
    ``option`` bounds and ``Literal`` choices."""

    model: str = option(help="timm name, robustvit architecture, or checkpoint folder (fine-tuning)")
    data: str = option(help="data spec, e.g. synthshapes:train or folder:/path/train")
    out: str = option(help="output folder")
    task: Literal["classify", "segment"] = option(
        "classify", help="classify, or segment: --model is then the backbone of a segmentation model, --data a "
        "data set with masks (e.g. synthshapes:train,masks=1); see docs/dense.md")
    limit: int | None = option(None, min=1, help="train on a seeded class-stratified sample of this many images "
                               "of data (as eval's --limit; seeded by seed; none: all)")
    recipe: str | None = option(None, help="start from a recipe (see `robustvit list recipes`); flags override "
                                "its fields")
    epochs: int = option(10, min=1, help="epochs of the learning-rate schedule (warm-up + cosine)")
    cooldown_epochs: int = option(0, min=0, help="further epochs at min_lr after the schedule (timm's cooldown)")
    batch_size: int = option(128, min=1, help="images per optimizer step and process (× processes: global)")
    lr: float = option(1e-3, min=0, help="peak learning rate (AdamW), reached after the warm-up; > 0")
    lr_batch_ref: int | None = option(None, min=1, help="lr is for this global batch; rescaled to the actual one")
    lr_scaling: Literal["linear", "sqrt"] = option("linear", help="rescaling rule with lr_batch_ref")
    min_lr: float = option(1e-5, min=0, help="learning rate at the end of the cosine decay")
    weight_decay: float = option(0.05, min=0, help="AdamW weight decay")
    warmup_epochs: float = option(1.0, min=0, help="epochs of the linear learning-rate warm-up")
    warmup_lr: float = option(0.0, min=0, help="learning rate the warm-up starts from (timm's warmup_lr)")
    label_smoothing: float | None = option(None, min=0, max=1, help="label smoothing (none: the loss's default, "
                                           "0.1 for ce/pgd_at/fgsm_rs/afat, 0 for trades)")
    drop_path: float = option(0.0, min=0, max=1, help="stochastic depth rate (timm drop_path_rate)")
    normalize: bool = option(True, help="normalise inside the model; off: the model sees [0, 1] inputs (mean 0, "
                             "std 1), as the light recipe")
    mean: tuple[float, float, float] | None = option(None, help="mean inside the model (none: the model's own)")
    std: tuple[float, float, float] | None = option(None, help="std inside the model (none: the model's own)")
    crop_padding: int = option(4, min=0, help="random crop after zero padding (0 = off; ignored with crop_scale)")
    crop_scale: tuple[float, float] | None = option(None, min=0, max=1, help="RandomResizedCrop area range "
                                                    "0 < lo <= hi <= 1, e.g. [0.08, 1.0] (none = off)")
    crop_ratio: tuple[float, float] = option((3 / 4, 4 / 3), min=0, help="RandomResizedCrop aspect-ratio range")
    flip: bool = option(True, help="random horizontal flip")
    color_jitter: float = option(0.0, min=0, help="ColorJitter brightness = contrast = saturation (0 = off)")
    rotation: float = option(0.0, min=0, help="random rotation by U(-r, r) degrees (0 = off)")
    rand_augment: str | None = option(None, help="timm RandAugment config string, e.g. rand-m9-mstd0.5-inc1")
    mixup: float = option(0.0, min=0, help="timm Mixup alpha (0 = off)")
    cutmix: float = option(0.0, min=0, help="timm CutMix alpha (0 = off)")
    random_erasing: float = option(0.0, min=0, max=1, help="timm RandomErasing probability (0 = off)")
    loss: str = option("ce", help="training loss, name[:key=value…] (see `robustvit list losses`)")
    loss_options: dict[str, Any] = option(default_factory=dict, help="the loss's options (--loss-option K=V)")
    eps: str | None = option(None, help="adversarial training budget, e.g. 4/255 (none: the loss's default)")
    attack_steps: int | None = option(None, min=1, help="steps of the inner attack (pgd_at, trades; none: the "
                                      "loss's default)")
    eps_schedule: EpsSchedule | None = option(None, help="ε warm-up schedule (none: the loss's default)")
    eps_warmup_epochs: float | None = option(None, min=0, help="epochs of the linear ε warm-up")
    attack_mode: Literal["eval", "train"] | None = option(None, help="model mode of the inner attack (none: "
                                                          "the loss's, eval)")
    model_kwargs: dict[str, Any] = option(default_factory=dict, help="JSON dict passed to the architecture, "
                                          "e.g. '{\"depth\": 4}'")
    pretrained: bool = option(False, help="start from the architecture's pretrained timm weights (Hugging Face "
                              "hub or its cache; a head of another class count is replaced)")
    weights: str | None = option(None, help="start from a .safetensors/.pth state dict of the architecture")
    img_size: int | None = option(None, min=1, help="fine-tuning: new input resolution (pos. embeddings resampled)")
    patch_size: int | None = option(None, min=1, help="fine-tuning: new patch size (linear projection resampled; "
                                    "conv-stem strides)")
    pos_embed_interp: Literal["bicubic", "linear"] = option("bicubic", help="fine-tuning: position-embedding "
                                                            "resampling (bicubic as DeiT, not antialiased)")
    val_data: str | None = option(None, help="data spec evaluated after every epoch (a held-out split)")
    val_limit: int | None = option(1000, min=1, help="validate on a seeded class-stratified sample of this many "
                                   "images (none: all)")
    select_best: Literal["clean", "robust"] | None = option(None, help="keep the epoch with the best validation "
                                                            "accuracy (clean or robust)")
    val_attack: Literal["pgd", "fgsm"] = option("pgd", help="attack of the robust validation")
    val_eps: str = option("4/255", help="ε of the robust validation")
    val_attack_steps: int = option(10, min=1, help="steps of the robust validation's PGD")
    seed: int = option(0, help="seed of initialisation, data order, augmentation, attacks and the validation "
                       "sample")
    device: str = option("auto", help="auto, cpu, cuda or cuda:N")
    amp: bool = option(True, help="bf16 autocast on CUDA (ignored on CPU)")
    channels_last: bool = option(False, help="channels_last memory format")
    accum_steps: int = option(1, min=1, help="gradient accumulation: micro-batches per optimizer step")
    ema_decay: float | None = option(None, min=0, max=1, help="timm ModelEmaV3 decay (validated and saved)")
    workers: int = option(0, min=0, help="data-loading worker processes")
    grad_clip: float | None = option(None, min=0, help="clip the gradient norm to this value")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (tuples as lists): JSON/YAML-ready; ``from_dict`` reads it back equal."""
        return options_dict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

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
        """Defaults < the recipe named in ``values``/``overrides`` < ``values`` < ``overrides`` (None skipped);
        an unknown key or a bad value is a one-line error naming ``source``."""
        data = {**values, **{k: v for k, v in (overrides or {}).items() if v is not None}}
        merged = data
        if data.get("recipe"):
            recipe = get_recipe(data["recipe"])
            data["recipe"] = recipe.name
            merged = {**recipe.settings, **data}
        missing = [k for k in ("model", "data", "out") if merged.get(k) is None]
        if missing:
            raise RobustvitError(f"training needs {', '.join('--' + m for m in missing)} (or --config FILE)")
        if isinstance(merged.get("loss"), str) and ":" in merged["loss"]:     # --loss name:key=value… (spec grammar)
            name, opts = parse_spec(merged["loss"], "training loss")
            merged = {**merged, "loss": name, "loss_options": {**opts, **(merged.get("loss_options") or {})}}
        return parse_options(cls, merged, what=source)

    def loss_kwargs(self) -> dict[str, Any]:
        """The keywords the loss is built with: the shared fields it takes (unset ones skipped), then
        ``loss_options``."""
        from robustvit.training.losses import loss_keywords

        shared = {"eps": self.eps, "attack_steps": self.attack_steps, "eps_schedule": self.eps_schedule,
                  "eps_warmup_epochs": self.eps_warmup_epochs, "label_smoothing": self.label_smoothing,
                  "seed": self.seed, "attack_mode": self.attack_mode}
        accepted = loss_keywords(self.loss)
        opts = {k: v for k, v in shared.items() if v is not None and (accepted is None or k in accepted)}
        return {**opts, **self.loss_options}

    def validate(self) -> None:
        """The declared types, choices and bounds (also for a config built in Python), then what involves
        several fields; one-line errors before any data is read."""
        parse_options(type(self), self.to_dict(), what="training config")
        if self.lr <= 0:
            raise RobustvitError(f"training config: lr={self.lr!r} is out of range (lr must be > 0)")
        if self.accum_steps > self.batch_size:
            raise RobustvitError(f"accum_steps {self.accum_steps} exceeds the batch size {self.batch_size}")
        if self.select_best and not self.val_data:
            raise RobustvitError("select_best needs validation data; pass --val-data (a held-out split)")
        if self.crop_scale is not None and not 0 < self.crop_scale[0] <= self.crop_scale[1]:
            raise RobustvitError(f"crop_scale must be two numbers 0 < lo <= hi <= 1, got {self.crop_scale}")
        from robustvit.training.losses import LOSSES, parse_loss_options

        loss = LOSSES.get(self.loss)
        if getattr(loss, "Options", NoOptions) is not NoOptions:
            parse_loss_options(self.loss, self.loss_kwargs())     # one-line errors before any data is read
        if (self.mixup > 0 or self.cutmix > 0) and not getattr(loss, "soft_targets", False):
            takes = ", ".join(n for n, c in LOSSES.items() if getattr(c, "soft_targets", False))
            raise RobustvitError(f"MixUp/CutMix give soft targets, which the {self.loss!r} loss does not take "
                                 f"(losses that do: {takes})")

    def effective_lr(self, world_size: int = 1) -> float:
        """``lr`` rescaled from ``lr_batch_ref`` to the global batch (linear: × B/ref; sqrt: × √(B/ref))."""
        if not self.lr_batch_ref:
            return self.lr
        r = self.batch_size * world_size / self.lr_batch_ref
        return self.lr * (r if self.lr_scaling == "linear" else r ** 0.5)
