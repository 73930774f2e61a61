"""The Python API at the top of the package: ``robustvit.evaluate``, ``robustvit.analyze``, ``robustvit.train``.

Each is one call over the same engine the command line uses (results.json, schema 2). A model is a name (a timm
model, a robustvit architecture, a checkpoint folder) or an ``nn.Module`` object: a robustvit ``Normalized`` model
is used as it is; any other module is wrapped in ``Normalized`` with its normalisation taken from its timm
``pretrained_cfg`` (mean, std, input size, crop_pct, interpolation) or from ``mean=`` / ``std=`` given.

>>> import timm, robustvit
>>> net = timm.create_model("resnet18", pretrained=True)                          # doctest: +SKIP
>>> res = robustvit.evaluate(net, data="imagenet:/data/val", suites=["clean", "pgd"], limit=500)  # doctest: +SKIP
>>> res["suites"]["pgd"]["accuracy"]                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError


#: Images up to this side are read as they are by a plain module (no resize to side / crop_pct, no centre crop).
SMALL_IMAGE = 64


def as_model(model: str | nn.Module, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
             name: str | None = None, num_classes: int | None = None, input_size: int | None = None,
             pretrained: bool = False, weights: str | None = None, data: Any = None) -> Any:
    """A robustvit ``Normalized`` model from a name or a module (see the module docstring); ``data`` (a spec or
    a data set) gives a plain module its input size (:func:`wrap_module`)."""
    from robustvit.evaluation.runner import build_model
    from robustvit.models import Normalized
    if isinstance(model, (str, Normalized)):
        return build_model(model, pretrained=pretrained, weights=weights)
    if not isinstance(model, nn.Module):
        raise RobustvitError(f"model must be a name or a torch nn.Module, got {type(model).__name__}")
    return wrap_module(model, mean=mean, std=std, name=name, num_classes=num_classes, input_size=input_size,
                       data=data)


def data_image_size(data: Any) -> int | None:
    """The side of a data set's images when they all share it (in-memory or generated images: synthshapes, npz,
    CIFAR), else None (files of any size, read at the model's size)."""
    from robustvit.data import TensorImageDataset, create_dataset
    from robustvit.data.synthshapes import SynthShapesDataset
    ds = create_dataset(data) if isinstance(data, str) else data
    if not isinstance(ds, (TensorImageDataset, SynthShapesDataset)) or len(ds) == 0:
        return None
    h, w = ds.get_batch(torch.tensor([0]))[0].shape[-2:]
    return int(h) if h == w else None


def wrap_module(module: nn.Module, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                name: str | None = None, num_classes: int | None = None, input_size: int | None = None,
                data: Any = None) -> Any:
    """``Normalized(module, spec)``: normalisation from ``mean``/``std``, else the module's timm
    ``pretrained_cfg``; one line when neither gives it (images are [0, 1]; the model normalises inside).

    A module without a timm ``pretrained_cfg`` input size takes ``input_size``, else the images' own size
    (``data`` with images of one size, e.g. CIFAR: 32), else 224; images of at most :data:`SMALL_IMAGE` pixels are
    not centre-cropped (crop_pct 1: a 32-px image is read as it is, not resized to 36 and cropped)."""
    from robustvit.models import Normalized
    from robustvit.models.factory import spec_from_timm
    cfg = dict(getattr(module, "pretrained_cfg", None) or getattr(module, "default_cfg", None) or {})
    if (mean is None) != (std is None):
        raise RobustvitError("give both mean= and std= (the normalisation the model was trained with), or neither")
    if mean is None and not ("mean" in cfg and "std" in cfg):
        raise RobustvitError(f"{type(module).__name__} has no timm pretrained_cfg with mean/std; give mean= and std= "
                             "(e.g. mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225) for ImageNet models)")
    arch = name or str(cfg.get("architecture") or type(module).__name__)
    spec = spec_from_timm(arch, module, {})
    changes: dict[str, Any] = {}
    if mean is not None and std is not None:
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise RobustvitError(f"mean and std take 3 values each (std > 0), got mean={mean} std={std}")
        changes.update(mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std))
    size = getattr(getattr(module, "patch_embed", None), "img_size", None)      # a timm ViT built at another size
    if input_size is None and "input_size" not in cfg and not isinstance(size, (tuple, list)) and data is not None:
        input_size = data_image_size(data)                                     # a plain module: the data's size
    if input_size is not None:
        changes["input_size"] = (3, int(input_size), int(input_size))
    elif isinstance(size, (tuple, list)) and len(size) == 2 and tuple(size) != tuple(spec.input_size[1:]):
        changes["input_size"] = (3, int(size[0]), int(size[1]))
    side = (changes.get("input_size") or spec.input_size)[-1]
    if "crop_pct" not in cfg and side <= SMALL_IMAGE:
        changes["crop_pct"] = 1.0
    if num_classes is not None:
        changes["num_classes"] = int(num_classes)
    elif getattr(module, "num_classes", None) is None:      # not a timm model: ask the module
        h, w = (changes.get("input_size") or spec.input_size)[1:]
        p = next(module.parameters(), None)
        was = module.training
        module.eval()
        with torch.no_grad():
            out = module(torch.zeros(1, 3, h, w, device=p.device if p is not None else "cpu"))
        module.train(was)
        changes["num_classes"] = int(out.shape[-1])
    wrapped = Normalized(module, dataclasses.replace(spec, **changes))
    wrapped.weights = {"pretrained": None, "source": f"python:{type(module).__name__}"}
    return wrapped


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """robustvit's warnings (e.g. random weights) formatted as one line, ``robustvit: warning: …``, as the CLI
    prints them; others keep Python's format. Only ``warnings.formatwarning`` changes, so recording still works."""
    fmt = warnings.formatwarning

    def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 line: str | None = None) -> str:
        if "robustvit" in filename.replace("\\", "/").split("/site-packages/")[-1]:
            return f"robustvit: warning: {message}\n"
        return fmt(message, category, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = fmt


#: EvalConfig fields that ``evaluate`` sets from its own arguments (the others are its keyword arguments).
_EVAL_OWN = ("models", "data", "suites", "out", "limit", "options", "progress")
#: Keyword arguments that change how the data is read: appended to the data spec (a source without them refuses).
_DATA_OPTIONS = ("crop_pct", "interpolation")


def evaluate(model: str | nn.Module | Sequence[str | nn.Module], data: str, suites: Sequence[str] | str = ("clean",),
             out: str | Path | None = None, limit: int | None = None, *, mean: Sequence[float] | None = None,
             std: Sequence[float] | None = None, name: str | None = None, input_size: int | None = None,
             num_classes: int | None = None, progress: bool = False, **options: Any) -> dict[str, Any]:
    """Evaluate a model with evaluation suites, as ``robustvit eval`` does.

    Args:
        model: a model name (timm or robustvit), a checkpoint folder or an ``nn.Module`` taking images in
            [0, 1]; or a list of them (evaluated one after the other, ``transfer`` across them).
        data: a data spec such as ``"synthshapes:test"`` or ``"imagenet:/data/val"``.
        suites: suite specs ``"name[:key=value…]"`` (``robustvit list suites``), a list or comma-separated
            (``suite=`` is an alias).
        out: the run folder (results.json, resumable); None: a temporary one, removed afterwards.
        limit: evaluate at most this many images (a seeded class-stratified sample).
        mean, std, name, input_size, num_classes: describe an ``nn.Module`` (:func:`wrap_module`).
        crop_pct, interpolation: override the preprocessing the data is read with (data-spec options, e.g. of
            ``folder:``).
        progress: show progress bars.
        options: EvalConfig fields (``batch_size``, ``device``, ``seed``, ``pretrained``, ``weights``,
            ``class_map``, ``subset_method``, ``subset``, …) and the run's attack options (``eps``, ``norm``,
            ``steps``); any other keyword is refused in one line.

    Returns:
        The results dict (results.json, kind eval): ``results["suites"][key]`` per suite; for a list of models,
        {model name: results dict}.

    Example:
        >>> res = evaluate("vit_cifar_micro", data="synthshapes:test,count=8", suites=["clean"])
        >>> res["suites"]["clean"]["num_images"], 0 <= res["suites"]["clean"]["top1"] <= 1
        (8, True)
    """
    from robustvit.evaluation.runner import RUN_OPTIONS, EvalConfig, run_eval
    if "suite" in options:
        if suites != ("clean",):
            raise RobustvitError("give suites= or its alias suite=, not both")
        suites = options.pop("suite")
    fields = {f.name for f in dataclasses.fields(EvalConfig)} - set(_EVAL_OWN)
    accepted = fields | set(RUN_OPTIONS) | set(_DATA_OPTIONS)
    unknown = sorted(set(options) - accepted)
    if unknown:
        valid = sorted(accepted | {"suite", "mean", "std", "name", "input_size", "num_classes", "progress"})
        raise RobustvitError(f"evaluate() got an unknown keyword argument {unknown[0]!r}; valid ones: "
                             f"{', '.join(valid)}")
    for key in _DATA_OPTIONS:
        value = options.pop(key, None)
        if value is not None:
            data = f"{data}:{key}={value}"
    many = isinstance(model, (list, tuple))
    models = [m if isinstance(m, str) else as_model(m, mean=mean, std=std, name=name, input_size=input_size,
                                                    num_classes=num_classes, data=data)
              for m in (model if many else [model])]
    config = {k: options.pop(k) for k in list(options) if k in fields}
    config.setdefault("command", "robustvit.evaluate()")
    suite_list = [s.strip() for s in suites.split(",")] if isinstance(suites, str) else list(suites)
    with tempfile.TemporaryDirectory(prefix="robustvit-eval-") if out is None else nullcontext(Path(out)) as folder, \
            one_line_warnings():
        results = run_eval(EvalConfig(models=models, data=data, suites=suite_list, out=str(folder), limit=limit,
                                      options=options, progress=progress, **config))
    return results if many else next(iter(results.values()))


def analyze(model: str | nn.Module, data: Any, analyses: Sequence[str] | str, out: str | Path | None = None,
            limit: int | None = None, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
            name: str | None = None, input_size: int | None = None, num_classes: int | None = None,
            pretrained: bool = False, weights: str | None = None, seed: int = 0,
            batch_size: int = 64, device: str = "auto", precision: str = "fp32", progress: bool = False,
            **options: Any) -> dict[str, Any]:
    """Run internals analyses on a model, as ``robustvit analyze`` does.

    Args:
        model: a model name, a checkpoint folder or an ``nn.Module`` taking images in [0, 1].
        data: a data spec (``"synthshapes:test"``) or a data set object.
        analyses: analysis specs ``"name[:key=value…]"`` (``robustvit list analyses``), a list or comma-separated.
        out: the run folder (results.json, figures; resumable); None: a temporary one.
        limit: analyse at most this many images.
        mean, std, name, input_size, num_classes, pretrained, weights: how the model is built or wrapped
            (:func:`as_model`).
        seed, batch_size, device: the run's seed, chunk size and device (``auto``: CUDA when available).
        precision: fp32, tf32 or bf16 (the model's forward; the probe checks itself in fp32).
        progress: show progress bars.
        options: ``class_map``, ``subset_method``, ``subset``, ``subset_seed``.

    Returns:
        The results dict (results.json, kind analysis): ``results["analyses"][name]`` per analysis.

    Example:
        >>> res = analyze("vit_cifar_micro", data="synthshapes:test,count=8", analyses=["pos_embed_similarity"])
        >>> res["analyses"]["pos_embed_similarity"]["grid"]
        [8, 8]
    """
    from robustvit.analysis import run_analyses
    from robustvit.data import dataset_for_model
    from robustvit.models.factory import warn_if_random
    from robustvit.runs import read_results
    allowed = ("class_map", "subset_method", "subset", "subset_seed")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise RobustvitError(f"analyze() got an unknown keyword argument {unknown[0]!r}; besides its named "
                             f"arguments it takes {', '.join(allowed)}")
    m = as_model(model, mean=mean, std=std, name=name, input_size=input_size, num_classes=num_classes,
                 pretrained=pretrained, weights=weights, data=data)
    with one_line_warnings():
        warn_if_random(model if isinstance(model, str) else name or type(model).__name__, m)
    dataset = dataset_for_model(data, m.spec) if isinstance(data, str) else data
    label = model if isinstance(model, str) else None
    folder_cm = tempfile.TemporaryDirectory(prefix="robustvit-analyze-") if out is None else nullcontext(Path(out))
    with folder_cm as folder, one_line_warnings():
        run_analyses(m, dataset, analyses, folder, limit=limit, seed=seed, batch_size=batch_size, device=device,
                     precision=precision, progress=progress, model_name=name or label,
                     data_spec=data if isinstance(data, str) else None,
                     source=label or m.weights.get("source"), command="robustvit.analyze()", **options)
        return read_results(folder)


def train(config: Any = None, /, *, resume: bool = False, progress: bool = True, **fields: Any) -> Path:
    """Train a model, as ``robustvit train`` does (resumable; adversarial training through ``loss``).

    Args:
        config: a ``TrainConfig``, a dict of its fields, a YAML file or None.
        resume: continue the run in ``out`` from its last saved state.
        progress: show progress bars.
        fields: ``TrainConfig`` fields that override ``config`` (``model``, ``data``, ``epochs``, ``loss``,
            ``eps``, ``out``, …).

    Returns:
        The final checkpoint folder (``create_model`` loads it); the run folder holds the training's results.

    Example:
        >>> ckpt = train(model="vit_cifar_micro", data="synthshapes:train,count=16", epochs=1, batch_size=8,
        ...              out="run", progress=False)
        >>> create_model(str(ckpt)).spec.architecture
        'vit_cifar_micro'
    """
    from robustvit.training import TrainConfig, train as run_training
    if isinstance(config, TrainConfig):
        cfg = dataclasses.replace(config, **fields) if fields else config
    elif isinstance(config, (str, Path)):
        cfg = TrainConfig.load(config, **fields)
    elif config is None or isinstance(config, dict):
        cfg = TrainConfig.from_dict(dict(config or {}), "robustvit.train()", fields)
    else:
        raise RobustvitError(f"train() takes a TrainConfig, a dict or a YAML path, got {type(config).__name__}")
    return run_training(cfg, resume=resume, progress=progress)


__all__ = ["analyze", "as_model", "evaluate", "train", "wrap_module"]
