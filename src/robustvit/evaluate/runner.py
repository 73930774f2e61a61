"""The evaluation runner: models × suites × chunks of a data set → resumable units → ``results.json``.

``run_eval(EvalConfig(...))`` is what ``robustvit eval`` calls. Under ``torchrun`` every rank evaluates
the chunks ``c`` with ``c % world_size == rank`` (all ranks share the SQLite store) and rank 0 merges.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

import robustvit
from robustvit.data import UNREADABLE, ImageDataset, Resize, create_dataset, dataset_for_model, model_resize
from robustvit.data.classmap import load_class_map, match_classes as _match_classes
from robustvit.data.subset import Subset, make_subset
from robustvit.errors import RobustvitError
from robustvit.evaluate.store import ResultStore
from robustvit.evaluate.suites import Batch, EvalContext, Suite, create_suite
from robustvit.progress import progress_bar
from robustvit.models import Normalized, create_model, is_checkpoint_dir
from robustvit.models.factory import RANDOM_LABEL, is_comparable, warn_if_random
from robustvit.utils import derive_seed, resolve_device, sum_stats

RESULTS_FILE = "results.json"


@dataclass
class EvalConfig:
    models: list[str]
    data: str
    suites: list[str] = field(default_factory=lambda: ["clean"])
    out: str = "eval-out"
    limit: int | None = None
    batch_size: int = 128
    device: str = "auto"
    seed: int = 0
    strict: bool = False
    workers: int = 0
    options: dict[str, Any] = field(default_factory=dict)   # global suite options: eps, norm, steps, …
    progress: bool = True
    command: str | None = None
    pretrained: bool = False        # timm models: load timm's pretrained weights (HF hub / cache)
    weights: str | None = None      # a .safetensors/.pth state dict for the (single) named architecture
    class_map: str | None = None    # JSON: the model classes of each data class (a 1000-class model on fewer classes)
    subset_method: str = "stratified"   # how --limit N (and suites' limit=) draw images: stratified or first
    subset: str | None = None       # a file listing the images (indices or paths relative to the data root)
    subset_seed: int | None = None  # seed of the stratified draw (default: seed)


def model_dir_name(name: str, model: Normalized) -> str:
    return model.spec.architecture if is_checkpoint_dir(name) or os.sep in name else name


def run_eval(cfg: EvalConfig) -> dict[str, dict[str, Any]]:
    """Evaluate every model; returns {model name: results dict}; writes OUT[/<model>]/results.json."""
    if not cfg.models:
        raise RobustvitError("give at least one --model")
    if cfg.limit is not None and cfg.limit < 1:
        raise RobustvitError(f"--limit must be >= 1, got {cfg.limit}")
    if cfg.batch_size < 1:
        raise RobustvitError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    suites = [create_suite(s) for s in cfg.suites]
    keys = [s.strip() for s in cfg.suites]
    if len(set(keys)) != len(keys):
        raise RobustvitError("a suite is listed twice in --suite")
    device = resolve_device(cfg.device)
    rank, world = _init_distributed(device)
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    if cfg.weights is not None and len(cfg.models) != 1:
        raise RobustvitError("--weights FILE applies to one model; evaluate the models one at a time")
    models: dict[str, Normalized] = {}
    for name in cfg.models:
        if name.startswith(DETECTOR_PREFIX):
            m = _detector(name, cfg).to(device).eval()
        else:
            m = create_model(name, pretrained=cfg.pretrained and not is_checkpoint_dir(name),
                             checkpoint=cfg.weights).to(device).eval()
        warn_if_random(name, m)
        key = model_dir_name(name, m)
        if key in models:
            key = f"{key}-{len(models)}"
        models[key] = m
    datasets: dict[Resize, ImageDataset] = {}       # one per preprocessing: models with the same one share it
    for key, m in models.items():
        resize = _data_key(m)
        if resize not in datasets:
            datasets[resize] = (create_dataset(cfg.data, strict=cfg.strict) if resize is None
                                else dataset_for_model(cfg.data, m.spec, strict=cfg.strict))
        match_classes(key, m, datasets[resize], cfg)
    if len(datasets) > 1 and any(s.name == "transfer" for s in suites):
        seen = ", ".join(f"{r.size}px crop_pct {r.crop_pct} {r.interpolation}" for r in datasets)
        raise RobustvitError(f"the transfer suite evaluates the examples crafted on one model on the others, so every "
                             f"model must see the same images; these models preprocess differently ({seen}): run "
                             "transfer on models with the same input size, crop_pct and interpolation")
    first = next(iter(datasets.values()))
    subset_seed = cfg.seed if cfg.subset_seed is None else cfg.subset_seed
    subset = make_subset(first, limit=cfg.limit, method=cfg.subset_method, seed=subset_seed, file=cfg.subset)
    multi = len(models) > 1
    results: dict[str, dict[str, Any]] = {}
    for key, model in models.items():
        dataset = datasets[_data_key(model)]
        out = Path(cfg.out) / key if multi else Path(cfg.out)
        ctx = EvalContext(model=model, model_name=key, models=models, data_spec=cfg.data, dataset=dataset,
                          num_classes=model.spec.num_classes, device=device, seed=cfg.seed, options=cfg.options,
                          out_dir=out, subset=subset)
        store = _open_store(out, rank, world)
        store.check_fingerprint({"model": key, "checkpoint": _checkpoint_id(cfg.models[list(models).index(key)]),
                                 "data": cfg.data, "limit": cfg.limit, "chunk": cfg.batch_size, "seed": cfg.seed,
                                 "subset": subset.fingerprint(),
                                 "options": {k: str(v) for k, v in sorted(cfg.options.items()) if v is not None}})
        _run_units(ctx, store, suites, keys, dataset, cfg, rank, world)
        if world > 1:
            dist.barrier()
        if rank == 0:
            results[key] = _finalize(ctx, store, suites, keys, dataset, cfg, world)
            out.mkdir(parents=True, exist_ok=True)
            tmp = out / (RESULTS_FILE + ".tmp")
            tmp.write_text(json.dumps(results[key], indent=2))
            tmp.replace(out / RESULTS_FILE)
        store.close()
    if world > 1:
        dist.barrier()
    return results


DETECTOR_PREFIX = "tv:"


def _detector(name: str, cfg: EvalConfig) -> nn.Module:
    """``tv:NAME``: a torchvision detector (the ``det_*`` suites); random weights get the data's class count."""
    from robustvit.models.detection import create_detector

    if cfg.weights is not None:
        raise RobustvitError(f"--weights does not apply to the torchvision detector {name}; use --pretrained")
    k = None if cfg.pretrained else create_dataset(cfg.data).num_classes
    return create_detector(name[len(DETECTOR_PREFIX):], pretrained=cfg.pretrained, num_classes=k)


