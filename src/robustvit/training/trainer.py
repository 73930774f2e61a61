"""The training loop: AdamW, linear warm-up + cosine schedule, label smoothing, batched flip/crop
augmentation, bf16 autocast on CUDA, per-epoch JSONL metrics, a checkpoint every epoch and ``--resume``.

Output folder::

    OUT/config.yaml        the TrainConfig
    OUT/metrics.jsonl      one line per epoch (loss, accuracy, lr, val accuracy, seconds)
    OUT/last/              checkpoint after the latest epoch + train_state.pt (optimizer, epoch)
    OUT/checkpoint/        the final model (``create_model(checkpoint=OUT/checkpoint)``)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from robustvit.data import UNREADABLE, ImageDataset, create_dataset
from robustvit.errors import RobustvitError
from robustvit.progress import progress_bar
from robustvit.models import Normalized, create_model, is_checkpoint_dir, save_checkpoint
from robustvit.training.augment import random_crop_flip
from robustvit.training.config import TrainConfig
from robustvit.training.losses import create_loss
from robustvit.utils import derive_seed, resolve_device

STATE_FILE = "train_state.pt"


def lr_at(step: int, total: int, warmup: int, peak: float, floor: float) -> float:
    """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then cosine decay to ``floor``."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, t)))


def build_model(cfg: TrainConfig, dataset: ImageDataset) -> Normalized:
    """The model to train; a checkpoint with another class count gets a new zero-initialised head
    (the ViT fine-tuning recipe, Dosovitskiy et al.)."""
    kwargs = dict(cfg.model_kwargs)
    if is_checkpoint_dir(cfg.model):
        model = create_model(cfg.model)
        if model.spec.num_classes != dataset.num_classes:
            model.net.reset_classifier(dataset.num_classes)
            head = model.net.get_classifier()
            if isinstance(head, nn.Linear):
                nn.init.zeros_(head.weight), nn.init.zeros_(head.bias)
            model.spec.num_classes = dataset.num_classes
            model.spec.kwargs["num_classes"] = dataset.num_classes
    else:
        kwargs.setdefault("num_classes", dataset.num_classes)
        model = create_model(cfg.model, **kwargs)
    model.spec.class_names = list(dataset.classes)
    return model


def batches(dataset: ImageDataset, batch_size: int, seed: int, shuffle: bool, workers: int = 0,
            limit: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (float images, labels) on the CPU; in-memory data skips the DataLoader. Unreadable files
    (label −1) are dropped."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(dataset), generator=gen)[:n] if shuffle else torch.arange(n)
    if hasattr(dataset, "get_batch"):
        for i in range(0, n, batch_size):
            yield dataset.get_batch(order[i:i + batch_size])
        return
    loader = DataLoader(torch.utils.data.Subset(dataset, order.tolist()), batch_size=batch_size,
                        num_workers=workers, shuffle=False)
    for x, y in loader:
        keep = y != UNREADABLE
        if keep.any():
            yield x[keep], y[keep]


@torch.no_grad()
def evaluate_accuracy(model: nn.Module, dataset: ImageDataset, device: torch.device, batch_size: int = 256,
                      limit: int | None = None) -> float:
    was = model.training
    model.eval()
    correct = total = 0
    for x, y in batches(dataset, batch_size, 0, shuffle=False, limit=limit):
        pred = model(x.to(device)).argmax(1).cpu()
        correct += int((pred == y).sum())
        total += len(y)
    model.train(was)
    return correct / max(total, 1)


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> Path:
    """Train ``cfg.model`` on ``cfg.data``; returns the path of the final checkpoint folder."""
    cfg.validate()
    out = Path(cfg.out)
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    dataset = create_dataset(cfg.data)
    if len(dataset) == 0:
        raise RobustvitError(f"data set {cfg.data} is empty")
    val = create_dataset(cfg.val_data) if cfg.val_data else None
    if val is not None and val.num_classes != dataset.num_classes:
        raise RobustvitError(f"validation data has {val.num_classes} classes but training data {dataset.num_classes}")
    start_epoch, model, opt_state = 0, None, None
    if resume and (out / "last" / STATE_FILE).is_file():
        model = create_model(checkpoint=out / "last")
        state = torch.load(out / "last" / STATE_FILE, map_location="cpu", weights_only=True)
        start_epoch, opt_state = int(state["epoch"]) + 1, state["optimizer"]
    elif resume:
        raise RobustvitError(f"nothing to resume in {out} (no last/{STATE_FILE}); run without --resume")
    elif (out / "metrics.jsonl").exists():
        raise RobustvitError(f"{out} already holds a training run; pass --resume to continue it or choose a new --out")
    if model is None:
        model = build_model(cfg, dataset)
    if model.spec.num_classes != dataset.num_classes:
        raise RobustvitError(f"model has {model.spec.num_classes} classes but {cfg.data} has {dataset.num_classes}")
    out.mkdir(parents=True, exist_ok=True)
    cfg.save(out / "config.yaml")
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "pos_embed" not in n and "token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and "pos_embed" not in n and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    if opt_state is not None:
        opt.load_state_dict(opt_state)
    loss_fn = create_loss(cfg.loss, **({"label_smoothing": cfg.label_smoothing} if cfg.loss == "ce" else {}),
                          **cfg.loss_options).to(device)
    steps_per_epoch = math.ceil(len(dataset) / cfg.batch_size)
    total, warmup = cfg.epochs * steps_per_epoch, int(cfg.warmup_epochs * steps_per_epoch)
    autocast = device.type == "cuda" and cfg.amp
    aug_gen = torch.Generator(device=device)
    for epoch in range(start_epoch, cfg.epochs):
        t0 = time.time()
        aug_gen.manual_seed(derive_seed(cfg.seed, "augment", epoch))
        sums = {"loss": 0.0, "correct": 0, "n": 0}
        with progress_bar(progress, f"epoch {epoch + 1}/{cfg.epochs}", steps_per_epoch) as tick:
            for i, (x, y) in enumerate(batches(dataset, cfg.batch_size, derive_seed(cfg.seed, "shuffle", epoch),
                                                shuffle=True, workers=cfg.workers)):
                lr = lr_at(epoch * steps_per_epoch + i, total, warmup, cfg.lr, cfg.min_lr)
                for g in opt.param_groups:
                    g["lr"] = lr
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                x = random_crop_flip(x, aug_gen, cfg.crop_padding, cfg.flip)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    loss, logits, _ = loss_fn(model, x, y, epoch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                sums["loss"] += float(loss.detach()) * len(y)
                sums["correct"] += int((logits.detach().argmax(1) == y).sum())
                sums["n"] += len(y)
                tick(f"loss {sums['loss'] / sums['n']:.3f}")
        if not math.isfinite(sums["loss"]):
            raise RobustvitError(f"training diverged at epoch {epoch + 1} (loss is not finite); lower --lr")
        record: dict[str, Any] = {"epoch": epoch + 1, "lr": lr, "train_loss": sums["loss"] / sums["n"],
                                  "train_acc": sums["correct"] / sums["n"]}
        if val is not None:
            record["val_acc"] = evaluate_accuracy(model, val, device, limit=cfg.val_limit)
        record["seconds"] = round(time.time() - t0, 2)
        save_checkpoint(model, out / "last", extra={"epoch": epoch + 1})
        torch.save({"epoch": epoch, "optimizer": opt.state_dict()}, out / "last" / STATE_FILE)
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if progress:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()), flush=True)
    model.eval()
    return save_checkpoint(model, out / "checkpoint", extra={"train_config": cfg.to_dict()})
