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
from torch.utils.data import DataLoader

import robustvit
from robustvit.data import UNREADABLE, ImageDataset, Resize, dataset_for_model, model_resize
from robustvit.errors import RobustvitError
from robustvit.evaluate.store import ResultStore
from robustvit.evaluate.suites import Batch, EvalContext, Suite, create_suite
from robustvit.progress import progress_bar
from robustvit.models import Normalized, create_model, is_checkpoint_dir
from robustvit.models.factory import warn_if_random
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
        m = create_model(name, pretrained=cfg.pretrained and not is_checkpoint_dir(name),
                         checkpoint=cfg.weights).to(device).eval()
        warn_if_random(name, m)
        key = model_dir_name(name, m)
        if key in models:
            key = f"{key}-{len(models)}"
        models[key] = m
    datasets: dict[Resize, ImageDataset] = {}       # one per preprocessing: models with the same one share it
    for key, m in models.items():
        resize = model_resize(m.spec)
        if resize not in datasets:
            datasets[resize] = dataset_for_model(cfg.data, m.spec, strict=cfg.strict)
        match_classes(key, m, datasets[resize], cfg)
    if len(datasets) > 1 and any(s.name == "transfer" for s in suites):
        seen = ", ".join(f"{r.size}px crop_pct {r.crop_pct} {r.interpolation}" for r in datasets)
        raise RobustvitError(f"the transfer suite evaluates the examples crafted on one model on the others, so every "
                             f"model must see the same images; these models preprocess differently ({seen}): run "
                             "transfer on models with the same input size, crop_pct and interpolation")
    n = min(len(ds) for ds in datasets.values())
    if cfg.limit is not None and cfg.limit > n:
        raise RobustvitError(f"--limit {cfg.limit} is larger than the data set ({n} images); use --limit {n} or less")
    multi = len(models) > 1
    results: dict[str, dict[str, Any]] = {}
    for key, model in models.items():
        dataset = datasets[model_resize(model.spec)]
        out = Path(cfg.out) / key if multi else Path(cfg.out)
        ctx = EvalContext(model=model, model_name=key, models=models, data_spec=cfg.data, dataset=dataset,
                          num_classes=model.spec.num_classes, device=device, seed=cfg.seed, options=cfg.options,
                          out_dir=out)
        store = _open_store(out, rank, world)
        store.check_fingerprint({"model": key, "checkpoint": _checkpoint_id(cfg.models[list(models).index(key)]),
                                 "data": cfg.data, "limit": cfg.limit, "chunk": cfg.batch_size, "seed": cfg.seed,
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


def match_classes(key: str, model: Normalized, dataset: ImageDataset, cfg: EvalConfig) -> None:
    """Check the model's classes against the data's; with ``cfg.class_map``, map them (see :func:`load_class_map`)."""
    have, want = model.spec.num_classes, dataset.num_classes
    if cfg.class_map is not None:
        model.map_classes(load_class_map(cfg.class_map, dataset.classes), list(dataset.classes))
    elif have != want:
        raise RobustvitError(
            f"model {key} has {have} classes but {cfg.data} has {want}; give --class-map FILE (JSON: for each data "
            f"class, the model class index or indices) or evaluate a model trained on these classes "
            f"(robustvit finetune --model {key} --data ...)")


def load_class_map(path: str | Path, classes: list[str]) -> list[list[int]]:
    """A class map file → for each data class (in order), its model class indices. JSON: a list with one
    entry per data class, or an object keyed by data class name; an entry is an index or a list of indices
    (the data class then scores as the best of them)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RobustvitError(f"cannot read the class map {path} ({type(e).__name__}); give a JSON list or object") from None
    if isinstance(raw, dict):
        missing = [c for c in classes if c not in raw]
        if missing:
            raise RobustvitError(f"class map {path} has no entry for data class {missing[0]!r} ({len(missing)} missing)")
        raw = [raw[c] for c in classes]
    if not isinstance(raw, list) or len(raw) != len(classes):
        raise RobustvitError(f"class map {path} must have one entry per data class ({len(classes)})")
    groups = [[v] if isinstance(v, int) else v for v in raw]
    if not all(isinstance(g, list) and g and all(isinstance(c, int) for c in g) for g in groups):
        raise RobustvitError(f"class map {path}: each entry must be a model class index or a list of them")
    return groups


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


def _suite_size(suite: Suite, dataset: ImageDataset, cfg: EvalConfig) -> int:
    n = len(dataset) if cfg.limit is None else min(cfg.limit, len(dataset))
    return n if suite.max_images is None else min(n, suite.max_images)


def _run_units(ctx: EvalContext, store: ResultStore, suites: list[Suite], keys: list[str], dataset: ImageDataset,
               cfg: EvalConfig, rank: int, world: int) -> None:
    """Evaluate every unit not yet in the store; suites with their own data set get their own pass."""
    groups: dict[int, list[int]] = {}
    datasets: dict[int, ImageDataset] = {id(dataset): dataset}
    for i, suite in enumerate(suites):
        own = suite.dataset(ctx)
        ds = own if own is not None else dataset
        datasets[id(ds)] = ds
        groups.setdefault(id(ds), []).append(i)
    for ds_id, members in groups.items():
        ds = datasets[ds_id]
        sizes = {i: _suite_size(suites[i], ds, cfg) for i in members}
        parts = {i: suites[i].parts(ctx) for i in members}
        done = store.done()
        nchunks = math.ceil(max(sizes.values()) / cfg.batch_size) if sizes else 0
        todo: list[tuple[int, list[tuple[int, str]]]] = []
        for c in range(nchunks):
            if c % world != rank:
                continue
            pending = [(i, p) for i in members if c * cfg.batch_size < sizes[i] for p in parts[i]
                       if (keys[i], p, c) not in done]
            if ds is dataset and ("_data", "all", c) not in done:
                pending.append((-1, "all"))
            if pending:
                todo.append((c, pending))
        if not todo:
            continue
        tag = "data" if ds is dataset else suites[members[0]].name
        with progress_bar(cfg.progress and rank == 0, f"{ctx.model_name} · {tag}", len(todo)) as tick:
            for (c, pending), (x, y, idx) in zip(todo, _load_chunks(ds, [c for c, _ in todo], cfg)):
                keep = y != UNREADABLE
                if ds is dataset and (-1, "all") in pending:
                    bad = idx[~keep].tolist()
                    files = [ds.samples[j][0] for j in bad][:20] if hasattr(ds, "samples") else []
                    store.put("_data", "all", c, {"n": int(len(y)), "unreadable": len(bad), "files": files}, 0.0)
                x, y, idx = x[keep].to(ctx.device, non_blocking=True), y[keep].to(ctx.device), idx[keep]
                for i, part in pending:
                    if i < 0:
                        continue
                    end = sizes[i] - c * cfg.batch_size
                    gen = torch.Generator(device=ctx.device)
                    gen.manual_seed(derive_seed(cfg.seed, keys[i], part, c))
                    sel = idx < sizes[i]
                    if not bool(sel.all()) and end < len(idx):
                        batch = Batch(x[sel.to(x.device)], y[sel.to(y.device)], idx[sel], gen)
                    else:
                        batch = Batch(x, y, idx, gen)
                    t0 = time.time()
                    stats = suites[i].run(ctx, part, batch) if len(batch.y) else {}
                    if ctx.device.type == "cuda":
                        torch.cuda.synchronize(ctx.device)
                    store.put(keys[i], part, c, stats, time.time() - t0)
                tick()


def _load_chunks(ds: ImageDataset, chunks: list[int], cfg: EvalConfig):  # noqa: ANN202
    """Yield (x, y, index) for each chunk (CPU tensors)."""
    b, n = cfg.batch_size, len(ds)
    index_lists = [list(range(c * b, min((c + 1) * b, n))) for c in chunks]
    if cfg.workers == 0:
        for ids in index_lists:
            t = torch.tensor(ids)
            x, y = ds.get_batch(t)
            yield x, y, t
        return
    loader = DataLoader(ds, batch_sampler=index_lists, num_workers=cfg.workers)
    for ids, (x, y) in zip(index_lists, loader):
        yield x, torch.as_tensor(y), torch.tensor(ids)


def _finalize(ctx: EvalContext, store: ResultStore, suites: list[Suite], keys: list[str], dataset: ImageDataset,
              cfg: EvalConfig, world: int) -> dict[str, Any]:
    data_stats = sum_stats(store.stats("_data").get("all", []))
    files = [f for s in store.stats("_data").get("all", []) for f in s.get("files", [])][:20]
    suites_out: dict[str, Any] = {}
    for suite, key in zip(suites, keys):
        stats = {part: sum_stats(items) for part, items in store.stats(key).items()}
        missing = [p for p in suite.parts(ctx) if p not in stats]
        if missing:
            raise RobustvitError(f"suite {key}: parts {missing[:3]} have no results (was the run interrupted?); re-run the command")
        res = suite.finalize(ctx, stats)
        res.setdefault("seconds", round(store.seconds(key), 3))
        suites_out[key] = res
    model = ctx.model
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
                 "num_classes": dataset.num_classes},
        "suites": suites_out,
    }


__all__ = ["EvalConfig", "run_eval", "RESULTS_FILE"]