def _data_key(model: nn.Module) -> Resize | None:
    """How a model reads the data: its own preprocessing, or (None) images at their native size (detectors)."""
    return None if model.spec.family == "detector" else model_resize(model.spec)


def match_classes(key: str, model: Normalized, dataset: ImageDataset, cfg: EvalConfig) -> None:
    """Check the model's classes against the data's; with ``cfg.class_map``, map them (see :func:`load_class_map`)."""
    _match_classes(model, dataset, cfg.class_map, model_name=key, data_spec=cfg.data)


def _checkpoint_id(name: str) -> str:
    p = Path(name) / "model.safetensors"
    return f"{p.stat().st_size}:{int(p.stat().st_mtime)}" if p.is_file() else name


def _open_store(out: Path, rank: int, world: int) -> ResultStore:
    """Rank 0 creates the SQLite store (and switches it to WAL) before the other ranks open it: two
    processes creating the same database at once can fail with "database is locked"."""
    if rank == 0:
        store = ResultStore(out)
    if world > 1:
        dist.barrier()
    return store if rank == 0 else ResultStore(out)


def _init_distributed(device: torch.device) -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class _Plan:
    """One pass over images of a data set: ``images`` (ascending data-set indices) in chunks of the batch size,
    and the suites evaluated on them, each on the first ``limit`` of them (None: all)."""

    dataset: ImageDataset
    images: torch.Tensor
    members: dict[int, int | None]
    tag: str
    data_part: str | None = None   # counts the run's images read (results.json ``data``) under this part


def _base_subset(ds: ImageDataset, run: ImageDataset, aligned: bool, ctx: EvalContext, cfg: EvalConfig) -> Subset:
    """The run's images for the run's data set, and for a suite's own data set aligned with it (``data_aligned``
    and as many images: e.g. ImageNet-C next to imagenet:/val); else every image of the suite's own data set
    (``--limit`` / ``--subset`` are about ``--data``; the suite's ``limit=`` draws from its own)."""
    assert ctx.subset is not None
    if ds is run or (aligned and len(ds) == len(run)):
        return ctx.subset
    return make_subset(ds, method=cfg.subset_method, seed=ctx.subset.seed)


