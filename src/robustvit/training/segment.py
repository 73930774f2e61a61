"""``robustvit train --task segment``: a small training loop for :mod:`robustvit.models.segmenter` models.

It reuses :class:`robustvit.training.TrainConfig` (model = the backbone name or a segmentation checkpoint,
data = a data set with masks, epochs, batch size, AdamW lr / weight decay / warm-up + cosine, seed, device,
``model_kwargs`` with ``head`` / ``head_channels`` for the head and the rest for the backbone, ``pretrained``,
``flip``, ``val_data`` / ``val_limit``). Loss: per-pixel cross-entropy, ``ignore_index`` 255
(``label_smoothing`` is not applied). Augmentation: the same random crop (``crop_padding``; padded mask pixels
ignored) and horizontal flip (``flip``) of image and mask. Writes ``OUT/config.yaml``, ``OUT/metrics.jsonl``
(per epoch: loss, pixel accuracy and, with ``val_data``, mIoU) and ``OUT/checkpoint/`` (``spec.json`` records
``task: segment`` and the head).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from robustvit.data import create_dataset, dataset_for_model
from robustvit.errors import RobustvitError
from robustvit.metrics.dense import IGNORE_INDEX, confusion_matrix, segmentation_scores
from robustvit.models import Normalized, create_model, is_checkpoint_dir
from robustvit.models.factory import save_checkpoint
from robustvit.models.segmenter import create_segmenter, is_segmenter
from robustvit.progress import progress_bar
from robustvit.training.config import TrainConfig
from robustvit.training.trainer import build_optimizer, lr_at
from robustvit.utils import resolve_device

#: TrainConfig fields that classification-only training features use; segmentation training refuses them.
_UNSUPPORTED = {"mixup": 0.0, "cutmix": 0.0, "random_erasing": 0.0, "rand_augment": None, "eps": None,
                "select_best": None, "ema_decay": None, "img_size": None, "patch_size": None}


def _check(cfg: TrainConfig) -> None:
    cfg.validate()
    if cfg.loss != "ce":
        raise RobustvitError(f"--task segment trains with per-pixel cross-entropy; drop --loss {cfg.loss}")
    for k, default in _UNSUPPORTED.items():
        if getattr(cfg, k) != default:
            raise RobustvitError(f"{k} is not supported with --task segment; drop it")


def _masks(ds: Any, index: torch.Tensor) -> torch.Tensor:
    if not getattr(ds, "has_masks", False):
        raise RobustvitError(f"{ds.spec} has no masks; use a segmentation data set (synthshapes:train,masks=1, "
                             "cityscapes:ROOT, ade20k:ROOT)")
    return ds.get_masks(index)


def crop_flip(x: torch.Tensor, m: torch.Tensor, padding: int, flip: bool, gen: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random crop (after zero padding; padded mask pixels are ignored, 255) and horizontal flip of
    each image and its mask."""
    if padding > 0:
        n, _, h, w = x.shape
        xp = F.pad(x, (padding,) * 4)
        mp = F.pad(m, (padding,) * 4, value=IGNORE_INDEX)
        dy = torch.randint(0, 2 * padding + 1, (n,), generator=gen).tolist()
        dx = torch.randint(0, 2 * padding + 1, (n,), generator=gen).tolist()
        x = torch.stack([xp[i, :, a:a + h, b:b + w] for i, (a, b) in enumerate(zip(dy, dx))])
        m = torch.stack([mp[i, a:a + h, b:b + w] for i, (a, b) in enumerate(zip(dy, dx))])
    if flip:
        f = torch.rand(len(x), generator=gen) < 0.5
        x = torch.where(f[:, None, None, None], x.flip(-1), x)
        m = torch.where(f[:, None, None], m.flip(-1), m)
    return x, m


def build_segmenter(cfg: TrainConfig, num_classes: int) -> Normalized:
    """The model to train: a segmentation checkpoint, or ``cfg.model`` as the backbone of a new one."""
    if is_checkpoint_dir(cfg.model):
        model = create_model(cfg.model)
        if not is_segmenter(model):
            raise RobustvitError(f"{cfg.model} is not a segmentation checkpoint; give a backbone name instead")
        if model.spec.num_classes != num_classes:
            raise RobustvitError(f"{cfg.model} predicts {model.spec.num_classes} classes but the data has "
                                 f"{num_classes}")
        return model
    kwargs = dict(cfg.model_kwargs)
    head = kwargs.pop("head", "setr_naive")
    head_channels = int(kwargs.pop("head_channels", 256))
    if cfg.drop_path > 0:
        kwargs.setdefault("drop_path_rate", cfg.drop_path)
    model = create_segmenter(cfg.model, num_classes, head=head, head_channels=head_channels,
                             pretrained=cfg.pretrained, **kwargs)
    if not cfg.normalize:
        model.spec.mean, model.spec.std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
        model.mean.zero_()
        model.std.fill_(1.0)
    return model


