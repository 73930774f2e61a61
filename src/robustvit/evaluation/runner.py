"""The evaluation runner: models × suites × chunks of a data set → resumable units → ``results.json``.

``run_eval(EvalConfig(...))`` is what ``robustvit eval`` calls; it runs on the run engine
(:mod:`robustvit.runs`): the units go to ``OUT[/<model>]/units.sqlite`` as they finish, and ``results.json``
(schema 2, kind ``eval``) is written from them. Under ``torchrun`` every rank evaluates the chunks
``c`` with ``c % world_size == rank`` (all ranks share the store) and rank 0 writes the results. With
``shard="K/N"`` the run evaluates only the K-th of N disjoint sets of chunks (1-based; for job arrays) and
writes ``OUT/shard.json`` instead of ``results.json``; :func:`merge_shards` (``robustvit merge``) joins the
shards' stores and writes the ``results.json`` one unsharded run writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustvit.data import UNREADABLE, ImageDataset, Resize, create_dataset, dataset_for_model, model_resize
from robustvit.data.classmap import match_classes
from robustvit.data.loader import ChunkLoader, PartsDataset, check_decode, float_images, resolve_workers
from robustvit.data.subset import Subset, make_subset
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites import Batch, EvalContext, Suite, create_suite
from robustvit.evaluation.suites.base import PRECISION_CHOICES, Plan, suite_precision
from robustvit.models.wrapper import inference_settings
from robustvit.progress import progress_bar
from robustvit.models import Normalized, create_model, is_checkpoint_dir
from robustvit.models.factory import warn_if_random
from robustvit.models.sources import build_from_source, split_source
from robustvit.protocols import subset_note
from robustvit.runs import (RESULTS_FILE, RunFolder, Shard, UnitStore, Worker, barrier, count_flops,
                            init_distributed, run_units, weights_id, write_json)
from robustvit.runs.scheduler import Unit, pending_chunks
from robustvit.utils import derive_seed, resolve_device, sum_stats

SHARD_FILE = "shard.json"
#: The run-wide suite options (``EvalConfig.options``; ``--eps``, ``--norm``, ``--steps``): attack suites read them.
RUN_OPTIONS = ("eps", "norm", "steps")


@dataclass
class EvalConfig:
    models: list[str | Normalized] | dict[str, str | Normalized]   # names / checkpoint folders / ``tv:NAME``
    #                                 detectors, or robustvit models (``Normalized``) from Python; a dict names them
    #                                 (results.json ``model.name`` and folder: the key)
    data: str
    suites: list[str] = field(default_factory=lambda: ["clean"])
    out: str = "eval-out"
    limit: int | None = None
    batch_size: int = 128           # images per forward pass (attacks: divided by their memory factor); not a setting
    #                                 of the results: a run resumes with another --batch-size to identical results
    chunk_size: int | None = None   # images per unit of work (stored, resumed, a torchrun rank's share); default: the
    #                                 folder's own when resuming, else batch_size
    device: str = "auto"
    seed: int = 0
    strict: bool = False
    workers: int | str = "auto"     # data-loading worker processes: auto = min(8, cores − 1), or a number
    decode: str = "cpu"             # JPEG decoding of folder data: cpu (libjpeg-turbo, as timm) or gpu (nvjpeg)
    precision: str = "auto"         # fp32 | tf32 | bf16 | auto (bf16 on CUDA for the clean, corruption, shift suites)
    compile: bool = False           # torch.compile the network (dynamic shapes)
    deterministic: bool = False     # torch's deterministic algorithms (and the corruptions' deterministic kernels)
    options: dict[str, Any] = field(default_factory=dict)   # global suite options: eps, norm, steps, …
    progress: bool = True
    command: str | None = None
    pretrained: bool = False        # timm models: load timm's pretrained weights (HF hub / cache)
    weights: str | None = None      # a .safetensors/.pth state dict for the (single) named architecture
    model_dir: str | None = None    # robustbench: models: the zoo's weights, <dir>/<dataset>/<threat_model>/<name>.pt;
    #                                 hf: models: the Hugging Face cache folder
    class_map: str | None = None    # JSON: the model classes of each data class (a 1000-class model on fewer classes)
    subset_method: str = "stratified"   # how --limit N (and suites' limit=) draw images: stratified or first
    subset: str | None = None       # a file listing the images (indices or paths relative to the data root)
    subset_seed: int | None = None  # seed of the stratified draw (default: seed)
    shard: str | None = None        # "K/N": evaluate the K-th (1-based) of N disjoint sets of chunks (job arrays)
    flops: bool = False             # record model.flops: forward FLOPs of one image (torch.utils.flop_counter)


#: Checkpoint folders that a training run names itself (``OUT/checkpoint``, ``OUT/last``, ``OUT/best``).
_RUN_CHECKPOINTS = ("checkpoint", "last", "best")


def model_dir_name(name: str | nn.Module, model: Normalized) -> str:
    """The run's model name (results.json ``model.name``; its folder in a several-model run: :func:`folder_name`):
    a timm or robustvit name or a model source's spec as given (``hf:DIR`` as ``hf:<folder name>``); a checkpoint
    folder by its own name, or by its training run's for ``RUN/checkpoint`` (``RUN``), ``RUN/last`` and ``RUN/best``
    (``RUN-last``, ``RUN-best``); a Python module by its architecture."""
    if not isinstance(name, str):
        return model.spec.architecture
    if (split := split_source(name)) is not None:      # a source's spec; a local folder by its own name
        return f"{split[0]}:{Path(split[1]).name}" if Path(split[1]).is_dir() else name
    if not (is_checkpoint_dir(name) or os.sep in name):
        return name
    path = Path(name).resolve()
    if path.name in _RUN_CHECKPOINTS and path.parent.name:
        return path.parent.name if path.name == "checkpoint" else f"{path.parent.name}-{path.name}"
    return path.name or model.spec.architecture


def folder_name(key: str) -> str:
    """The folder of model ``key`` in a several-model run: its name with ``:`` and ``/`` (a model source's spec,
    ``robustbench:cifar10/Linf/NAME``) written ``-``."""
    return re.sub(r"[:/\\]+", "-", key)


def _source(name: str | nn.Module, model: Normalized) -> str:
    """What built the model (results.json ``model.source``): its name or folder, or ``python:<class>``."""
    return name if isinstance(name, str) else f"python:{type(getattr(model, 'model', model)).__name__}"


def run_eval(cfg: EvalConfig) -> dict[str, dict[str, Any]]:
    """Evaluate every model; returns {model name: results dict}; writes OUT[/<model>]/results.json (a shard:
    OUT/shard.json and its units only, and returns {})."""
    if not cfg.models:
        raise RobustvitError("give at least one --model")
    if cfg.limit is not None and cfg.limit < 1:
        raise RobustvitError(f"--limit must be >= 1, got {cfg.limit}")
    if cfg.batch_size < 1:
        raise RobustvitError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if cfg.chunk_size is not None and cfg.chunk_size < 1:
        raise RobustvitError(f"--chunk-size must be >= 1, got {cfg.chunk_size}")
    unknown = sorted(set(cfg.options) - set(RUN_OPTIONS))
    if unknown:
        raise RobustvitError(f"unknown run option {unknown[0]!r}; the run's options are {', '.join(RUN_OPTIONS)} "
                             "(a suite's own options go in its spec, e.g. pgd:steps=20)")
    if cfg.precision not in PRECISION_CHOICES:
        raise RobustvitError(f"--precision must be one of {', '.join(PRECISION_CHOICES)}, got {cfg.precision!r}")
    with run_settings(cfg.deterministic):
        return _run_eval(cfg)


@dataclass
class _Run:
    """What the models of one run share: the suites (``keys``: their specs), the models by name and what built
    them, one data set per preprocessing, the run's images, and the process's place (rank, world, shard)."""

    cfg: EvalConfig
    suites: list[Suite]
    keys: list[str]
    models: dict[str, Normalized]
    sources: dict[str, str | nn.Module]
    datasets: dict[Resize | None, ImageDataset]
    subset: Subset
    device: torch.device
    rank: int = 0
    world: int = 1
    shard: Shard | None = None

    def out(self, key: str) -> Path:
        """OUT/<model name>/ for several models, and for one model whose folder OUT already holds (OUT is a
        parent folder); else OUT (the run folder of one model)."""
        nested = Path(self.cfg.out) / folder_name(key)
        parent = any((nested / f).is_file() for f in ("results.json", "units.sqlite"))
        return nested if len(self.models) > 1 or parent else Path(self.cfg.out)

    def dataset(self, key: str) -> ImageDataset:
        return self.datasets[_data_key(self.models[key])]

    def context(self, key: str) -> EvalContext:
        cfg, model = self.cfg, self.models[key]
        return EvalContext(model=model, model_name=key, models=self.models, data_spec=cfg.data,
                           dataset=self.dataset(key), num_classes=model.spec.num_classes, device=self.device,
                           seed=cfg.seed, options=cfg.options, out_dir=self.out(key), subset=self.subset,
                           class_map=cfg.class_map)

    def open_folder(self, key: str, *, check: bool = True) -> tuple[RunFolder, int]:
        """The model's run folder (``check``: refuse one of another kind), its units checked against this run's
        settings, and the run's chunk size."""
        cfg, model = self.cfg, self.models[key]
        folder = RunFolder(self.out(key), "eval", rank=self.rank, world=self.world, check=check)
        chunk = chunk_size(cfg, folder.store)
        folder.store.check_fingerprint({
            "model": key, "checkpoint": weights_id(model, self.sources[key]), "data": cfg.data, "limit": cfg.limit,
            "chunk": chunk, "seed": cfg.seed, "subset": self.subset.fingerprint(), "device": self.device.type,
            "precision": cfg.precision, "decode": cfg.decode,
            "options": {k: str(v) for k, v in sorted(cfg.options.items()) if v is not None}})
        return folder, chunk


