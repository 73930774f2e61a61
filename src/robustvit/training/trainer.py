"""The training loop: AdamW, linear warm-up + cosine schedule, pluggable (robust) losses, batched augmentation
(or timm's DeiT augmentations), bf16 autocast on CUDA, channels_last, gradient accumulation, EMA, data-parallel
training under ``torchrun`` (DDP; gloo on CPU), per-epoch metrics, best-epoch selection and an exact ``--resume``
(same weights as an uninterrupted run). What is learnt is a :class:`~robustvit.training.tasks.Task`.

Output folder::

    OUT/config.yaml        the TrainConfig (with its recipe)
    OUT/metrics.jsonl      one line per epoch (loss, training accuracy, lr, validation numbers, best, seconds)
    OUT/last/              checkpoint after the latest epoch + train_state.pt (optimizer, EMA, loss and RNG
                           states, best score, the epochs' records, start time), built as last.tmp/ and swapped
                           in by renames, so a crash never mixes states
    OUT/best/              the best epoch so far (with ``select_best``)
    OUT/checkpoint/        the final model: the best epoch with ``select_best``, else the last (EMA weights if on)
    OUT/results.json       kind ``train``: config, epochs, checkpoints, model, data (with ``val_subset``), run

Under ``torchrun`` each rank draws its own augmentation and drop-path masks (seeds from ``seed``, rank and
epoch) on DistributedSampler's data order; validation is sharded by batch and its counts summed, so every rank
gets one process's numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from robustvit.data import (UNREADABLE, ImageDataset, SubsetDataset, TensorImageDataset, create_dataset,
                            dataset_for_model)
from robustvit.data.subset import make_subset
from robustvit.data.synthshapes import SynthShapesDataset
from robustvit.errors import RobustvitError
from robustvit.metrics.dense import segmentation_scores
from robustvit.models import Normalized, create_model, is_checkpoint_dir, save_checkpoint
from robustvit.progress import progress_bar
from robustvit.runs import (check_kind, collective_device, data_record, init_distributed, model_record, now,
                            run_header, write_text, write_train_results)
from robustvit.training.augment import TimmAugment
from robustvit.training.config import TrainConfig
from robustvit.training.losses import TrainingLoss
from robustvit.training.tasks import Segment, Task, create_task
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


# ---- models ----------------------------------------------------------------------------------------------
class TrainStep(nn.Module):
    """The model and its loss as one module, so that DistributedDataParallel sees every forward the loss makes
    (attacks, AFAT's probe and corruption model) and averages every gradient."""

    def __init__(self, model: Normalized, loss: TrainingLoss) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x: torch.Tensor, y: torch.Tensor, epoch: int):  # noqa: D102
        return self.loss(self.model, x, y, epoch)


def build_loss(cfg: TrainConfig) -> TrainingLoss:
    """The loss the task trains with (classification: ``cfg.loss`` with :meth:`TrainConfig.loss_kwargs`)."""
    return create_task(cfg).build_loss()


def weight_decay_rule(model: nn.Module):
    """``decays(name, param)`` for the optimiser's two groups. A network with ``no_weight_decay()`` gets timm's
    rule, as the reference trainers (DeiT, NVlabs/FAN, Debenedetti, RSPC): no decay for ≤ 1-D parameters, biases
    and the names listed, but decay for the 1-D ones in ``weight_decay_vectors()`` (robustvit's FAN keeps as a
    vector the temperature NVlabs's decays as (heads, 1, 1)). Others: no decay on 1-D parameters, position
    embeddings and tokens."""
    net = getattr(model, "net", model)
    prefix = next((n + "." for n, m in model.named_modules() if m is net and n), "")
    listed = set(net.no_weight_decay()) if hasattr(net, "no_weight_decay") else None
    forced = set(net.weight_decay_vectors()) if hasattr(net, "weight_decay_vectors") else set()

    def decays(n: str, p: torch.Tensor) -> bool:
        local = n[len(prefix):] if prefix and n.startswith(prefix) else None
        if local in forced:
            return True
        if listed is not None and local is not None:
            return p.ndim > 1 and not local.endswith(".bias") and local not in listed
        return p.ndim > 1 and "pos_embed" not in n and "token" not in n
    return decays


def build_optimizer(model: nn.Module, cfg: TrainConfig, loss: TrainingLoss | None = None) -> torch.optim.AdamW:
    """AdamW over the model's and the loss's ``optimized_parameters()``, decayed or not (:func:`weight_decay_rule`)."""
    decays = weight_decay_rule(model)
    named = list(model.named_parameters()) + (loss.optimized_parameters() if loss is not None else [])
    return torch.optim.AdamW([{"params": [p for n, p in named if decays(n, p)], "weight_decay": cfg.weight_decay},
                              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}], lr=cfg.lr)


