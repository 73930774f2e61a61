"""``hf:<repo_or_dir>``: a Hugging Face ``transformers`` image classifier (``AutoModelForImageClassification``), from a
``save_pretrained`` folder or a hub repository (``hf:google/vit-base-patch16-224``).

The image processor gives the preprocessing (:func:`processor_preprocessing`): its normalisation goes inside the
wrapper, its resize and crop become robustvit's (shorter side to size / crop_pct, centre crop); processors that
squash to height × width differ only on non-square images (recorded in ``weights.processor``). The wrapper returns
the output's ``.logits``; class names are the config's ``id2label``; ``--model-dir`` is the hub's ``cache_dir``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.factory import file_sha256
from robustvit.models.sources import missing_package, register_model_source
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized

#: PIL's resampling filters by number (what processors store) → robustvit's interpolation names.
PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
#: transformers' ``model_type`` → robustvit's architecture family.
FAMILIES = {"vit": "vit", "deit": "deit", "swin": "swin", "swinv2": "swin", "convnext": "convnext",
            "convnextv2": "convnext", "beit": "beit", "resnet": "resnet"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class HFClassifier(nn.Module):
    """A ``transformers`` image classifier that returns the logits tensor (its output's ``.logits``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=x).logits


def _field(d: Any, key: str) -> Any:
    """``d[key]`` of a dict, else attribute ``key``; None when absent."""
    if d is None:
        return None
    return d.get(key) if isinstance(d, dict) else getattr(d, key, None)


def _interpolation(resample: Any) -> str:
    value = getattr(resample, "value", resample)
    if isinstance(value, str) and value in PIL_FILTERS.values():
        return value
    if isinstance(value, int) and value in PIL_FILTERS:
        return PIL_FILTERS[value]
    return "bilinear" if resample is None else _unsupported(f"resample={resample!r}")


def _unsupported(what: str) -> Any:
    raise RobustvitError(f"the model's image processor uses {what}, which robustvit's preprocessing (resize, centre "
                         "crop, normalise) cannot reproduce")


def processor_preprocessing(proc: Any) -> dict[str, Any]:
    """An image processor's resize, crop and normalisation as robustvit's: ``size``, ``crop_pct``, ``interpolation``,
    ``mean``, ``std``, and ``resize`` (``shorter_side`` or ``height_width``: what the processor does)."""
    if (getattr(proc, "do_rescale", True) is False
            or abs(float(getattr(proc, "rescale_factor", 1 / 255)) * 255 - 1) > 1e-6):
        _unsupported("no rescaling by 1/255")
    size, crop = getattr(proc, "size", None), getattr(proc, "crop_size", None)
    crops = bool(getattr(proc, "do_center_crop", False)) and _field(crop, "height") is not None
    shortest, height, width = _field(size, "shortest_edge"), _field(size, "height"), _field(size, "width")
    crop_pct_attr = getattr(proc, "crop_pct", None)
    if height is not None and width is not None:
        if height != width:
            _unsupported(f"a non-square input {height}x{width}")
        mode, side = "height_width", int(height)
        out, crop_pct = (int(_field(crop, "height")), int(_field(crop, "height")) / side) if crops else (side, 1.0)
    elif shortest is not None:
        mode, side = "shorter_side", int(shortest)
        if crop_pct_attr is not None and not crops:      # ConvNeXt: below 384 px resize side/crop_pct, crop side
            out, crop_pct = (side, float(crop_pct_attr)) if side < 384 else (side, 1.0)
            mode = "shorter_side" if side < 384 else "height_width"
        elif crops:
            out, crop_pct = int(_field(crop, "height")), int(_field(crop, "height")) / side
        else:
            _unsupported(f"a shortest-edge resize to {side} without a crop (non-square inputs)")
    else:
        _unsupported(f"size={size!r}")
    if not getattr(proc, "do_resize", True):
        _unsupported("no resizing")
    normalise = getattr(proc, "do_normalize", True)
    mean = tuple(float(v) for v in proc.image_mean) if normalise else (0.0, 0.0, 0.0)
    std = tuple(float(v) for v in proc.image_std) if normalise else (1.0, 1.0, 1.0)
    return {"size": out, "crop_pct": float(crop_pct), "interpolation": _interpolation(getattr(proc, "resample", None)),
            "mean": mean, "std": std, "resize": mode}


def _weights_digest(folder: Path) -> str | None:
    """SHA-256 of a local folder's weights (over the shards' digests); None without one."""
    files = [folder / f for f in WEIGHT_FILES if (folder / f).is_file()]
    if not files:
        files = sorted(folder.glob("model-*.safetensors")) or sorted(folder.glob("pytorch_model-*.bin"))
    if not files:
        return None
    shas = [file_sha256(f) for f in files]
    return shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()


@register_model_source("hf", "a Hugging Face transformers image classifier: hf:<repo> or hf:<folder> "
                             "(save_pretrained)", extra="hf")
def build_hf(name: str, *, pretrained: bool, weights: str | None, model_dir: str | None,
             num_classes: Callable[[], int | None]) -> Normalized:
    """``AutoModelForImageClassification`` + ``AutoImageProcessor`` of ``name`` behind robustvit's wrapper."""
    try:
        from transformers import AutoImageProcessor, AutoModelForImageClassification
    except ImportError:
        raise missing_package("transformers", "hf", "--model hf:…") from None
    if weights is not None:
        raise RobustvitError(f"--weights does not apply to hf:{name}; give a folder written by save_pretrained")
    local = Path(name).is_dir()
    if not local and (name.startswith(("/", ".", "~")) or name.count("/") > 1):
        raise RobustvitError(f"hf:{name}: no such folder; give a folder written by save_pretrained (config.json, "
                             "model.safetensors, preprocessor_config.json) or a hub name such as org/model")
    kwargs: dict[str, Any] = {"cache_dir": model_dir} if model_dir else {}
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()           # its "Loading weights" bar would interleave with robustvit's output
    try:
        net = AutoModelForImageClassification.from_pretrained(name, **kwargs)
        proc = AutoImageProcessor.from_pretrained(name, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        where = (f"the folder {name}" if local else f"{name} (no such local folder; on the hub or in the cache)")
        raise RobustvitError(f"hf:{name}: cannot load an image classifier from {where}: {first[:200]}; give a local "
                             "folder written by save_pretrained (with its preprocessor_config.json), or the hub name "
                             "with the model in the Hugging Face cache and HF_HUB_OFFLINE=1 offline") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    pre = processor_preprocessing(proc)
    config, k = net.config, int(net.config.num_labels)
    labels = getattr(config, "id2label", None) or {}
    names = [str(labels.get(i, labels.get(str(i), i))) for i in range(k)]
    patch = getattr(config, "patch_size", None)
    spec = ModelSpec(architecture=f"hf:{Path(name).name if local else name}", num_classes=k,
                     input_size=(3, pre["size"], pre["size"]), mean=pre["mean"], std=pre["std"],
                     family=FAMILIES.get(str(config.model_type), "other"),
                     patch_size=int(patch) if isinstance(patch, int) else None, crop_pct=pre["crop_pct"],
                     interpolation=pre["interpolation"], class_names=names)
    model = Normalized(HFClassifier(net.eval()), spec)
    record: dict[str, Any] = {"pretrained": True, "source": f"hf:{Path(name).resolve() if local else name}",
                              "model_type": str(config.model_type), "processor": {
                                  "class": type(proc).__name__, "resize": pre["resize"]}}
    digest = _weights_digest(Path(name)) if local else None
    revision = getattr(config, "_commit_hash", None)
    model.weights = {**record, **({"sha256": digest} if digest else {}), **({"revision": revision} if revision else {})}
    return model


__all__ = ["FAMILIES", "HFClassifier", "build_hf", "processor_preprocessing"]