def _prepare(cfg: EvalConfig) -> _Run:
    """Build the run's suites, models, data sets and images (one-line errors for what does not fit)."""
    suites = [create_suite(s) for s in cfg.suites]
    keys = [s.strip() for s in cfg.suites]
    if len(set(keys)) != len(keys):
        raise RobustvitError("a suite is listed twice in --suite")
    shard = Shard.parse(cfg.shard) if cfg.shard is not None else None
    given = list(cfg.models.values()) if isinstance(cfg.models, dict) else list(cfg.models)
    if shard is not None and not all(isinstance(m, str) for m in given):
        raise RobustvitError("--shard needs models given by name or checkpoint folder (a merge rebuilds them)")
    device = resolve_device(cfg.device)
    rank, world, device = init_distributed(device)
    if cfg.weights is not None and len(cfg.models) != 1:
        raise RobustvitError("--weights FILE applies to one model; evaluate the models one at a time")
    if cfg.model_dir is not None and not any(isinstance(m, str) and split_source(m) is not None for m in given):
        raise RobustvitError("--model-dir applies to robustbench: and hf: models; none is given")
    models: dict[str, Normalized] = {}
    sources: dict[str, str | nn.Module] = {}
    for label, name in (cfg.models.items() if isinstance(cfg.models, dict) else ((None, m) for m in cfg.models)):
        own_dir = cfg.model_dir if isinstance(name, str) and split_source(name) is not None else None
        m = build_model(name, pretrained=cfg.pretrained, weights=cfg.weights, data=cfg.data,
                        model_dir=own_dir).to(device).eval()
        if cfg.compile:
            m.model.compile(dynamic=True)       # in place: the state dict (and the run's fingerprint) is unchanged
        if shard is not None and m.weights.get("source") == "random":
            raise RobustvitError(f"--shard needs the same weights in every shard, and {name} has random ones (drawn "
                                 "anew in each process); give --pretrained, --weights FILE or a checkpoint folder")
        warn_if_random(_source(name, m), m)
        key = str(label) if label is not None else model_dir_name(name, m)
        if key in models:
            key = f"{key}-{len(models)}"
        models[key], sources[key] = m, name
    datasets: dict[Resize | None, ImageDataset] = {}       # one per preprocessing: models with the same one share it
    for key, m in models.items():
        resize = _data_key(m)
        if resize not in datasets:
            datasets[resize] = (create_dataset(cfg.data, strict=cfg.strict) if resize is None
                                else dataset_for_model(cfg.data, m.spec, strict=cfg.strict))
        if any(s.uses_head for s in suites) or cfg.class_map is not None:
            match_classes(m, datasets[resize], cfg.class_map, model_name=key, data_spec=cfg.data)
    across = next((s for s in suites if s.across_models), None)
    if len(datasets) > 1 and across is not None:
        seen = ", ".join(f"{r.size}px crop_pct {r.crop_pct} {r.interpolation}" for r in datasets if r is not None)
        raise RobustvitError(f"suite {across.key} evaluates what it makes on one model on the others, so every "
                             f"model must see the same images; these models preprocess differently ({seen}): run "
                             f"{across.name} on models with the same input size, crop_pct and interpolation")
    first = next(iter(datasets.values()))
    subset_seed = cfg.seed if cfg.subset_seed is None else cfg.subset_seed
    subset = make_subset(first, limit=cfg.limit, method=cfg.subset_method, seed=subset_seed, file=cfg.subset)
    return _Run(cfg, suites, keys, models, sources, datasets, subset, device, rank, world, shard)