# ---- data ----------------------------------------------------------------------------------------------
#: ``targets(dataset, index, labels)``: a batch's training targets (the labels, or a task's, such as masks).
Targets = Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]


def _load(dataset: ImageDataset, chunks: list[torch.Tensor], workers: int, targets: Targets | None
          ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(position in ``chunks``, float images, targets) on the CPU per index chunk; unreadable files (label −1)
    dropped, a batch left empty skipped."""
    if workers == 0:
        loaded: Iterator[tuple[torch.Tensor, torch.Tensor]] = (dataset.get_batch(idx) for idx in chunks)
    else:
        loaded = iter(DataLoader(dataset, batch_sampler=[idx.tolist() for idx in chunks], num_workers=workers))
    for i, (idx, (x, y)) in enumerate(zip(chunks, loaded)):
        keep = y != UNREADABLE
        if keep.any():
            yield i, x[keep], y[keep] if targets is None else targets(dataset, idx[keep], y[keep])


def batches(dataset: ImageDataset, batch_size: int, seed: int, shuffle: bool, workers: int = 0,
            limit: int | None = None, rank: int = 0, world: int = 1, targets: Targets | None = None
            ) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """Yield (float images, targets, global batch size) on the CPU. With ``world`` > 1 the order is
    DistributedSampler's (padded to a multiple of ``world`` with its first indices, rank r taking every world-th
    index), so step i of all ranks covers the i-th global batch of ``batch_size × world``."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(dataset), generator=gen)[:n] if shuffle else torch.arange(n)
    if world > 1 and len(order) % world:
        pad = world - len(order) % world
        order = torch.cat([order, order.repeat(pad // len(order) + 1)[:pad]])
    mine = [(chunk[rank::world], len(chunk)) for chunk in order.split(batch_size * world)]
    for i, x, y in _load(dataset, [idx for idx, _ in mine], workers, targets):
        yield x, y, mine[i][1]


# ---- collectives ---------------------------------------------------------------------------------------
def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over the ranks, on :func:`collective_device` (NCCL reduces only CUDA tensors, gloo CPU ones)."""
    t = t.to(collective_device())
    dist.all_reduce(t)
    return t


@torch.no_grad()
def broadcast_buffers(model: nn.Module) -> None:
    """Rank 0's buffers (BatchNorm statistics) on every rank: after an epoch's last step each rank's were updated by
    its own batch, and sharded validation must evaluate rank 0's model, the one the checkpoints hold."""
    comm = collective_device()
    for b in model.buffers():
        t = b.detach().to(comm)          # b itself (shared storage) when it is on that device already
        dist.broadcast(t, src=0)
        if t.device != b.device:
            b.copy_(t)


# ---- evaluation ----------------------------------------------------------------------------------------
def shard_batches(dataset: ImageDataset, batch_size: int, limit: int | None = None, rank: int = 0, world: int = 1,
                  workers: int = 0, targets: Targets | None = None
                  ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(batch number, float images, targets) on the CPU of the first ``limit`` images in order; rank r takes
    every world-th batch from r, so the ranks together see the batches one process sees."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    numbers = list(range(rank, math.ceil(n / batch_size), world))
    chunks = [torch.arange(b * batch_size, min(n, (b + 1) * batch_size)) for b in numbers]
    for i, x, y in _load(dataset, chunks, workers, targets):
        yield numbers[i], x, y


def validate_model(task: Task, model: nn.Module, dataset: ImageDataset, device: torch.device,
                   batch_size: int = VAL_BATCH_SIZE, limit: int | None = None, rank: int = 0, world: int = 1,
                   workers: int = 0) -> dict[str, Any]:
    """The task's validation record of ``model`` on the first ``limit`` images. Under ``torchrun`` every rank
    calls it and counts its shard (:func:`shard_batches`); the counts are summed, giving the one-process record."""
    data = shard_batches(dataset, batch_size, limit, rank, world, workers, task.targets)
    counts = task.val_counts(model, data, device)
    if world > 1:
        counts = all_reduce_sum(counts)
    return task.val_record(counts)


# ---- the run -------------------------------------------------------------------------------------------
@dataclass
class Run:
    """Everything a training run holds between epochs."""

    cfg: TrainConfig
    task: Task
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
    val_subset: dict[str, Any] | None = None   # data.val_subset of results.json
    subset: dict[str, Any] | None = None       # data.subset of results.json (``limit``: the training sample)
    start_epoch: int = 0
    best: float = -1.0
    steps_per_epoch: int = 1
    history: list[dict[str, Any]] = field(default_factory=list)   # the records of the epochs done
    started: str = ""                             # when the run's first session started (results.json's run.started)
    seconds_before: float = 0.0                   # wall time the resumed checkpoint had recorded (its last epoch)
    session_start: float = field(default_factory=time.time)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def seconds(self) -> float:
        """Wall time of the whole training so far, across resumes."""
        return self.seconds_before + time.time() - self.session_start

    def eval_model(self) -> Normalized:
        return self.ema.module if self.ema is not None else self.model


def for_model(spec: str, built: ImageDataset | None, model: Normalized) -> ImageDataset:
    """The data set ``spec`` as the model sees it (:func:`robustvit.data.dataset_for_model`); ``built`` (made
    before the model, for its classes) is kept when it already holds images at the model's input size, so that
    they are generated or read once."""
    size = int(model.spec.image_size)
    if isinstance(built, (TensorImageDataset, SynthShapesDataset)) and len(built) and \
            tuple(built.get_batch(torch.tensor([0]))[0].shape[-2:]) == (size, size):
        return built
    return dataset_for_model(spec, model.spec)


def validation_data(cfg: TrainConfig, model: Normalized, classes: int) -> tuple[ImageDataset | None, dict | None]:
    """The validation images as the model sees them, a seeded class-stratified sample of ``val_limit`` (as ``eval
    --limit``), and its ``data.val_subset`` record (None: every image)."""
    if not cfg.val_data:
        return None, None
    val = dataset_for_model(cfg.val_data, model.spec)
    if val.num_classes != classes:
        raise RobustvitError(f"validation data has {val.num_classes} classes but training data {classes}")
    limit = None if cfg.val_limit is None or cfg.val_limit >= len(val) else cfg.val_limit
    subset = make_subset(val, limit=limit, method="stratified", seed=cfg.seed)
    return (val, None) if subset.whole else (SubsetDataset(val, subset.indices), subset.record())


def training_sample(cfg: TrainConfig, dataset: ImageDataset) -> tuple[ImageDataset, dict[str, Any] | None]:
    """The training images (with ``limit``, a seeded class-stratified sample) and its ``data.subset`` record."""
    if cfg.limit is None or cfg.limit >= len(dataset):
        return dataset, None
    if cfg.task != "classify":
        raise RobustvitError(f"limit applies to classification training; for task {cfg.task} give the data's "
                             "own count= (e.g. synthshapes:train,masks=1,count=N)")
    subset = make_subset(dataset, limit=cfg.limit, method="stratified", seed=cfg.seed)
    return SubsetDataset(dataset, subset.indices), subset.record()


def recover_last(out: Path) -> None:
    """Finish an interrupted swap of ``last/`` (:func:`save_state`). Without ``last/``, ``last.tmp/`` becomes it
    when ``last.old/`` exists (renamed only after ``last.tmp/`` was complete), else a complete ``last.old/``."""
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
    task = create_task(cfg)
    task.check()
    out = Path(cfg.out)
    started = now()
    rank, world, device = init_distributed(resolve_device(cfg.device))
    torch.manual_seed(cfg.seed)    # the same initial weights on every rank (DDP also broadcasts rank 0's)
    if rank == 0:
        recover_last(out)
    if world > 1:
        dist.barrier()

    def checked(data: ImageDataset) -> ImageDataset:
        if len(data) == 0:
            raise RobustvitError(f"data set {cfg.data} is empty")
        task.check_data(data)
        return data

    resuming = check_out_dir(out, resume)
    built = None if resuming else checked(create_dataset(cfg.data))
    model = create_model(checkpoint=out / "last") if resuming else task.build_model(built)
    # the images as the model takes them: files with its preprocessing, in-memory images of another size resized
    dataset, subset = training_sample(cfg, checked(for_model(cfg.data, built, model)))
    if model.spec.num_classes != dataset.num_classes:
        raise RobustvitError(f"model has {model.spec.num_classes} classes but {cfg.data} has {dataset.num_classes}")
    val, val_subset = validation_data(cfg, model, dataset.num_classes)
    if val is not None:
        task.check_data(val)
    model.to(device).train()
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)
    loss = task.build_loss().to(device)
    loss.setup(model)
    loss.to(device)
    step: nn.Module = TrainStep(model, loss)
    if world > 1:
        step = nn.parallel.DistributedDataParallel(step, device_ids=[device.index] if device.type == "cuda" else None)
    run = Run(cfg=cfg, task=task, out=out, device=device, rank=rank, world=world, dataset=dataset, val=val,
              model=model, loss=loss, step=step, opt=build_optimizer(model, cfg, loss), ema=_build_ema(model, cfg),
              augment=_build_augment(cfg, model, dataset, loss), val_subset=val_subset, subset=subset,
              started=started)
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
def save_state(run: Run, epoch: int) -> None:
    """``last/``: everything a resumed run needs to continue bit-for-bit, as one unit: written to ``last.tmp/``,
    then ``last/`` → ``last.old/``, ``last.tmp/`` → ``last/``, ``last.old/`` removed (see :func:`recover_last`)."""
    tmp, last, old = run.out / "last.tmp", run.out / "last", run.out / "last.old"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(run.model, tmp, extra={"epoch": epoch + 1, **run.task.checkpoint_extra(run.model)})
    state = {"epoch": epoch, "optimizer": run.opt.state_dict(), "loss": run.loss.state_dict(), "best": run.best,
             "rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state(run.device) if run.device.type == "cuda" else None,
             "ema": run.ema.state_dict() if run.ema is not None else None,
             "history": json.dumps(run.history), "started": run.started, "seconds": run.seconds}
    torch.save(state, tmp / STATE_FILE)
    if old.exists():
        shutil.rmtree(old)
    if last.exists():
        last.rename(old)
    tmp.rename(last)
    if old.exists():
        shutil.rmtree(old)


def write_metrics(out: Path, history: list[dict[str, Any]]) -> None:
    """``metrics.jsonl`` as one line per epoch of ``history``, rewritten when it differs (a run killed between
    saving ``last/`` and appending the epoch's line, or after appending a line ``last/`` lacks)."""
    f = out / "metrics.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in history)
    if not f.is_file() or f.read_text() != text:
        write_text(f, text)


def load_state(run: Run) -> None:
    state = torch.load(run.out / "last" / STATE_FILE, map_location="cpu", weights_only=True)
    run.start_epoch, run.best = int(state["epoch"]) + 1, float(state.get("best", -1.0))
    run.history = json.loads(state["history"])
    run.started, run.seconds_before = state["started"], float(state["seconds"])
    if run.main:
        write_metrics(run.out, run.history)
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
    """One pass over the training data: summed loss, hits, images and predictions counted, over all processes."""
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
    sums = torch.zeros(4, dtype=torch.float64)
    data = batches(run.dataset, cfg.batch_size, derive_seed(cfg.seed, "shuffle", epoch), shuffle=True,
                   workers=cfg.workers, rank=run.rank, world=run.world, targets=run.task.targets)
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
    loss_sum, hits, n, counted = sums.tolist()
    return {"loss": loss_sum, "correct": hits, "n": n, "counted": counted, "lr": lr}


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
    batch, so accumulation and data parallelism give the global mean's gradient), then one step."""
    cfg, device = run.cfg, run.device
    if run.augment is not None:
        x, y = run.augment(x, y)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    x, y = run.task.augment(x, y, aug_gen)
    if cfg.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    autocast = device.type == "cuda" and cfg.amp
    run.opt.zero_grad(set_to_none=True)
    sums = torch.zeros(4, dtype=torch.float64)
    micro = [(a, b) for a, b in zip(x.tensor_split(cfg.accum_steps), y.tensor_split(cfg.accum_steps)) if len(a)]
    for j, (xm, ym) in enumerate(micro):
        sync = j == len(micro) - 1 or run.world == 1
        ctx = run.step.no_sync() if not sync and hasattr(run.step, "no_sync") else contextlib.nullcontext()
        with ctx:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss, logits, _ = run.step(xm, ym, epoch)
            check_finite(run, loss, epoch, step)
            (loss * (len(xm) * run.world / n_global)).backward()
        hits, counted = run.task.hits(logits.detach(), ym)
        sums += torch.tensor([float(loss.detach()) * len(xm), float(hits), len(xm), float(counted)],
                             dtype=torch.float64)
    if cfg.grad_clip:
        nn.utils.clip_grad_norm_(list(run.model.parameters()) + [p for _, p in run.loss.optimized_parameters()],
                                 cfg.grad_clip)
    run.opt.step()
    run.loss.after_step()
    if run.ema is not None:
        run.ema.update(run.model)
    return sums


def validate(run: Run) -> dict[str, Any]:
    """The task's validation record of the evaluated (EMA) model (every rank calls it: see :func:`validate_model`)."""
    if run.val is None:
        return {}
    model = run.eval_model()
    if run.world > 1:
        broadcast_buffers(model)
    return validate_model(run.task, model, run.val, run.device, batch_size=VAL_BATCH_SIZE, rank=run.rank,
                          world=run.world, workers=run.cfg.workers)


def finish_epoch(run: Run, epoch: int, sums: dict[str, float], t0: float, progress: bool) -> dict[str, Any]:
    """Validate, keep the best epoch, write the checkpoint and the metrics line (main process); the epoch's record."""
    if not math.isfinite(sums["loss"]):
        raise RobustvitError(f"training diverged at epoch {epoch + 1} (loss is not finite); lower --lr")
    record: dict[str, Any] = {"epoch": epoch + 1, "lr": sums["lr"], "train_loss": sums["loss"] / sums["n"],
                              run.task.train_accuracy: sums["correct"] / max(sums["counted"], 1),
                              **run.loss.metrics(), **validate(run)}
    if run.cfg.select_best:
        score = record[run.task.score_key()]
        record["best"] = score is not None and score > run.best
        if record["best"]:
            run.best = score
            if run.main:
                save_checkpoint(run.eval_model(), run.out / "best",
                                extra={"epoch": epoch + 1, "score": score, **run.task.checkpoint_extra(run.model)})
    record["seconds"] = round(time.time() - t0, 2)
    run.history.append(record)
    if run.main:
        save_state(run, epoch)
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
        save_checkpoint(model, path, extra={**run.task.checkpoint_extra(model), "train_config": run.cfg.to_dict()})
    if run.world > 1:
        dist.barrier()
    return path


def train(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> Path:
    """Train ``cfg.model`` on ``cfg.data`` (``cfg.task``); returns the final checkpoint folder."""
    check_kind(cfg.out, "train")
    run = setup_run(cfg, resume)
    if run.main:
        run.out.mkdir(parents=True, exist_ok=True)
        cfg.save(run.out / "config.yaml")
    for epoch in range(run.start_epoch, cfg.epochs + cfg.cooldown_epochs):
        t0 = time.time()
        finish_epoch(run, epoch, train_epoch(run, epoch, progress), t0, progress)
    path = final_checkpoint(run)
    if run.main:
        write_results(run)
    return path


def train_segmenter(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> Path:
    """:func:`train` with ``task="segment"`` (``robustvit train --task segment``)."""
    return train(dataclasses.replace(cfg, task="segment"), resume=resume, progress=progress)


def evaluate_segmentation(model: Normalized, dataset: ImageDataset, device: torch.device, batch_size: int = 100,
                          limit: int | None = None) -> dict[str, Any]:
    """:func:`robustvit.metrics.dense.segmentation_scores` of ``model`` on the first ``limit`` images with masks."""
    task, k = Segment(), int(model.spec.num_classes)
    counts = task.val_counts(model, shard_batches(dataset, batch_size, limit, targets=task.targets), device)
    return segmentation_scores(counts.cpu().view(k, k))


def write_results(run: Run) -> Path:
    """``OUT/results.json`` of kind ``train`` (:mod:`robustvit.runs`); ``training_seconds`` sums every session."""
    kept = [d for d in ("checkpoint", "best", "last") if (run.out / d).is_dir()]
    cfg = run.cfg
    data = data_record(spec=cfg.data, num_images=len(run.dataset), num_classes=run.dataset.num_classes,
                       subset=run.subset, val_spec=cfg.val_data, val_subset=run.val_subset)
    # named by the run (its folder), as `eval` names RUN/checkpoint: a report joins the training and its evaluations
    record = model_record(run.eval_model(), run.out.resolve().name or cfg.model, cfg.model)
    weights = run.out / "checkpoint" / "model.safetensors"
    start = "pretrained" if cfg.pretrained else cfg.weights or ("checkpoint" if is_checkpoint_dir(cfg.model)
                                                                else "random initialisation")
    record["weights"] = {"source": "trained", "checkpoint": "checkpoint", "started_from": start,
                         "sha256": hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None}
    record["pretrained"] = start != "random initialisation"   # true only when training started from given weights
    header = run_header(device=run.device, seed=cfg.seed, started=run.started, world_size=run.world,
                        batch_size=cfg.batch_size, task=cfg.task, training_seconds=round(run.seconds, 2))
    return write_train_results(run.out, cfg.to_dict(), run.history, kept, record, data, run=header,
                               loss={"name": cfg.loss if cfg.task == "classify" else run.loss.name,
                                     **run.loss.resolved()})
