"""What a training run learns (``TrainConfig.task``), as a strategy of the one training loop
(:mod:`robustvit.training.trainer`): model, loss, targets, their augmentation, training accuracy and validation.

* ``classify``: any registered loss; logs ``train_acc``; validation ``val_acc`` and, with
  ``select_best="robust"``, ``val_robust_acc`` (:func:`robustvit.metrics.accuracy.robust_correct`).
* ``segment``: a :mod:`robustvit.models.segmenter` model (``--model`` the backbone, ``model_kwargs`` ``head`` /
  ``head_channels`` the head; or a segmentation checkpoint) on a data set with masks. Per-pixel cross-entropy
  ignoring 255 (no label smoothing); the same random crop and flip of image and mask; logs
  ``train_pixel_accuracy``; validation ``val_miou`` and ``val_pixel_accuracy`` (:mod:`robustvit.metrics.dense`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.data import SubsetDataset
from robustvit.errors import RobustvitError
from robustvit.metrics.accuracy import correct, robust_correct
from robustvit.metrics.dense import IGNORE_INDEX, confusion_matrix, segmentation_scores
from robustvit.models import Normalized, create_model, is_checkpoint_dir
from robustvit.models.factory import rebuild
from robustvit.models.finetune import adapt_input, reset_head
from robustvit.models.segmenter import create_segmenter, is_segmenter
from robustvit.training.augment import augment_batch, random_crop_flip
from robustvit.training.config import TrainConfig
from robustvit.training.losses import LossOutput, TrainingLoss, create_loss, hard_labels
from robustvit.utils import derive_seed, eval_mode

#: (batch number, images, targets) as :func:`robustvit.training.trainer.shard_batches` yields them.
Batches = Any


class Task:
    """One kind of training; subclasses set ``name`` and the methods below."""

    name: ClassVar[str]
    #: the metrics.jsonl key of the training accuracy
    train_accuracy: ClassVar[str] = "train_acc"
    #: TrainConfig fields (with the only value the task takes) that the task does not support
    unsupported: ClassVar[dict[str, Any]] = {}

    def __init__(self, cfg: TrainConfig | None = None) -> None:
        self.cfg = cfg          # None: only the methods that read no setting (targets, hits, validation counts)

    def check(self) -> None:
        """One-line errors for settings the task does not take (before any data is read)."""
        for k, default in self.unsupported.items():
            if getattr(self.cfg, k) != default:
                raise RobustvitError(f"{k} is not supported with --task {self.name}; drop it")

    def check_data(self, dataset: Any) -> None:
        """One-line error when ``dataset`` lacks what the task trains on."""

    def build_model(self, dataset: Any) -> Normalized:
        """The model to train on ``dataset`` (a new run)."""

    def build_loss(self) -> TrainingLoss:
        """The training loss."""

    def targets(self, dataset: Any, index: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training targets of the images ``index`` (whose labels are ``labels``)."""
        return labels

    def augment(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A training batch and its targets augmented on the device (``gen`` on ``x.device``)."""

    def hits(self, logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int | torch.Tensor]:
        """(correct predictions, predictions counted) of a training batch, for ``train_accuracy``."""

    def val_counts(self, model: nn.Module, batches: Batches, device: torch.device) -> torch.Tensor:
        """The validation counts of these batches (int64, on ``device``; summed over ranks by the loop)."""

    def val_record(self, counts: torch.Tensor) -> dict[str, Any]:
        """The epoch's validation record from the counts summed over every batch."""

    def score_key(self) -> str:
        """The record's key that ``select_best`` ranks epochs by."""

    def checkpoint_extra(self, model: Normalized) -> dict[str, Any]:
        """What the task adds to a checkpoint's ``spec.json``."""
        return {}


class Classify(Task):
    """Image classification (see the module docstring)."""

    name = "classify"

    def build_model(self, dataset: Any) -> Normalized:
        return build_model(self.cfg, dataset)

    def build_loss(self) -> TrainingLoss:
        return create_loss(self.cfg.loss, **self.cfg.loss_kwargs())

    def augment(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        return augment_batch(x, gen, padding=c.crop_padding, flip=c.flip, crop_scale=c.crop_scale,
                             crop_ratio=c.crop_ratio, rotation=c.rotation, jitter=c.color_jitter), y

    def hits(self, logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        return (logits.argmax(1) == hard_labels(y)).sum(), len(y)

    @property
    def robust(self) -> bool:
        return self.cfg.select_best == "robust"

    def val_counts(self, model: nn.Module, batches: Batches, device: torch.device) -> torch.Tensor:
        """[clean hits, (robust hits,) images]: :func:`~robustvit.metrics.accuracy.correct` and
        :func:`~robustvit.metrics.accuracy.robust_correct` under ``val_attack``; batch b is attacked with the seed
        (``seed``, b), whichever rank runs it."""
        from robustvit.attacks import create_attack

        c = self.cfg
        counts = torch.zeros(3 if self.robust else 2, dtype=torch.int64, device=device)
        kw = {"steps": c.val_attack_steps} if c.val_attack == "pgd" else {}
        with eval_mode(model):
            for b, x, y in batches:
                x, y = x.to(device), y.to(device)
                with torch.no_grad():
                    clean = model(x)
                counts[0] += correct(clean, y).sum()
                if self.robust:
                    seed = derive_seed(c.seed, "val-attack", b) % (2**31 - 1)
                    adv = create_attack(c.val_attack, model, eps=c.val_eps, seed=seed, **kw)(x, y)
                    with torch.no_grad():
                        counts[1] += robust_correct(clean, model(adv), y).sum()
                counts[-1] += len(y)
        return counts

    def val_record(self, counts: torch.Tensor) -> dict[str, Any]:
        c, (*hits, n) = self.cfg, counts.tolist()
        record: dict[str, Any] = {"val_acc": hits[0] / max(n, 1)}
        if self.robust:
            record["val_robust_acc"] = hits[1] / max(n, 1)
            record["val_attack"] = f"{c.val_attack} eps={c.val_eps}" + (f" steps={c.val_attack_steps}"
                                                                        if c.val_attack == "pgd" else "")
        return record

    def score_key(self) -> str:
        return "val_robust_acc" if self.robust else "val_acc"


class PixelCrossEntropy(TrainingLoss):
    """Per-pixel cross-entropy over the mask pixels that are not ``ignore_index`` (255), in fp32."""

    name = "pixel_ce"

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:  # noqa: D102
        logits = model(x)
        return F.cross_entropy(logits.float(), y, ignore_index=IGNORE_INDEX), logits, logits


class Segment(Task):
    """Semantic segmentation (see the module docstring)."""

    name = "segment"
    train_accuracy = "train_pixel_accuracy"
    unsupported = {"mixup": 0.0, "cutmix": 0.0, "random_erasing": 0.0, "rand_augment": None,
                   "eps": None, "img_size": None, "patch_size": None, "crop_scale": None, "rotation": 0.0,
                   "color_jitter": 0.0}

    def check(self) -> None:
        if self.cfg.loss != "ce":
            raise RobustvitError(f"--task segment trains with per-pixel cross-entropy; drop --loss {self.cfg.loss}")
        if self.cfg.select_best == "robust":
            raise RobustvitError("--task segment keeps the best epoch by validation mIoU; use --select-best clean")
        super().check()

    def check_data(self, dataset: Any) -> None:
        if not getattr(dataset, "has_masks", False):
            raise RobustvitError(f"{dataset.spec} has no masks; use a segmentation data set "
                                 "(synthshapes:train,masks=1, cityscapes:ROOT, ade20k:ROOT)")

    def build_model(self, dataset: Any) -> Normalized:
        cfg, k = self.cfg, dataset.num_classes
        if is_checkpoint_dir(cfg.model):
            model = create_model(cfg.model)
            if not is_segmenter(model):
                raise RobustvitError(f"{cfg.model} is not a segmentation checkpoint; give a backbone name instead")
            if model.spec.num_classes != k:
                raise RobustvitError(f"{cfg.model} predicts {model.spec.num_classes} classes but the data has {k}")
        else:
            kwargs = dict(cfg.model_kwargs)
            head, head_channels = kwargs.pop("head", "setr_naive"), int(kwargs.pop("head_channels", 256))
            if cfg.drop_path > 0:
                kwargs.setdefault("drop_path_rate", cfg.drop_path)
            model = create_segmenter(cfg.model, k, head=head, head_channels=head_channels, pretrained=cfg.pretrained,
                                     **kwargs)
            if not cfg.normalize:
                set_normalisation(model, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
        model.spec.class_names = list(dataset.classes)
        return model

    def build_loss(self) -> TrainingLoss:
        return PixelCrossEntropy()

    def targets(self, dataset: Any, index: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(dataset, SubsetDataset):       # the validation sample: masks of the images it holds
            dataset, index = dataset.ds, dataset.indices[index]
        return dataset.get_masks(index)

    def augment(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return crop_flip(x, y, self.cfg.crop_padding, self.cfg.flip, gen)

    def hits(self, logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        valid = y != IGNORE_INDEX
        return ((logits.argmax(1) == y) & valid).sum(), valid.sum()

    def val_counts(self, model: nn.Module, batches: Batches, device: torch.device) -> torch.Tensor:
        """The (K, K) confusion matrix (:func:`~robustvit.metrics.dense.confusion_matrix`), flattened."""
        k = int(model.spec.num_classes)
        conf = torch.zeros(k * k, dtype=torch.int64, device=device)
        with eval_mode(model), torch.no_grad():
            for _, x, m in batches:
                conf += confusion_matrix(model(x.to(device)).argmax(1), m.to(device), k).flatten()
        return conf

    def val_record(self, counts: torch.Tensor) -> dict[str, Any]:
        k = int(round(len(counts) ** 0.5))
        s = segmentation_scores(counts.cpu().view(k, k))
        return {"val_miou": s["miou"], "val_pixel_accuracy": s["pixel_accuracy"]}

    def score_key(self) -> str:
        return "val_miou"

    def checkpoint_extra(self, model: Normalized) -> dict[str, Any]:
        net = model.net
        return {"task": "segment", "head": {"name": net.head_name, "backbone": net.backbone_name,
                                            "head_channels": model.spec.kwargs.get("head_channels")}}


TASKS: dict[str, type[Task]] = {t.name: t for t in (Classify, Segment)}


def create_task(cfg: TrainConfig) -> Task:
    return TASKS[cfg.task](cfg)


def crop_flip(x: torch.Tensor, m: torch.Tensor, padding: int, flip: bool, gen: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random crop (padded mask pixels 255, ignored) and flip of images (N, 3, H, W) and masks (N, H, W):
    :func:`random_crop_flip` of the mask + 1 stacked as a fourth channel (so that padding reads 0)."""
    both = torch.cat([x, (m.to(x.dtype) + 1)[:, None]], dim=1)
    both = random_crop_flip(both, gen, padding, flip)
    mask = both[:, 3].round().long() - 1
    return both[:, :3], torch.where(mask < 0, torch.full_like(mask, IGNORE_INDEX), mask)


# ---- classification models -----------------------------------------------------------------------------
def build_model(cfg: TrainConfig, dataset: Any) -> Normalized:
    """The model to train. A checkpoint or pretrained model with another class count gets a new zero-initialised
    head (the ViT fine-tuning recipe, Dosovitskiy et al.); ``img_size``/``patch_size`` adapt its input."""
    kwargs = dict(cfg.model_kwargs)
    if cfg.drop_path > 0:
        kwargs.setdefault("drop_path_rate", cfg.drop_path)
    if is_checkpoint_dir(cfg.model):
        model = create_model(cfg.model)
        if kwargs:                       # fine-tuning keeps the checkpoint's settings and adds drop-path etc.
            model = rebuild(model, **kwargs)
    elif cfg.pretrained or cfg.weights:
        model = create_model(cfg.model, pretrained=cfg.pretrained, checkpoint=cfg.weights, **kwargs)
    else:
        kwargs.setdefault("num_classes", dataset.num_classes)
        model = create_model(cfg.model, **kwargs)
    if model.spec.num_classes != dataset.num_classes:
        reset_head(model, dataset.num_classes)
    if cfg.img_size is not None or cfg.patch_size is not None:
        adapt_input(model, cfg.img_size, cfg.patch_size, cfg.pos_embed_interp)
    if not cfg.normalize:
        set_normalisation(model, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))   # [0, 1] pixels (Debenedetti's light recipe)
    elif cfg.mean is not None or cfg.std is not None:
        set_normalisation(model, cfg.mean or model.spec.mean, cfg.std or model.spec.std)
    model.spec.class_names = list(dataset.classes)
    return model


def set_normalisation(model: Normalized, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
    """The normalisation inside the model (e.g. CIFAR-10's mean/std, as Debenedetti's fine-tuning)."""
    model.spec.mean, model.spec.std = tuple(float(m) for m in mean), tuple(float(v) for v in std)
    model.mean.copy_(torch.tensor(model.spec.mean).view_as(model.mean))
    model.std.copy_(torch.tensor(model.spec.std).view_as(model.std))


__all__ = ["Classify", "PixelCrossEntropy", "Segment", "TASKS", "Task", "build_model", "create_task", "crop_flip",
           "set_normalisation"]