def _run_eval(cfg: EvalConfig) -> dict[str, dict[str, Any]]:
    run = _prepare(cfg)
    results: dict[str, dict[str, Any]] = {}
    loaders = _Loaders(cfg.workers, run.device, cfg.decode)
    try:
        for key in run.models:
            results.update(_evaluate_model(run, key, loaders))
    finally:
        loaders.close()
    if run.shard is not None and run.rank == 0:
        write_json(Path(cfg.out) / SHARD_FILE, {"schema": 2, "kind": "eval-shard", "shard": str(run.shard),
                                                "models": list(run.models), "config": _config_record(cfg)})
    barrier()
    return results


def _evaluate_model(run: _Run, key: str, loaders: "_Loaders") -> dict[str, dict[str, Any]]:
    """Run one model's units into its folder's store; rank 0 of an unsharded run writes its results.json."""
    cfg, model = run.cfg, run.models[key]
    ctx = run.context(key)
    folder, chunk = run.open_folder(key)
    store = folder.store
    try:
        model.micro_batch = cfg.batch_size if cfg.batch_size < chunk else None
        plans = [suite.plan(ctx) for suite in run.suites]
        passes = _passes(ctx, run.suites, plans, run.dataset(key), cfg)
        _run_units(ctx, store, run.suites, plans, run.keys, run.dataset(key), passes, cfg,
                   Worker.of(run.rank, run.world, run.shard), chunk, loaders, show=cfg.progress and run.rank == 0)
        barrier()
        if run.rank != 0 or run.shard is not None:
            return {}
        counted = _counted_images(passes, plans, run.keys, chunk)
        return {key: folder.write(_finalize(ctx, folder, run, plans, chunk, counted))}
    finally:
        model.micro_batch = None
        folder.store.close()


