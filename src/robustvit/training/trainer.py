"""The training loop: AdamW, linear warm-up + cosine schedule, pluggable (robust) losses, batched flip/crop
(or timm's DeiT augmentations), bf16 autocast on CUDA, channels_last, gradient accumulation, EMA,
data-parallel training under ``torchrun`` (DistributedDataParallel; gloo on CPU), per-epoch JSONL metrics,
best-epoch selection on (robust) validation accuracy and an exact ``--resume``.

Output folder::

    OUT/config.yaml        the TrainConfig (with its recipe)
    OUT/metrics.jsonl      one line per epoch (loss, accuracy, lr, val accuracy, robust val accuracy, best, seconds)
    OUT/last/              checkpoint after the latest epoch + train_state.pt (optimizer, step, EMA, loss state
                           such as AFAT's corruption model, RNG states, best score), written as one unit: the
                           folder is built as last.tmp/ and swapped in by renames, so a crash never mixes states
    OUT/best/              the best epoch so far (with ``select_best``)
    OUT/checkpoint/        the final model: the best epoch with ``select_best``, else the last (EMA weights if on)

A resumed run continues from ``last/`` and gives the same weights as an uninterrupted one. A non-finite loss
stops the run before the optimizer step with a one-line error naming the epoch and step; ``last/`` keeps the
last completed epoch.

Data parallelism (``torchrun``): every rank draws its own augmentation, drop-path and dropout masks (seeds
derived from ``seed``, the rank and the epoch); the data order is DistributedSampler's (one shuffled order per
epoch, padded to a multiple of the world size with its first indices, rank r taking every world-th index).
Validation is sharded: rank r evaluates every world-th batch of the validation images and the counts are summed
over ranks, so every rank gets the same numbers as one process (exactly, given deterministic kernels). Every
collective reduces a tensor on the process group's device (:func:`collective_device`: the current GPU under
NCCL, else the CPU).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from robustvit.data import UNREADABLE, ImageDataset, create_dataset, dataset_for_model
from robustvit.errors import RobustvitError
from robustvit.metrics.accuracy import correct, robust_correct
from robustvit.models import Normalized, create_model, is_checkpoint_dir, save_checkpoint
from robustvit.models.factory import rebuild
from robustvit.models.finetune import adapt_input, reset_head
from robustvit.progress import progress_bar
from robustvit.runs import (check_kind, data_record, init_distributed, model_record, write_text,
                            write_train_results)
from robustvit.training.augment import TimmAugment, augment_batch
from robustvit.training.config import TrainConfig
from robustvit.training.losses import TrainingLoss, create_loss, hard_labels
from robustvit.utils import derive_seed, resolve_device

STATE_FILE = "train_state.pt"
#: Images per validation batch (the unit validation is sharded in across ranks).
VAL_BATCH_SIZE = 256


def lr_at(step: int, total: int, warmup: int, peak: float, floor: float, start: float = 0.0) -> float:
    """Linear warm-up from ``start`` to ``peak`` over ``warmup`` steps, then cosine decay to ``floor`` at step
    ``total``; ``floor`` after it (the cool-down epochs)."""
    if warmup > 0 and step < warmup:
        return start + (peak - start) * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, t)))


# ---- models --------------------------------------------------------------------------------------------
def build_model(cfg: TrainConfig, dataset: ImageDataset) -> Normalized:
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
        set_identity_normalisation(model)
    elif cfg.mean is not None or cfg.std is not None:
        set_normalisation(model, cfg.mean or model.spec.mean, cfg.std or model.spec.std)
    model.spec.class_names = list(dataset.classes)
    return model


def set_identity_normalisation(model: Normalized) -> None:
    """Mean 0, std 1: the network sees [0, 1] pixels (Debenedetti's light recipe)."""
    set_normalisation(model, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def set_normalisation(model: Normalized, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
    """The normalisation inside the model (e.g. CIFAR-10's mean/std, as Debenedetti's fine-tuning)."""
    model.spec.mean, model.spec.std = tuple(float(m) for m in mean), tuple(float(v) for v in std)
    model.mean.copy_(torch.tensor(model.spec.mean).view_as(model.mean))
    model.std.copy_(torch.tensor(model.spec.std).view_as(model.std))


class TrainStep(nn.Module):
    """The model and its loss as one module, so that DistributedDataParallel sees every forward the loss makes
    (attacks, AFAT's probe and corruption model) and averages every gradient."""

    def __init__(self, model: Normalized, loss: TrainingLoss) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x: torch.Tensor, y: torch.Tensor, epoch: int):  # noqa: D102
        return self.loss(self.model, x, y, epoch)


def build_loss(cfg: TrainConfig) -> TrainingLoss:
    """The loss from ``cfg.loss`` with :meth:`TrainConfig.loss_kwargs` (shared settings the loss takes,
    ``loss_options`` overriding them)."""
    return create_loss(cfg.loss, **cfg.loss_kwargs())


def weight_decay_rule(model: nn.Module):
    """``decays(name, param)`` for the optimiser's two groups. A network that names its exceptions
    (``no_weight_decay()``) gets timm's rule, as the reference trainers built on timm (DeiT, NVlabs/FAN,
    Debenedetti, RSPC): no decay for parameters of ≤ 1 dimension, biases and the names listed (exact match),
    plus decay for the 1-D parameters it lists in ``weight_decay_vectors()`` (robustvit's FAN keeps its
    temperature as a vector where NVlabs's is (heads, 1, 1) and decayed). Other networks: no decay on 1-D
    parameters, position embeddings and tokens."""
    net = getattr(model, "net", model)
    prefix = next((n + "." for n, m in model.named_modules() if m is net and n), "")
    listed = set(net.no_weight_decay()) if hasattr(net, "no_weight_decay") else None
    forced = set(net.weight_decay_vectors()) if hasattr(net, "weight_decay_vectors") else set()

    def decays(n: str, p: torch.Tensor) -> bool:
        local = n[len(prefix):] if prefix and n.startswith(prefix) else None
        if local is not None and local in forced:
            return True
        if listed is not None and local is not None:
            return p.ndim > 1 and not local.endswith(".bias") and local not in listed
        return p.ndim > 1 and "pos_embed" not in n and "token" not in n
    return decays


def build_optimizer(model: nn.Module, cfg: TrainConfig, loss: TrainingLoss | None = None) -> torch.optim.AdamW:
    """AdamW over the model's parameters and the loss's ``optimized_parameters()`` (MPP's [mask] embedding and
    head), in a decayed and a non-decayed group (:func:`weight_decay_rule`)."""
    decays = weight_decay_rule(model)
    named = list(model.named_parameters()) + (loss.optimized_parameters() if loss is not None else [])
    return torch.optim.AdamW([{"params": [p for n, p in named if decays(n, p)], "weight_decay": cfg.weight_decay},
                              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}], lr=cfg.lr)


# ---- data ----------------------------------------------------------------------------------------------
def batches(dataset: ImageDataset, batch_size: int, seed: int, shuffle: bool, workers: int = 0,
            limit: int | None = None, rank: int = 0, world: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """Yield (float images, labels, global batch size) on the CPU. With ``world`` > 1 the order is
    DistributedSampler's: padded to a multiple of ``world`` with its first indices, rank r taking indices
    r, r + world, …; step i of every rank together covers the order's i-th global batch of
    ``batch_size × world``. In-memory data skips the DataLoader; unreadable files (label −1) are dropped."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(dataset), generator=gen)[:n] if shuffle else torch.arange(n)
    if world > 1 and len(order) % world:
        pad = world - len(order) % world
        order = torch.cat([order, order.repeat(pad // len(order) + 1)[:pad]])
    steps = list(order.split(batch_size * world))
    mine = [(chunk[rank::world], len(chunk)) for chunk in steps]
    if workers == 0:
        for idx, total in mine:
            x, y = dataset.get_batch(idx)
            keep = y != UNREADABLE
            if keep.any():
                yield x[keep], y[keep], total
        return
    loader = DataLoader(dataset, batch_sampler=[idx.tolist() for idx, _ in mine], num_workers=workers)
    for (x, y), (_, total) in zip(loader, mine):
        keep = y != UNREADABLE
        if keep.any():
            yield x[keep], y[keep], total


# ---- collectives ---------------------------------------------------------------------------------------
def collective_device() -> torch.device:
    """The device every collective's tensor must be on: :func:`robustvit.runs.distributed.collective_device`
    where it exists, else the current GPU when the process group has an NCCL backend and the CPU otherwise."""
    from robustvit.runs import distributed

    shared = getattr(distributed, "collective_device", None)
    if shared is not None:
        return shared()
    backend = str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else ""
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over the ranks, as a tensor on :func:`collective_device` (moved there first: NCCL reduces
    only CUDA tensors, gloo CPU ones)."""
    t = t.to(collective_device())
    dist.all_reduce(t)
    return t


@torch.no_grad()
def broadcast_buffers(model: nn.Module) -> None:
    """Rank 0's buffers (BatchNorm running statistics) on every rank. DDP broadcasts them at the start of each
    forward, so after an epoch's last step every rank holds statistics updated by its own batch; sharded
    validation then evaluates rank 0's model on every rank, the model the checkpoints hold."""
    comm = collective_device()
    for b in model.buffers():
        t = b.detach().to(comm)          # b itself (shared storage) when it is on that device already
        dist.broadcast(t, src=0)
        if t.device != b.device:
            b.copy_(t)


# ---- evaluation ----------------------------------------------------------------------------------------
def shard_batches(dataset: ImageDataset, batch_size: int, limit: int | None = None, rank: int = 0, world: int = 1,
                  workers: int = 0) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """The first ``limit`` images in order, in batches of ``batch_size``; rank r of ``world`` takes batches
    r, r + world, …, so the ranks together see every image once, in the batches one process sees. Yields
    (batch number, float images, labels) on the CPU; unreadable files (label −1) are dropped."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    mine = [(b, torch.arange(b * batch_size, min(n, (b + 1) * batch_size)))
            for b in range(rank, math.ceil(n / batch_size), world)]
    if workers == 0:
        loaded: Iterator[tuple[torch.Tensor, torch.Tensor]] = (dataset.get_batch(idx) for _, idx in mine)
    else:
        loaded = iter(DataLoader(dataset, batch_sampler=[idx.tolist() for _, idx in mine], num_workers=workers))
    for (b, _), (x, y) in zip(mine, loaded):
        keep = y != UNREADABLE
        if keep.any():
            yield b, x[keep], y[keep]


def _shared_fraction(hits: torch.Tensor, total: int, world: int) -> float:
    """hits / total summed over the ``world`` ranks (one collective on the collective device, one sync)."""
    counts = torch.stack([hits.to(torch.int64), torch.tensor(total, dtype=torch.int64, device=hits.device)])
    if world > 1:
        counts = all_reduce_sum(counts)
    h, n = counts.tolist()
    return h / max(n, 1)


@torch.no_grad()
def evaluate_accuracy(model: nn.Module, dataset: ImageDataset, device: torch.device, batch_size: int = 256,
                      limit: int | None = None, rank: int = 0, world: int = 1, workers: int = 0) -> float:
    """Clean top-1 accuracy on the first ``limit`` images (:func:`robustvit.metrics.accuracy.correct`: rows with
    non-finite logits count as wrong, as in the evaluation suites). Under ``torchrun`` (``world`` > 1) every rank
    calls it: rank r evaluates every world-th batch (:func:`shard_batches`) and the counts are summed, so each
    rank returns the one-process value."""
    was = model.training
    model.eval()
    hits = torch.zeros((), dtype=torch.int64, device=device)
    total = 0
    for _, x, y in shard_batches(dataset, batch_size, limit, rank, world, workers):
        hits += correct(model(x.to(device)), y.to(device)).sum()
        total += len(y)
    model.train(was)
    return _shared_fraction(hits, total, world)


def robust_accuracy(model: nn.Module, dataset: ImageDataset, device: torch.device, attack: str = "pgd",
                    eps: str | float = "4/255", steps: int = 10, batch_size: int = 256, limit: int | None = None,
                    seed: int = 0, rank: int = 0, world: int = 1, workers: int = 0) -> float:
    """Robust accuracy under ``attack`` (pgd or fgsm from robustvit.attacks) on the first ``limit`` images, as the
    attack suites define it (:func:`robustvit.metrics.accuracy.robust_correct`: correct before and after the
    attack). Batch b is attacked with the seed (``seed``, b), whichever rank runs it; sharded over ranks as
    :func:`evaluate_accuracy`."""
    from robustvit.attacks import create_attack

    was = model.training
    model.eval()
    kw = {"steps": steps} if attack == "pgd" else {}
    hits = torch.zeros((), dtype=torch.int64, device=device)
    total = 0
    for b, x, y in shard_batches(dataset, batch_size, limit, rank, world, workers):
        x, y = x.to(device), y.to(device)
        atk = create_attack(attack, model, eps=eps, seed=derive_seed(seed, "val-attack", b) % (2**31 - 1), **kw)
        adv = atk(x, y)
        with torch.no_grad():
            hits += robust_correct(model(x), model(adv), y).sum()
        total += len(y)
    model.train(was)
    return _shared_fraction(hits, total, world)


# ---- the run -------------------------------------------------------------------------------------------
@dataclass
class Run:
    """Everything a training run holds between epochs."""

    cfg: TrainConfig
    out: Path
    device: torch.device
    rank: int
    world: int
    dataset: ImageDataset
    val: ImageDataset | None
    model: Normalized
    loss: TrainingLoss
    step: nn.Module                       # TrainStep, DDP-wrapped with world > 1
    opt: torch.optim.Optimizer
    ema: Any = None
    augment: TimmAugment | None = None
    start_epoch: int = 0
    best: float = -1.0
    steps_per_epoch: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def eval_model(self) -> Normalized:
        return self.ema.module if self.ema is not None else self.model


def load_data(cfg: TrainConfig) -> tuple[ImageDataset, ImageDataset | None]:
    dataset = create_dataset(cfg.data)
    if len(dataset) == 0:
        raise RobustvitError(f"data set {cfg.data} is empty")
    val = create_dataset(cfg.val_data) if cfg.val_data else None
    if val is not None and val.num_classes != dataset.num_classes:
        raise RobustvitError(f"validation data has {val.num_classes} classes but training data {dataset.num_classes}")
    return dataset, val


def recover_last(out: Path) -> None:
    """Finish an interrupted swap of ``last/`` (see :func:`save_state`). Without ``last/``: ``last.tmp/`` is
    complete when ``last.old/`` exists (it is renamed only after ``last.tmp/`` was written) and becomes
    ``last/``; else a complete ``last.old/`` does. Then any ``last.tmp/`` (half-written) and ``last.old/`` go."""
    last, old, tmp = out / "last", out / "last.old", out / "last.tmp"
    if not last.exists() and old.exists() and (tmp / STATE_FILE).is_file():
        tmp.rename(last)
    elif not last.exists() and (old / STATE_FILE).is_file():
        old.rename(last)
    for d in (tmp, old):
        if d.exists():
            shutil.rmtree(d)


def check_out_dir(out: Path, resume: bool) -> bool:
    """True when there is a run to resume; errors for --resume without state or a reused folder."""
    if resume and (out / "last" / STATE_FILE).is_file():
        return True
    if resume:
        raise RobustvitError(f"nothing to resume in {out} (no last/{STATE_FILE}); run without --resume")
    if (out / "metrics.jsonl").exists():
        raise RobustvitError(f"{out} already holds a training run; pass --resume to continue it or choose a new --out")
    return False


def setup_run(cfg: TrainConfig, resume: bool) -> Run:
    cfg.validate()
    out = Path(cfg.out)
    rank, world, device = init_distributed(resolve_device(cfg.device))
    torch.manual_seed(cfg.seed)    # the same initial weights on every rank (DDP also broadcasts rank 0's)
    dataset, val = load_data(cfg)
    if rank == 0:
        recover_last(out)
    if world > 1:
        dist.barrier()
    resuming = check_out_dir(out, resume)
    model = create_model(checkpoint=out / "last") if resuming else build_model(cfg, dataset)
    # the images as the model takes them: files with its preprocessing, in-memory images of another size resized
    dataset = dataset_for_model(cfg.data, model.spec)
    val = dataset_for_model(cfg.val_data, model.spec) if cfg.val_data else None
    if model.spec.num_classes != dataset.num_classes:
        raise RobustvitError(f"model has {model.spec.num_classes} classes but {cfg.data} has {dataset.num_classes}")
    model.to(device).train()
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)
    loss = build_loss(cfg).to(device)
    loss.setup(model)
    loss.to(device)
    step: nn.Module = TrainStep(model, loss)
    if world > 1:
        step = nn.parallel.DistributedDataParallel(step, device_ids=[device.index] if device.type == "cuda" else None)
    run = Run(cfg=cfg, out=out, device=device, rank=rank, world=world, dataset=dataset, val=val, model=model,
              loss=loss, step=step, opt=build_optimizer(model, cfg, loss), ema=_build_ema(model, cfg),
              augment=_build_augment(cfg, model, dataset, loss))
    run.steps_per_epoch = max(1, math.ceil(len(dataset) / (cfg.batch_size * world)))
    if resuming:
        load_state(run)
    return run


def _build_ema(model: Normalized, cfg: TrainConfig) -> Any:
    if not cfg.ema_decay:
        return None
    from timm.utils import ModelEmaV3

    return ModelEmaV3(model, decay=cfg.ema_decay)


def _build_augment(cfg: TrainConfig, model: Normalized, dataset: ImageDataset,
                   loss: TrainingLoss | None = None) -> TimmAugment | None:
    smoothing = cfg.label_smoothing
    if smoothing is None:                # the loss's default (MixUp/CutMix smooth the soft targets with it)
        smoothing = float(getattr(getattr(loss, "options", None), "label_smoothing", 0.1))
    aug = TimmAugment(dataset.num_classes, model.spec.mean if cfg.normalize else (0.485, 0.456, 0.406),
                      model.spec.std if cfg.normalize else (0.229, 0.224, 0.225), rand_augment=cfg.rand_augment,
                      mixup=cfg.mixup, cutmix=cfg.cutmix, random_erasing=cfg.random_erasing,
                      label_smoothing=smoothing, image_size=model.spec.image_size)
    return aug if aug.active else None


# ---- state ---------------------------------------------------------------------------------------------
def save_state(run: Run, epoch: int, record: dict[str, Any] | None = None) -> None:
    """``last/``: the weights and everything else a resumed run needs to continue bit-for-bit, as one unit:
    written to ``last.tmp/``, then ``last/`` → ``last.old/``, ``last.tmp/`` → ``last/``, ``last.old/`` removed
    (:func:`recover_last` completes an interrupted swap)."""
    tmp, last, old = run.out / "last.tmp", run.out / "last", run.out / "last.old"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(run.model, tmp, extra={"epoch": epoch + 1})
    state = {"epoch": epoch, "optimizer": run.opt.state_dict(), "loss": run.loss.state_dict(), "best": run.best,
             "rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state(run.device) if run.device.type == "cuda" else None,
             "ema": run.ema.state_dict() if run.ema is not None else None,
             "metrics": json.dumps(record) if record is not None else None}   # the epoch's metrics.jsonl line
    torch.save(state, tmp / STATE_FILE)
    if old.exists():
        shutil.rmtree(old)
    if last.exists():
        last.rename(old)
    tmp.rename(last)
    if old.exists():
        shutil.rmtree(old)


def restore_metrics(out: Path, epochs_done: int, last_line: str | None) -> None:
    """Make ``metrics.jsonl`` hold exactly the lines of the ``epochs_done`` epochs ``last/`` holds: a run killed
    between saving ``last/`` and appending the epoch's line gets the line back from the state; lines of an epoch
    the state does not hold (none are written before it) are dropped."""
    f = out / "metrics.jsonl"
    lines = [ln for ln in (f.read_text().splitlines() if f.is_file() else []) if ln.strip()]
    rows = []
    for ln in lines:
        try:
            rows.append((json.loads(ln)["epoch"], ln))
        except (json.JSONDecodeError, KeyError, TypeError):
            break                                         # a torn last line: everything after it is redone
    kept = [ln for e, ln in rows if e <= epochs_done]
    if last_line and not any(e == epochs_done for e, _ in rows):
        kept.append(last_line)
    if kept != lines:
        write_text(f, "".join(ln + "\n" for ln in kept))


def load_state(run: Run) -> None:
    state = torch.load(run.out / "last" / STATE_FILE, map_location="cpu", weights_only=True)
    run.start_epoch, run.best = int(state["epoch"]) + 1, float(state.get("best", -1.0))
    if run.main:
        restore_metrics(run.out, run.start_epoch, state.get("metrics"))
    run.opt.load_state_dict(state["optimizer"])
    if state.get("loss"):
        run.loss.load_state_dict(state["loss"])
    if run.ema is not None and state.get("ema") is not None:
        run.ema.load_state_dict(state["ema"])
    torch.set_rng_state(state["rng"])
    if state.get("cuda_rng") is not None and run.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"], run.device)


# ---- one epoch -----------------------------------------------------------------------------------------
def train_epoch(run: Run, epoch: int, progress: bool) -> dict[str, float]:
    """One pass over the training data; returns summed loss, correct predictions and count (all processes)."""
    cfg, device = run.cfg, run.device
    aug_gen = torch.Generator(device=device)
    aug_gen.manual_seed(derive_seed(cfg.seed, "augment", epoch, *((run.rank,) if run.world > 1 else ())))
    if run.augment is not None:
        run.augment.reseed(derive_seed(cfg.seed, "timm-augment", epoch, run.rank))
    if run.world > 1:                    # drop-path and dropout masks differ across ranks (and replay on resume)
        torch.manual_seed(derive_seed(cfg.seed, "rank-rng", epoch, run.rank))
    total = cfg.epochs * run.steps_per_epoch
    warmup = int(cfg.warmup_epochs * run.steps_per_epoch)
    peak = cfg.effective_lr(run.world)
    sums = torch.zeros(3, dtype=torch.float64)
    data = batches(run.dataset, cfg.batch_size, derive_seed(cfg.seed, "shuffle", epoch), shuffle=True,
                   workers=cfg.workers, rank=run.rank, world=run.world)
    epochs = cfg.epochs + cfg.cooldown_epochs
    with progress_bar(progress and run.main, f"epoch {epoch + 1}/{epochs}", run.steps_per_epoch) as tick:
        for i, (x, y, n_global) in enumerate(data):
            lr = lr_at(epoch * run.steps_per_epoch + i, total, warmup, peak, cfg.min_lr, cfg.warmup_lr)
            for g in run.opt.param_groups:
                g["lr"] = lr
            sums += optimizer_step(run, x, y, n_global, epoch, aug_gen, i)
            tick(f"loss {sums[0] / max(sums[2], 1):.3f}")
    if run.world > 1:
        sums = all_reduce_sum(sums)
    loss_sum, hits, n = sums.tolist()
    return {"loss": loss_sum, "correct": hits, "n": n, "lr": lr}


def check_finite(run: Run, loss: torch.Tensor, epoch: int, step: int) -> None:
    """Stop before the optimizer step when the loss is not finite on any rank (one-line error)."""
    bad = (~torch.isfinite(loss.detach()).all()).to(torch.float32).reshape(1)
    if run.world > 1:
        bad = all_reduce_sum(bad)
    if bad.item():
        where = f"training diverged at epoch {epoch + 1}, step {step + 1} (loss {float(loss.detach()):g})"
        if epoch > run.start_epoch or (run.out / "last" / STATE_FILE).is_file():
            raise RobustvitError(f"{where}; {run.out / 'last'} keeps epoch {epoch}: lower --lr or set "
                                 "--set grad_clip=1.0 and continue with --resume")
        raise RobustvitError(f"{where} before any epoch completed; lower --lr or set --set grad_clip=1.0")


def optimizer_step(run: Run, x: torch.Tensor, y: torch.Tensor, n_global: int, epoch: int,
                   aug_gen: torch.Generator, step: int = 0) -> torch.Tensor:
    """Augment, forward/backward ``accum_steps`` micro-batches (each loss weighted by its share of the global
    batch, so accumulation and data parallelism give the gradient of the global mean), then one step."""
    cfg, device = run.cfg, run.device
    if run.augment is not None:
        x, y = run.augment(x, y)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    x = augment_batch(x, aug_gen, padding=cfg.crop_padding, flip=cfg.flip, crop_scale=cfg.crop_scale,
                      crop_ratio=cfg.crop_ratio, rotation=cfg.rotation, jitter=cfg.color_jitter)
    if cfg.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    autocast = device.type == "cuda" and cfg.amp
    run.opt.zero_grad(set_to_none=True)
    sums = torch.zeros(3, dtype=torch.float64)
    micro = list(zip(x.tensor_split(cfg.accum_steps), y.tensor_split(cfg.accum_steps)))
    micro = [(a, b) for a, b in micro if len(a)]
    for j, (xm, ym) in enumerate(micro):
        sync = j == len(micro) - 1 or run.world == 1
        ctx = run.step.no_sync() if not sync and hasattr(run.step, "no_sync") else contextlib.nullcontext()
        with ctx:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss, logits, _ = run.step(xm, ym, epoch)
            check_finite(run, loss, epoch, step)
            (loss * (len(xm) * run.world / n_global)).backward()
        sums += torch.tensor([float(loss.detach()) * len(xm),
                              float((logits.detach().argmax(1) == hard_labels(ym)).sum()), len(xm)], dtype=torch.float64)
    if cfg.grad_clip:
        nn.utils.clip_grad_norm_(list(run.model.parameters()) + [p for _, p in run.loss.optimized_parameters()],
                                 cfg.grad_clip)
    run.opt.step()
    run.loss.after_step()
    if run.ema is not None:
        run.ema.update(run.model)
    return sums


def validate(run: Run) -> dict[str, Any]:
    """Clean (and robust, with ``select_best="robust"``) validation accuracy of the evaluated (EMA) model. Every
    rank calls it: the batches are sharded over the ranks and the counts summed, so every rank returns the same
    record, equal to one process's."""
    cfg, record = run.cfg, {}
    if run.val is None:
        return record
    model = run.eval_model()
    if run.world > 1:
        broadcast_buffers(model)
    shard = {"batch_size": VAL_BATCH_SIZE, "rank": run.rank, "world": run.world, "workers": cfg.workers}
    record["val_acc"] = evaluate_accuracy(model, run.val, run.device, limit=cfg.val_limit, **shard)
    if cfg.select_best == "robust":
        record["val_robust_acc"] = robust_accuracy(model, run.val, run.device, cfg.val_attack, cfg.val_eps,
                                                   cfg.val_attack_steps, limit=cfg.val_limit, seed=cfg.seed, **shard)
        record["val_attack"] = f"{cfg.val_attack} eps={cfg.val_eps}" + (f" steps={cfg.val_attack_steps}"
                                                                        if cfg.val_attack == "pgd" else "")
    return record


def finish_epoch(run: Run, epoch: int, sums: dict[str, float], t0: float, progress: bool) -> dict[str, Any]:
    """Validate (every rank, sharded), keep the best epoch, write the checkpoint and the metrics line (main
    process only); returns the epoch's record."""
    if not math.isfinite(sums["loss"]):
        raise RobustvitError(f"training diverged at epoch {epoch + 1} (loss is not finite); lower --lr")
    record: dict[str, Any] = {"epoch": epoch + 1, "lr": sums["lr"], "train_loss": sums["loss"] / sums["n"],
                              "train_acc": sums["correct"] / sums["n"], **run.loss.metrics(), **validate(run)}
    if run.cfg.select_best:
        score = record["val_robust_acc" if run.cfg.select_best == "robust" else "val_acc"]
        record["best"] = score > run.best
        if record["best"]:
            run.best = score
            if run.main:
                save_checkpoint(run.eval_model(), run.out / "best", extra={"epoch": epoch + 1, "score": score})
    record["seconds"] = round(time.time() - t0, 2)
    if run.main:
        save_state(run, epoch, record)
        with open(run.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if progress:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()), flush=True)
    if run.world > 1:
        dist.barrier()
    return record


def final_checkpoint(run: Run) -> Path:
    """``checkpoint/``: the best epoch's weights with ``select_best``, else the last (EMA) weights."""
    model = run.eval_model()
    model.eval()
    if run.cfg.select_best and (run.out / "best").is_dir():
        model = create_model(checkpoint=run.out / "best")
    path = run.out / "checkpoint"
    if run.main:
        save_checkpoint(model, path, extra={"train_config": run.cfg.to_dict()})
    if run.world > 1:
        dist.barrier()
    return path


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> Path:
    """Train ``cfg.model`` on ``cfg.data``; returns the path of the final checkpoint folder."""
    check_kind(cfg.out, "train")
    run = setup_run(cfg, resume)
    if run.main:
        run.out.mkdir(parents=True, exist_ok=True)
        cfg.save(run.out / "config.yaml")
    for epoch in range(run.start_epoch, cfg.epochs + cfg.cooldown_epochs):
        t0 = time.time()
        sums = train_epoch(run, epoch, progress)
        finish_epoch(run, epoch, sums, t0, progress)
    path = final_checkpoint(run)
    if run.main:
        write_results(run)
    return path


def write_results(run: Run) -> Path:
    """``OUT/results.json`` of kind ``train`` (the results schema of :mod:`robustvit.runs`): the config, the
    per-epoch metrics of ``metrics.jsonl`` and the checkpoints kept."""
    metrics = run.out / "metrics.jsonl"
    epochs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    kept = [d for d in ("checkpoint", "best", "last") if (run.out / d).is_dir()]
    data = data_record(spec=run.cfg.data, num_images=len(run.dataset), num_classes=run.dataset.num_classes,
                       val_spec=run.cfg.val_data)
    record = model_record(run.eval_model(), run.cfg.model, run.cfg.model)
    weights = run.out / "checkpoint" / "model.safetensors"
    start = "pretrained" if run.cfg.pretrained else run.cfg.weights or ("checkpoint" if is_checkpoint_dir(run.cfg.model)
                                                                        else "random initialisation")
    record["weights"] = {"source": "trained", "checkpoint": "checkpoint", "started_from": start,
                         "sha256": hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None}
    record["pretrained"] = True     # trained weights: the numbers describe a trained network
    return write_train_results(run.out, run.cfg.to_dict(), epochs, kept, record, data,
                               loss={"name": run.cfg.loss, **run.loss.resolved()})
