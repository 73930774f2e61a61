"""``robustbench:<dataset>/<threat_model>/<name>``: a model of RobustBench's zoo (Croce et al. 2021,
arXiv:2010.09670), e.g. ``robustbench:cifar10/Linf/Carmon2019Unlabeled``.

The architecture is the zoo's (``robustbench.model_zoo.models.model_dicts``), the weights loaded by RobustBench's
``utils.load_model`` from ``<model_dir>/<dataset>/<threat_model>/<name>.pt`` (default ``./models``; a missing file is
downloaded by RobustBench). Preprocessing is the zoo's: CIFAR models take the 32 px [0, 1] image as it is (mean 0,
std 1: models that normalise do it inside), ImageNet models their ``preprocessing`` entry (:data:`IMAGENET_PREP`).
``reported`` holds the published clean and AutoAttack accuracy where a ``model_info`` JSON is found.

robustbench pins an old timm, so it is installed with ``pip install --no-deps robustbench`` (docs/models.md); when its
package ``__init__`` fails on what only its evaluation code needs, the zoo is imported without it
(:func:`robustbench_utils`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from robustvit.errors import RobustvitError, unknown_name
from robustvit.models.factory import file_sha256
from robustvit.models.sources import missing_package, register_model_source
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized

DATASETS = {"cifar10": 32, "cifar100": 32, "imagenet": 224}
#: RobustBench's ImageNet ``preprocessing`` names as (input size, crop_pct, interpolation) of robustvit's transform
#: (shorter side to size / crop_pct, centre crop); ``Res224`` (a squash) and ``Crop288`` (no resize) are refused.
IMAGENET_PREP: dict[str, tuple[int, float, str]] = {
    "Res256Crop224": (224, 224 / 256, "bilinear"),
    "BicubicRes256Crop224": (224, 224 / 256, "bicubic"),
}
#: What ``robustbench/__init__`` imports for its evaluation code and data loaders only.
_EVAL_ONLY = frozenset({"autoattack", "pkg_resources", "pandas", "tqdm"})


def robustbench_utils() -> types.ModuleType:
    """``robustbench.utils``, importing the package without its ``__init__`` when that fails on what only its
    evaluation code needs."""
    cached = sys.modules.get("robustbench.utils")
    if cached is not None and getattr(cached, "all_models", None):
        return cached
    sys.modules.pop("robustbench.utils", None)       # one imported against a stand-in of the zoo (no models)
    try:
        import robustbench.utils as utils
        return utils
    except ModuleNotFoundError as e:
        if e.name == "robustbench":
            raise missing_package("robustbench", "robustbench", "--model robustbench:…") from None
        if e.name not in _EVAL_ONLY:
            raise RobustvitError(f"robustbench's model zoo needs the {e.name} package; pip install "
                                 "'robustvit[robustbench]'") from None
    spec = importlib.util.find_spec("robustbench")
    assert spec is not None and spec.origin is not None
    stub = types.ModuleType("robustbench")
    stub.__path__ = [str(Path(spec.origin).parent)]
    sys.modules["robustbench"] = stub
    try:
        import robustbench.utils as utils
    finally:
        if sys.modules.get("robustbench") is stub:      # a later `import robustbench` runs the real __init__
            del sys.modules["robustbench"]
    return utils


def parse_name(name: str) -> tuple[str, str, str]:
    """``(dataset, threat_model, model)`` of ``cifar10/Linf/Carmon2019Unlabeled``."""
    parts = name.split("/")
    if len(parts) != 3 or not all(parts):
        raise RobustvitError(f"robustbench:{name} is not robustbench:<dataset>/<threat_model>/<name>, e.g. "
                             "robustbench:cifar10/Linf/Carmon2019Unlabeled")
    return parts[0], parts[1], parts[2]


def find_model_info(dataset: str, threat: str, name: str, model_dir: Path, package: Path) -> Path | None:
    """RobustBench's ``model_info/<dataset>/<threat_model>/<name>.json``: beside the ``models/`` folder, or in or
    beside the installed ``package``."""
    for root in (model_dir.parent, package, package.parent):
        f = root / "model_info" / dataset / threat / f"{name}.json"
        if f.is_file():
            return f
    return None


def reported_numbers(path: Path | None) -> dict[str, Any] | None:
    """A ``model_info`` file's published accuracies as fractions (``clean_acc``, ``autoattack_acc`` or
    ``corruptions_acc``), with ``eps`` and ``source``; None without a file or numbers."""
    if path is None:
        return None
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RobustvitError(f"cannot read RobustBench's model_info {path} ({e}); fix or remove it") from None
    out: dict[str, Any] = {}
    for key in ("clean_acc", "autoattack_acc", "corruptions_acc"):
        try:
            v = float(info.get(key))
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            out[key] = v / 100
    if not out:
        return None
    return {**out, "eps": info.get("eps"), "source": f"robustbench model_info {path}"}


def _preprocessing(dataset: str, entry: dict[str, Any], timm_net: nn.Module | None, name: str
                   ) -> tuple[int, float, str]:
    """(input size, crop_pct, interpolation) of a zoo model."""
    if dataset != "imagenet":
        return DATASETS[dataset], 1.0, "bilinear"
    if timm_net is not None:                 # timm-hosted zoo models: RobustBench reads timm's pretrained_cfg
        cfg = timm_net.pretrained_cfg
        return int(cfg["input_size"][-1]), float(cfg["crop_pct"]), str(cfg["interpolation"])
    prep = entry.get("preprocessing")
    if prep not in IMAGENET_PREP:
        raise RobustvitError(f"robustbench:{name} uses RobustBench's preprocessing {prep!r}, which robustvit's "
                             f"(resize, centre crop) cannot reproduce; supported: {', '.join(IMAGENET_PREP)}")
    return IMAGENET_PREP[prep]


@register_model_source("robustbench", "a model of RobustBench's zoo: robustbench:cifar10/Linf/Carmon2019Unlabeled "
                                      "(weights from --model-dir, default ./models)", extra="robustbench")
def build_robustbench(name: str, *, pretrained: bool, weights: str | None, model_dir: str | None,
                      num_classes: Callable[[], int | None]) -> Normalized:
    """The zoo model ``<dataset>/<threat_model>/<name>`` with its published weights (``pretrained`` is implied)."""
    dataset, threat, model_name = parse_name(name)
    if weights is not None:
        raise RobustvitError(f"--weights does not apply to robustbench:{name}; put its checkpoint at "
                             f"DIR/{dataset}/{threat}/{model_name}.pt and give --model-dir DIR")
    utils = robustbench_utils()
    import timm

    form = "robustbench:<dataset>/<threat_model>/<name>"
    if dataset not in DATASETS:
        raise unknown_name("RobustBench dataset", dataset, list(DATASETS), form)
    threats = [t.value for t in utils.ThreatModel]
    if threat not in threats:
        raise unknown_name("RobustBench threat model", threat, threats, form)
    ds, tm = utils.BenchmarkDataset(dataset), utils.ThreatModel(threat.replace("_3d", ""))
    zoo = utils.all_models[ds].get(tm, {})
    if model_name not in zoo:
        raise unknown_name(f"RobustBench {dataset}/{threat} model", model_name, sorted(zoo),
                           "a model of RobustBench's zoo")
    entry = zoo[model_name]
    root = Path(model_dir or "models")
    folder = root / dataset / tm.value
    ensemble = isinstance(entry.get("gdrive_id"), list)
    files = ([folder / f"{model_name}.pt_m{i}.pt" for i in range(len(entry["gdrive_id"]))] if ensemble
             else [folder / f"{model_name}.pt"])
    timm_name = f"{model_name.lower().replace('-', '_')}_{dataset}_{tm.value.lower()}"
    hosted = timm.is_model(timm_name)                  # RobustBench loads these from the Hugging Face hub
    offline = not hosted and not all(f.is_file() for f in files)
    try:
        net = utils.load_model(model_name, model_dir=str(root), dataset=ds, threat_model=tm)
    except Exception as e:  # RobustBench's loader and downloader raise anything (requests, gdown, torch.load)
        if hosted:
            raise RobustvitError(f"robustbench:{name}: RobustBench loads it as timm's {timm_name} from the Hugging "
                                 f"Face hub, which failed ({type(e).__name__}); put it in the hub cache (then "
                                 "HF_HUB_OFFLINE=1 works offline)") from None
        if offline:
            raise RobustvitError(f"robustbench:{name}: no weights at {files[0]} and the download failed "
                                 f"({type(e).__name__}); give --model-dir DIR holding {dataset}/{tm.value}/"
                                 f"{model_name}.pt (RobustBench's models/ layout)") from None
        raise RobustvitError(f"robustbench:{name}: cannot load {files[0]} ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}); replace the file") from None
    size, crop_pct, interpolation = _preprocessing(dataset, entry, net if hosted else None, name)
    k = 1000 if dataset == "imagenet" else int(dataset.removeprefix("cifar"))
    spec = ModelSpec(architecture=f"robustbench:{name}", num_classes=k, input_size=(3, size, size),
                     mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), family="other", crop_pct=crop_pct,
                     interpolation=interpolation)
    model = Normalized(net.eval(), spec)
    record: dict[str, Any] = {"pretrained": True, "zoo": "robustbench", "dataset": dataset, "threat_model": threat,
                              "model": model_name}
    if hosted:
        model.weights = {**record, "source": f"timm:{timm_name}"}
    elif all(f.is_file() for f in files):
        shas = [file_sha256(f) for f in files]
        sha = shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()   # over the digests
        model.weights = {**record, "source": f"file:{files[0]}", "sha256": sha,
                         **({"files": {str(f): s for f, s in zip(files, shas)}} if ensemble else {})}
    else:                                    # ImageNet "Standard" models: torchvision's weights
        model.weights = {**record, "source": f"robustbench:{name}"}
    model.reported = reported_numbers(find_model_info(dataset, tm.value, model_name, root,
                                                      Path(utils.__file__).parent))
    return model


__all__ = ["DATASETS", "IMAGENET_PREP", "build_robustbench", "find_model_info", "parse_name", "reported_numbers",
           "robustbench_utils"]