def _plans(ctx: EvalContext, suites: list[Suite], dataset: ImageDataset, cfg: EvalConfig) -> list[_Plan]:
    """Group the suites by data set; a suite's ``limit=n`` takes n of the group's images (option ``subset``,
    default the run's ``--subset-method``; :meth:`Subset.draw`). The first n — ``first`` — ride on the group's
    pass; a stratified sample gets a pass of its own, so that its chunks are full batches. Sets
    ``suite.subset_info`` (the suite's own sample, for results.json) and ``suite.subset_note`` (comparability)."""
    groups: dict[int, list[int]] = {}
    datasets: dict[int, ImageDataset] = {id(dataset): dataset}
    for i, suite in enumerate(suites):
        own = suite.dataset(ctx)
        ds = own if own is not None else dataset
        datasets[id(ds)] = ds
        groups.setdefault(id(ds), []).append(i)
    plans: list[_Plan] = []
    for ds_id, members in groups.items():
        ds = datasets[ds_id]
        base = _base_subset(ds, dataset, any(suites[i].data_aligned for i in members), ctx, cfg)
        tag = "data" if ds is dataset else suites[members[0]].name
        main = _Plan(ds, base.indices, {}, tag)
        extra: dict[tuple[str, int], _Plan] = {}
        for i in members:
            suite, n = suites[i], suites[i].max_images
            if n is not None and n < 1:
                raise RobustvitError(f"suite {suite.key}: limit must be >= 1, got {n}")
            method = suite.subset_method or cfg.subset_method
            sample = base if n is None or n >= len(base.indices) else base.sample(n, method)
            suite.subset_info = None if sample is ctx.subset else sample.record()
            suite.subset_note = sample.note()
            if sample is base or method == "first":       # the first n of the group's images
                main.members[i] = None if sample is base else n
            else:
                if (method, n) not in extra:
                    extra[(method, n)] = _Plan(ds, sample.indices, {}, f"{suite.name} ({n} images)")
                extra[(method, n)].members[i] = None
        group = ([main] if main.members else []) + list(extra.values())
        if ds is dataset and group:        # the widest pass counts the run's images (and the unreadable ones)
            widest = main if main.members else max(extra.values(), key=lambda p: len(p.images))
            widest.data_part = "all" if main.members else f"sample:{len(widest.images)}"
        plans += group
    return plans


def _run_units(ctx: EvalContext, store: ResultStore, suites: list[Suite], keys: list[str], dataset: ImageDataset,
               cfg: EvalConfig, rank: int, world: int) -> None:
    """Evaluate every unit not yet in the store, pass by pass (:func:`_plans`). Chunk ``c`` of a pass holds its
    images c·B … (c+1)·B−1; ``Batch.index`` is each image's position in the pass (0 = the suite's first
    image), ``Batch.data_index`` its index in the data set."""
    b = cfg.batch_size
    for plan in _plans(ctx, suites, dataset, cfg):
        ds, images = plan.dataset, plan.images
        sizes = {i: len(images) if m is None else min(m, len(images)) for i, m in plan.members.items()}
        parts = {i: suites[i].parts(ctx) for i in plan.members}
        done = store.done()
        span = max(sizes.values())                  # images read: up to the largest member's
        nchunks = math.ceil(span / b)
        todo: list[tuple[int, list[tuple[int, str]]]] = []
        for c in range(nchunks):
            if c % world != rank:
                continue
            pending = [(i, p) for i in plan.members if c * b < sizes[i] for p in parts[i] if (keys[i], p, c) not in done]
            if plan.data_part is not None and ("_data", plan.data_part, c) not in done:
                pending.append((-1, plan.data_part))
            if pending:
                todo.append((c, pending))
        if not todo:
            continue
        chunks = [torch.arange(c * b, min(span, (c + 1) * b)) for c, _ in todo]
        with progress_bar(cfg.progress and rank == 0, f"{ctx.model_name} · {plan.tag}", len(todo)) as tick:
            for (c, pending), pos, (x, y) in zip(todo, chunks, _load_chunks(ds, [images[p] for p in chunks], cfg)):
                ids = images[pos]
                keep = y != UNREADABLE
                if (-1, plan.data_part) in pending:
                    bad = ids[~keep].tolist()
                    files = [ds.samples[j][0] for j in bad][:20] if hasattr(ds, "samples") else []
                    store.put("_data", str(plan.data_part), c, {"n": int(len(y)), "unreadable": len(bad), "files": files},
                              0.0)
                x, y, ids, pos = x[keep].to(ctx.device, non_blocking=True), y[keep].to(ctx.device), ids[keep], pos[keep]
                for i, part in pending:
                    if i < 0:
                        continue
                    gen = torch.Generator(device=ctx.device)
                    gen.manual_seed(derive_seed(cfg.seed, keys[i], part, c))
                    sel = pos < sizes[i]
                    if bool(sel.all()):
                        batch = Batch(x, y, pos, gen, ids)
                    else:
                        dev = sel.to(x.device)
                        batch = Batch(x[dev], y[dev], pos[sel], gen, ids[sel])
                    t0 = time.time()
                    stats = suites[i].run(ctx, part, batch) if len(batch.y) else {}
                    if ctx.device.type == "cuda":
                        torch.cuda.synchronize(ctx.device)
                    store.put(keys[i], part, c, stats, time.time() - t0)
                tick()