@torch.no_grad()
def evaluate_segmentation(model: torch.nn.Module, dataset: Any, device: torch.device, batch_size: int = 100,
                          limit: int | None = None) -> dict[str, Any]:
    """mIoU / pixel accuracy of ``model`` on the first ``limit`` images of a data set with masks."""
    was = model.training
    model.eval()
    n = len(dataset) if limit is None else min(limit, len(dataset))
    k = int(model.spec.num_classes)
    conf = torch.zeros(k, k, dtype=torch.long, device=device)
    for start in range(0, n, batch_size):
        idx = torch.arange(start, min(n, start + batch_size))
        x, _ = dataset.get_batch(idx)
        m = _masks(dataset, idx).to(device)
        conf += confusion_matrix(model(x.to(device)).argmax(1), m, k)
    model.train(was)
    return segmentation_scores(conf.cpu())


def train_segmenter(cfg: TrainConfig, progress: bool = True) -> Path:
    """Train a segmentation model; returns the checkpoint folder ``OUT/checkpoint``."""
    _check(cfg)
    out = Path(cfg.out)
    if (out / "metrics.jsonl").exists():
        raise RobustvitError(f"{out} already holds a training run; choose a new --out")
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    raw = create_dataset(cfg.data)
    model = build_segmenter(cfg, raw.num_classes)
    dataset = dataset_for_model(cfg.data, model.spec)
    val = dataset_for_model(cfg.val_data, model.spec) if cfg.val_data else None
    if val is not None and val.num_classes != dataset.num_classes:
        raise RobustvitError(f"validation data has {val.num_classes} classes but training data {dataset.num_classes}")
    _masks(dataset, torch.tensor([0]))
    model.to(device).train()
    opt = build_optimizer(model, cfg)
    steps_per_epoch = max(1, math.ceil(len(dataset) / cfg.batch_size))
    total, warmup = cfg.epochs * steps_per_epoch, int(cfg.warmup_epochs * steps_per_epoch)
    out.mkdir(parents=True, exist_ok=True)
    cfg.save(out / "config.yaml")
    gen = torch.Generator().manual_seed(cfg.seed)
    amp = cfg.amp and device.type == "cuda"
    step = 0
    epochs = cfg.epochs + cfg.cooldown_epochs
    for epoch in range(epochs):
        t0, loss_sum, correct, pixels = time.time(), 0.0, 0, 0
        order = torch.randperm(len(dataset), generator=gen)
        with progress_bar(progress, f"segment epoch {epoch + 1}/{epochs}", steps_per_epoch) as tick:
            for idx in order.split(cfg.batch_size):
                x, _ = dataset.get_batch(idx)
                m = dataset.get_masks(idx)
                x, m = crop_flip(x, m, cfg.crop_padding, cfg.flip, gen)
                x, m = x.to(device, non_blocking=True), m.to(device, non_blocking=True)
                for g in opt.param_groups:
                    g["lr"] = lr_at(step, total, warmup, cfg.effective_lr(1), cfg.min_lr, cfg.warmup_lr)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    logits = model(x)
                loss = F.cross_entropy(logits.float(), m, ignore_index=IGNORE_INDEX)
                if not torch.isfinite(loss):
                    raise RobustvitError(f"segmentation training diverged at epoch {epoch + 1} (loss {float(loss):g}); "
                                         "lower --lr or set --set grad_clip=1.0")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                step += 1
                valid = m != IGNORE_INDEX
                loss_sum += float(loss.detach()) * len(idx)
                correct += int(((logits.argmax(1) == m) & valid).sum())
                pixels += int(valid.sum())
                tick()
        row: dict[str, Any] = {"epoch": epoch + 1, "loss": loss_sum / len(dataset),
                               "train_pixel_accuracy": correct / max(1, pixels), "seconds": round(time.time() - t0, 2),
                               "lr": opt.param_groups[0]["lr"]}
        if val is not None:
            s = evaluate_segmentation(model, val, device, limit=cfg.val_limit)
            row.update({"val_miou": s["miou"], "val_pixel_accuracy": s["pixel_accuracy"]})
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if progress:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    model.eval()
    model.spec.class_names = list(dataset.classes)
    net = model.net
    return save_checkpoint(model, out / "checkpoint", extra={
        "task": "segment", "head": {"name": net.head_name, "backbone": net.backbone_name,
                                    "head_channels": model.spec.kwargs.get("head_channels")},
        "train_config": cfg.to_dict()})


__all__ = ["build_segmenter", "crop_flip", "evaluate_segmentation", "train_segmenter"]