#: EvalConfig fields that may differ between the shards of one run (the rest must agree to merge them).
_SHARD_FREE = ("out", "shard", "command", "progress", "device", "workers", "batch_size", "compile")


def _config_record(cfg: EvalConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def merge_shards(dirs: list[str | Path], out: str | Path, *, command: str | None = None) -> dict[str, dict[str, Any]]:
    """Join the unit stores of the shards ``dirs`` (``robustvit eval --shard K/N`` folders: together 1 … N, each
    once) into ``out`` and write its ``results.json`` — the file one unsharded run writes (its ``run`` records
    ``shard``: the count, the folders and the ``merge`` command; ``command`` is the shards' without ``--shard``),
    finalised from the joined stores (nothing is evaluated: a missing unit is a one-line error).
    Returns {model name: results dict} as :func:`run_eval`."""
    if not dirs:
        raise RobustvitError("give the shard folders to merge: robustvit merge OUT_1 … OUT_N --out OUT")
    records = []
    for d in map(Path, dirs):
        f = d / SHARD_FILE
        if not f.is_file():
            raise RobustvitError(f"{d} holds no {SHARD_FILE}; pass folders written by `robustvit eval --shard K/N` "
                                 "(a shard writes it when it finishes)")
        try:
            rec = json.loads(f.read_text())
            records.append((d, Shard.parse(rec["shard"]), rec))
        except (json.JSONDecodeError, KeyError) as e:
            raise RobustvitError(f"{f} is not a shard record ({e}); re-run that shard") from None
    counts = {s.count for _, s, _ in records}
    if len(counts) != 1:
        raise RobustvitError(f"these shards split the run differently (N = {', '.join(map(str, sorted(counts)))}); "
                             "merge shards of one --shard K/N run")
    n = counts.pop()
    seen = [s.index for _, s, _ in records]
    twice = sorted({k for k in seen if seen.count(k) > 1})
    missing = sorted(set(range(1, n + 1)) - set(seen))
    if twice or missing:
        raise RobustvitError(f"shard {twice[0]}/{n} is given twice; give each shard once" if twice else
                             f"shards {', '.join(f'{k}/{n}' for k in missing)} are missing; run them and merge all {n}")
    base = {k: v for k, v in records[0][2]["config"].items() if k not in _SHARD_FREE}
    for d, _, rec in records[1:]:
        other = {k: v for k, v in rec["config"].items() if k not in _SHARD_FREE}
        diff = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k))
        if diff:
            raise RobustvitError(f"{d} was run with other settings than {records[0][0]} ({', '.join(diff)}); "
                                 "merge shards of one command")
    models: list[str] = records[0][2]["models"]
    out = Path(out)
    for key in models:
        sub = (lambda p: p / folder_name(key)) if len(models) > 1 else (lambda p: p)
        with UnitStore(sub(out)) as target:
            for d, _, _ in sorted(records, key=lambda r: r[1].index):
                with UnitStore(sub(d)) as src:
                    target.merge_from(src)
    first = records[0][2]["config"]
    one_run = re.sub(r"\s--shard(=|\s+)\S+", "", first.get("command") or "") or None   # the command without --shard
    run = _prepare(EvalConfig(**{**first, "out": str(out), "shard": None, "progress": False, "command": one_run}))
    shards = {"count": n, "shards": [str(d) for d, _, _ in sorted(records, key=lambda r: r[1].index)],
              "merge": command}
    results: dict[str, dict[str, Any]] = {}
    for key in run.models:                  # finalised from the joined store: every unit must be there
        ctx = run.context(key)
        folder, chunk = run.open_folder(key, check=False)
        with folder.store:
            plans = [suite.plan(ctx) for suite in run.suites]
            passes = _passes(ctx, run.suites, plans, run.dataset(key), run.cfg)
            for p in passes:
                nchunks, _, units = _pass_units(p, plans, run.keys, chunk)
                lost = pending_chunks(folder.store, nchunks, units)
                if lost:
                    raise RobustvitError(f"the shards lack {sum(len(u) for _, u in lost)} units of {key} "
                                         f"({lost[0][1][0][0]}, chunk {lost[0][0]}); re-run the unfinished shards, "
                                         "then merge")
            counted = _counted_images(passes, plans, run.keys, chunk)
            doc = _finalize(ctx, folder, run, plans, chunk, counted)
            doc["run"]["shard"] = shards
            results[key] = folder.write(doc)
    return results