def _load_chunks(ds: ImageDataset, chunks: list[torch.Tensor], cfg: EvalConfig):  # noqa: ANN202
    """Yield (x, y) for each chunk of data-set indices (CPU tensors)."""
    if cfg.workers == 0:
        for ids in chunks:
            x, y = ds.get_batch(ids)
            yield x, torch.as_tensor(y)
        return
    loader = DataLoader(ds, batch_sampler=[t.tolist() for t in chunks], num_workers=cfg.workers)
    for x, y in loader:
        yield x, torch.as_tensor(y)


def _finalize(ctx: EvalContext, store: ResultStore, suites: list[Suite], keys: list[str], dataset: ImageDataset,
              cfg: EvalConfig, world: int) -> dict[str, Any]:
    data_units = store.stats("_data")      # one part: "all", or "sample:N" when every suite drew its own sample
    data_items = data_units.get("all") or next(iter(data_units.values()), [])
    data_stats = sum_stats(data_items)
    files = [f for s in data_items for f in s.get("files", [])][:20]
    suites_out: dict[str, Any] = {}
    for suite, key in zip(suites, keys):
        stats = {part: sum_stats(items) for part, items in store.stats(key).items()}
        missing = [p for p in suite.parts(ctx) if p not in stats]
        if missing:
            raise RobustvitError(f"suite {key}: parts {missing[:3]} have no results (was the run interrupted?); re-run the command")
        res = suite.finalize(ctx, stats)
        res.setdefault("seconds", round(store.seconds(key), 3))
        if suite.subset_info is not None:
            res.setdefault("subset", suite.subset_info)
        suites_out[key] = res
    model = ctx.model
    notes = comparability_notes(ctx, suites, keys)
    return {
        "schema": 1,
        "run": {"robustvit": robustvit.__version__, "torch": torch.__version__, "device": str(ctx.device),
                "device_name": torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu",
                "seed": cfg.seed, "started": store.meta("started"), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": cfg.command or " ".join(sys.argv), "world_size": world, "batch_size": cfg.batch_size,
                "limit": cfg.limit, "options": {k: v for k, v in cfg.options.items() if v is not None}},
        "model": {"name": ctx.model_name, "source": cfg.models[list(ctx.models).index(ctx.model_name)],
                  "params": sum(p.numel() for p in model.parameters()), "spec": model.spec.to_dict(),
                  "pretrained": model.weights["pretrained"], "weights": model.weights,
                  "preprocessing": model.spec.preprocessing(), "class_map": cfg.class_map},
        "data": {"spec": cfg.data, "num_images": int(data_stats.get("n", 0)) - int(data_stats.get("unreadable", 0)),
                 "num_unreadable": int(data_stats.get("unreadable", 0)), "unreadable_files": files,
                 "num_classes": dataset.num_classes, "subset": ctx.subset.record() if ctx.subset else None},
        "comparable": not notes, "notes": notes,
        "suites": suites_out,
    }


def comparability_notes(ctx: EvalContext, suites: list[Suite], keys: list[str]) -> list[str]:
    """Why the results are not comparable with published whole-data-set numbers (empty: they are): a subset that
    is not a published list (run-wide or a suite's ``limit=``), random weights."""
    notes = []
    run_note = ctx.subset.note() if ctx.subset is not None else None
    if run_note:
        notes.append(run_note)
    for suite, key in zip(suites, keys):
        note = getattr(suite, "subset_note", None)
        if note and note != run_note:
            notes.append(f"{key}: {note}")
    if not is_comparable(ctx.model):
        notes.append(RANDOM_LABEL["note"])
    return notes


__all__ = ["EvalConfig", "run_eval", "RESULTS_FILE"]