def chunk_size(cfg: EvalConfig, store: UnitStore) -> int:
    """Images per unit: ``--chunk-size``, else the folder's own (a resumed run keeps its units whatever its
    ``--batch-size``), else ``--batch-size``."""
    if cfg.chunk_size is not None:
        return cfg.chunk_size
    old = json.loads(store.fingerprint_text() or "{}").get("chunk")
    return int(old) if old else cfg.batch_size


@contextmanager
def run_settings(deterministic: bool) -> Iterator[None]:
    """Within the block, float32 outside the model wrapper is IEEE float32 (CUDA's TF32 off: corruption and attack
    arithmetic never change precision; the wrapper applies ``--precision``), and with ``--deterministic`` torch uses
    deterministic algorithms only (refusing an operation that has none; cuBLAS gets the workspace setting that
    needs). The corruption kernels are order-free on every device without it."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    old = torch.are_deterministic_algorithms_enabled(), matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = False
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old[0])
        matmul.allow_tf32, cudnn.allow_tf32 = old[1:]


def build_model(source: str | Normalized, *, pretrained: bool = False, weights: str | None = None,
                data: str | None = None, model_dir: str | None = None) -> Normalized:
    """The one way a run builds its model: a robustvit model object as it is; ``PREFIX:NAME`` by the model source
    registered under ``PREFIX`` (:mod:`robustvit.models.sources`: ``tv:`` detectors, whose random weights get the
    class count of ``data``; ``robustbench:`` with its weights under ``model_dir``; ``hf:``); else a timm / robustvit
    name or a checkpoint folder (:func:`robustvit.models.create_model`; ``pretrained`` applies to names only,
    ``weights``: a state-dict file for the named architecture)."""
    if not isinstance(source, str):
        if not isinstance(source, Normalized):
            raise RobustvitError("a model object must be a robustvit Normalized model; use robustvit.evaluate(), "
                                 "which wraps an nn.Module with its normalisation")
        return source
    classes = (lambda: None) if data is None else (lambda: create_dataset(data).num_classes)
    model = build_from_source(source, pretrained=pretrained, weights=weights, model_dir=model_dir, num_classes=classes)
    if model is not None:
        return model
    return create_model(source, pretrained=pretrained and not is_checkpoint_dir(source), checkpoint=weights)


def _data_key(model: nn.Module) -> Resize | None:
    """How a model reads the data: its own preprocessing, or (None) images at their native size (detectors)."""
    return None if model.spec.family == "detector" else model_resize(model.spec)


@dataclass
class _Pass:
    """One pass over images: ``images`` (ascending indices into ``dataset``, or into a suite's own images when
    ``dataset`` is None) in chunks of the batch size, and the suites evaluated on them, each on the first ``limit``
    of them (None: all)."""

    dataset: ImageDataset | None
    images: torch.Tensor
    members: dict[int, int | None]
    tag: str
    counts_data: bool = False      # its images are those results.json's ``data`` counts


def _passes(ctx: EvalContext, suites: list[Suite], plans: list[Plan], dataset: ImageDataset,
            cfg: EvalConfig) -> list[_Pass]:
    """Group the suites by the images their plans read (the run's, a data set of their own, or — ``plan.size`` —
    images a suite reads itself); a suite's ``limit=n`` takes n of the group's images (option ``subset``, default
    the run's ``--subset-method``; :meth:`Subset.draw`). The first n — ``first`` — ride on the group's pass; a
    stratified sample gets a pass of its own, so that its chunks are full batches. The group's images are the run's
    (``--limit``, ``--subset``) for the run's data and for a suite's own images aligned with them (``data_aligned``
    and as many); else all of the suite's own. Sets ``suite.subset_info`` (the suite's own sample, for
    results.json) and ``suite.subset_note`` (comparability)."""
    assert ctx.subset is not None
    groups: dict[Any, list[int]] = {}
    for i, plan in enumerate(plans):
        key = ("own", i) if plan.size is not None else id(plan.data if plan.data is not None else dataset)
        groups.setdefault(key, []).append(i)
    passes: list[_Pass] = []
    for members in groups.values():
        first = plans[members[0]]
        ds = None if first.size is not None else first.data if first.data is not None else dataset
        source = range(first.size) if ds is None else ds
        aligned = any(suites[i].data_aligned for i in members)
        if ds is dataset or (aligned and len(source) == len(dataset)):
            base = ctx.subset
        else:
            base = make_subset(source, method=cfg.subset_method, seed=ctx.subset.seed,
                               labels=first.labels if ds is None else None)
        tag = "data" if ds is dataset else suites[members[0]].name
        main = _Pass(ds, base.indices, {}, tag)
        extra: dict[tuple[str, int], _Pass] = {}
        for i in members:
            suite, n = suites[i], suites[i].max_images
            if n is not None and n < 1:
                raise RobustvitError(f"suite {suite.key}: limit must be >= 1, got {n}")
            method = suite.subset_method or cfg.subset_method
            sample = base if n is None or n >= len(base.indices) else base.sample(n, method)
            suite.subset_info = None if sample is ctx.subset else sample.record()
            suite.subset_note = subset_note(sample.record())
            if sample is base or method == "first":       # the first n of the group's images
                main.members[i] = None if sample is base else n
            else:
                if (method, n) not in extra:
                    extra[(method, n)] = _Pass(ds, sample.indices, {}, f"{suite.name} ({n} images)")
                extra[(method, n)].members[i] = None
        group = ([main] if main.members else []) + list(extra.values())
        if ds is dataset and group:        # the widest pass counts the run's images (and the unreadable ones)
            widest = main if main.members else max(extra.values(), key=lambda p: len(p.images))
            widest.counts_data = True
        passes += group
    return passes


def _pass_units(p: _Pass, plans: list[Plan], keys: list[str], b: int
                ) -> tuple[int, dict[int, int], Callable[[int], list[Unit]]]:
    """A pass's chunk count, each member's image count, and ``units(c)``: chunk c's units (those of the suites
    whose images reach it)."""
    sizes = {i: len(p.images) if m is None else min(m, len(p.images)) for i, m in p.members.items()}

    def units(c: int) -> list[Unit]:
        return [(keys[i], part) for i in p.members if c * b < sizes[i] for part in plans[i].parts]
    return math.ceil(max(sizes.values()) / b), sizes, units


def _counted_images(passes: list[_Pass], plans: list[Plan], keys: list[str], b: int) -> torch.Tensor:
    """The images of the run's data set that results.json's ``data`` counts: those its widest pass reads (every
    one was read by a chunk whose units are stored, and its unreadable files recorded with them)."""
    for p in passes:
        if p.counts_data:
            _, sizes, _ = _pass_units(p, plans, keys, b)
            return p.images[:max(sizes.values())]
    return torch.empty(0, dtype=torch.long)


def _run_units(ctx: EvalContext, store: UnitStore, suites: list[Suite], plans: list[Plan], keys: list[str],
               dataset: ImageDataset, passes: list[_Pass], cfg: EvalConfig, worker: Worker, chunk: int,
               loaders: "_Loaders", *, show: bool = False) -> None:
    """Evaluate every unit not yet in the store that ``worker`` owns, pass by pass (``passes``, :func:`_passes`),
    on the run engine's scheduler; the run's images that cannot be read are recorded in the store with the chunk
    that read them. Chunk ``c`` of a pass holds its images c·B … (c+1)·B−1; ``Batch.index`` is each image's
    position in the pass (0 = the suite's first image), ``Batch.data_index`` its index in the data set."""
    b = chunk
    index = {k: i for i, k in enumerate(keys)}
    precision = [suite_precision(cfg.precision, ctx.device, s) for s in suites]
    for group in passes:
        ds, images = group.dataset, group.images
        nchunks, sizes, units = _pass_units(group, plans, keys, b)
        span = max(sizes.values())                  # images read: up to the largest member's

        member = next(iter(group.members)) if ds is None else None     # a suite's own images: one member
        part_sets = plans[member].part_data if member is not None else None

        def load(chunks: Iterable[int], ds: ImageDataset | None = ds, images: torch.Tensor = images, span: int = span,
                 member: int | None = member, part_sets: dict[str, ImageDataset] | None = part_sets):
            done = store.done(keys[member]) if part_sets is not None and member is not None else set()

            def items() -> Iterator[tuple[torch.Tensor, ...]]:
                for c in chunks:                # lazy: the engine claims a chunk as the loader asks for it
                    pos = torch.arange(c * b, min(span, (c + 1) * b))
                    if part_sets is None:
                        yield pos, images[pos]
                    else:                       # the parts still to do read their own files (ImageNet-C units)
                        yield pos, images[pos], [p for p in part_sets if (keys[member], p, c) not in done]
            if part_sets is not None:
                for pos, chunk_parts in loaders.parts(keys[member], part_sets).iter_parts(items(), as_float=False):
                    yield pos, images[pos], None, chunk_parts
                return
            if ds is None:                      # the suite reads its images itself (from ``batch.ids``)
                for pos, ids in items():
                    yield pos, ids, torch.empty(len(ids), 3, 0, 0, device=ctx.device), torch.zeros_like(ids)
                return
            for pos, x, y in loaders.get(ds).iter(items(), tagged=True):
                yield pos, images[pos], x, y

        def work(data: Any, c: int, pending: list[Unit], ds: ImageDataset | None = ds, sizes: dict[int, int] = sizes):
            pos, ids, x, y = data
            if x is None:                       # a suite whose parts read their own files: y holds them
                yield from part_work(y, c, pending, pos, ids)
                return
            keep = y != UNREADABLE
            if not bool(keep.all()):        # labels are on the CPU: no synchronisation
                if ds is dataset:
                    samples = getattr(ds, "samples", None)
                    store.put_unreadable({j: samples[j][0] if samples is not None else None
                                          for j in ids[~keep].tolist()})
                x, y, ids, pos = x[keep.to(x.device)], y[keep], ids[keep], pos[keep]
            y = y.to(ctx.device, non_blocking=True)
            for task, part in pending:
                i = index[task]
                sel = pos < sizes[i]
                dev = sel.to(x.device)
                view = (x, y, pos, ids) if bool(sel.all()) else (x[dev], y[dev], pos[sel], ids[sel])
                if not len(view[1]):
                    yield (task, part), {}
                    continue

                yield (task, part), run_unit(i, part, c, *view)

        def part_work(chunk_parts: Any, c: int, pending: list[Unit], pos: torch.Tensor, ids: torch.Tensor):
            for task, part in pending:          # unreadable files (UNREADABLE labels) are the suite's to count
                xp, yp = chunk_parts.get(part)
                if xp.dtype == torch.uint8 and xp.ndim == 4:    # images; sequences (5-D) stay uint8 for the suite
                    xp = float_images(xp)
                yield (task, part), run_unit(index[task], part, c, xp, yp.to(ctx.device, non_blocking=True), pos, ids)

        def run_unit(i: int, part: str, c: int, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor,
                     ids: torch.Tensor, sizes: dict[int, int] = sizes) -> Any:
            """Suite ``i``'s statistics of one unit: seeded from (seed, suite, part, chunk), in the suite's precision,
            retried with a smaller forward batch on CUDA out-of-memory."""
            def attempt() -> Any:
                gen = torch.Generator(device=ctx.device)
                gen.manual_seed(derive_seed(cfg.seed, keys[i], part, c))
                with inference_settings(ctx.model, precision=precision[i]):
                    return suites[i].run(ctx, part, Batch(x, y, pos, gen, ids, c, math.ceil(sizes[i] / b)))
            return retry_out_of_memory(ctx.model, attempt, len(y))

        run_units(store, nchunks, units, work, load=load, worker=worker, device=ctx.device,
                  progress=lambda n, tag=group.tag: progress_bar(show, f"{ctx.model_name} · {tag}", n))


def retry_out_of_memory(model: nn.Module, attempt: Callable[[], Any], images: int) -> Any:
    """``attempt()`` on a unit of ``images`` images; on CUDA out-of-memory, halve the model's forward micro-batch
    (``--batch-size``) and try again (the unit's seed is the same, so is its result: a micro-batch cuts batches,
    never changes a number). Says so once per model; refuses in one line when one image at a time does not fit."""
    while True:
        try:
            return attempt()
        except torch.cuda.OutOfMemoryError:
            if not isinstance(model, Normalized):
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            current = min(model.micro_batch or images, images)
            if current <= 1:
                raise RobustvitError("out of GPU memory with one image per forward pass; use a smaller model or "
                                     "input, another GPU, or --device cpu") from None
            model.micro_batch = current // 2
            if not getattr(model, "_said_out_of_memory", False):
                model._said_out_of_memory = True
                warnings.warn(f"out of GPU memory: {model.spec.architecture}'s forward batch is halved until it fits "
                              f"(now {model.micro_batch} images; a smaller --batch-size avoids the retries); results "
                              "are unchanged", stacklevel=2)


class _Loaders:
    """One :class:`~robustvit.data.loader.ChunkLoader` per data set of the run (``--workers``, ``--decode``): its
    worker processes persist across the run's passes; :meth:`close` stops them."""

    def __init__(self, workers: int | str, device: torch.device, decode: str) -> None:
        self.workers, self.device, self.decode = resolve_workers(workers), device, decode
        check_decode(decode, device)
        self.loaders: dict[int, tuple[ImageDataset, ChunkLoader]] = {}
        self.part_loaders: dict[str, ChunkLoader] = {}

    def get(self, ds: ImageDataset) -> ChunkLoader:
        if id(ds) not in self.loaders:
            self.loaders[id(ds)] = (ds, ChunkLoader(ds, workers=self.workers, device=self.device,
                                                    decode=self.decode))
        return self.loaders[id(ds)][1]

    def parts(self, key: str, part_sets: dict[str, ImageDataset]) -> ChunkLoader:
        """The loader of a suite's own part files (``key``: the suite's), read in the workers."""
        if key not in self.part_loaders:
            self.part_loaders[key] = ChunkLoader(PartsDataset(part_sets), workers=self.workers, device=self.device)
        return self.part_loaders[key]

    def close(self) -> None:
        for loader in [ld for _, ld in self.loaders.values()] + list(self.part_loaders.values()):
            loader.close()
        self.loaders.clear()
        self.part_loaders.clear()


def _finalize(ctx: EvalContext, folder: RunFolder, run: _Run, plans: list[Plan], chunk: int,
              counted: torch.Tensor) -> dict[str, Any]:
    """The model's results.json document, from its store: each suite's ``finalize`` on its summed statistics, and
    the ``data`` record of the images ``counted`` (:func:`_counted_images`) with the unreadable ones the store
    holds."""
    cfg, suites, keys, dataset = run.cfg, run.suites, run.keys, ctx.dataset
    store, source = folder.store, run.sources[ctx.model_name]
    unreadable = store.unreadable()
    bad = [j for j in counted.tolist() if j in unreadable]
    files = [f for f in (unreadable[j] for j in bad) if f is not None][:20]
    suites_out: dict[str, Any] = {}
    for suite, plan, key in zip(suites, plans, keys):
        stats = {part: sum_stats(items) for part, items in store.stats(key).items()}
        missing = [p for p in plan.parts if p not in stats]
        if missing:
            raise RobustvitError(f"suite {key}: parts {missing[:3]} have no results (was the run interrupted?); "
                                 "re-run the command")
        res = suite.finalize(ctx, stats)
        res.setdefault("seconds", round(store.seconds(key), 3))
        res.setdefault("precision", suite_precision(cfg.precision, ctx.device, suite))
        if suite.subset_info is not None:
            res.setdefault("subset", suite.subset_info)
        suites_out[key] = res
    data = {"spec": cfg.data, "num_images": len(counted) - len(bad), "num_unreadable": len(bad),
            "unreadable_files": files, "num_classes": dataset.num_classes,
            "subset": ctx.subset.record() if ctx.subset else None}
    doc = folder.document(ctx.model, ctx.model_name, _source(source, ctx.model), device=ctx.device, seed=cfg.seed,
                          command=cfg.command, data=data, payload=suites_out, class_map=cfg.class_map,
                          resize=getattr(dataset, "resize", None), world_size=run.world, batch_size=cfg.batch_size,
                          chunk_size=chunk, precision=cfg.precision, compile=cfg.compile,
                          deterministic=cfg.deterministic, decode=cfg.decode, limit=cfg.limit,
                          options={k: v for k, v in cfg.options.items() if v is not None}, shard=None)
    if cfg.flops:
        doc["model"]["flops"] = count_flops(ctx.model)
    return doc


__all__ = ["EvalConfig", "RESULTS_FILE", "RUN_OPTIONS", "SHARD_FILE", "build_model", "merge_shards", "run_eval"]
