"""``create_model``, ``list_models`` and the checkpoint folder format.

A checkpoint is a folder with ``model.safetensors`` (the weights) and ``spec.json`` (the ``ModelSpec``, with the
adaptations made after construction). Loading rebuilds the architecture from the registry, re-applies the
adaptations, then loads tensors only — no code from the file is ever executed.

:func:`build_named_model` builds a *second* model from a user-given name (a transfer source, …) and never hands back
random weights unless told to. :func:`rebuild` builds a model again with more constructor keywords, and its weights.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import timm
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robustvit._version import __version__
from robustvit.errors import RobustvitError, unknown_name
from robustvit.models import cifar as _cifar  # noqa: F401  (registers robustvit's architectures with timm)
from robustvit.models import fan as _fan  # registers the FAN architectures with timm
from robustvit.models.finetune import check_structure, conv_stem_consistent, reapply_adaptations
from robustvit.models.families import architecture_family as model_family
from robustvit.models.spec import ModelSpec
from robustvit.models.hub import offline_guard
from robustvit.models.wrapper import Normalized
from robustvit.runs.atomic import replacing, write_text

OWN_MODELS = ("vit_cifar_micro", "vit_cifar_tiny", "vit_cifar_small", "vit_cifar_demo", "resnet_cifar18",
              *timm.list_models("fan_*"))
WEIGHTS_FILE, SPEC_FILE = "model.safetensors", "spec.json"


def list_models(pattern: str | None = None, pretrained: bool = False) -> list[str]:
    """Model names accepted by ``create_model``: timm's registry (incl. robustvit's own architectures)."""
    names = set(timm.list_models(pattern or "", pretrained=pretrained))
    names |= {n for n in OWN_MODELS if pattern is None or fnmatch.fnmatch(n, pattern)}
    return sorted(names)


def is_checkpoint_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / SPEC_FILE).is_file()


def create_model(name: str | None = None, *, pretrained: bool = False, num_classes: int | None = None,
                 img_size: int | None = None, checkpoint: str | Path | None = None, **kwargs: Any) -> Normalized:
    """Build a model that takes [0, 1] images and returns logits, with its normalisation inside.

    Args:
        name: a timm model name (``vit_small_patch16_224``, ``resnet50``, …), one of robustvit's own
            (``vit_cifar_tiny``, ``resnet_cifar18``, ``fan_cifar_tiny``, …), or a checkpoint folder.
        pretrained: download the weights through timm / the Hugging Face hub.
        num_classes: a new classification head with this many classes.
        img_size: the input side, for architectures that take it.
        checkpoint: a checkpoint folder, or a ``.safetensors``/``.pth`` state-dict file for ``name``.
        kwargs: the architecture's constructor keywords (``depth=``, ``drop_path_rate=``, …).

    Returns:
        A :class:`Normalized` model with its ``spec`` (:class:`ModelSpec`: input size, mean/std, classes, patch
        size, family).

    Shape:
        - Input: :math:`(N, 3, H, W)` float in [0, 1], H = W = ``spec.image_size``.
        - Output: :math:`(N, C)` logits, C = ``spec.num_classes``.

    Example:
        >>> m = create_model("vit_cifar_tiny", num_classes=10)
        >>> m(torch.rand(2, 3, 32, 32)).shape
        torch.Size([2, 10])
        >>> m.spec.image_size, m.spec.patch_size
        (32, 4)
    """
    if name is not None and is_checkpoint_dir(name):
        name, checkpoint = None, name
    if checkpoint is not None and is_checkpoint_dir(checkpoint):
        model = load_checkpoint(checkpoint, expect_architecture=name)
        model.weights = {"pretrained": True, "source": f"checkpoint:{checkpoint}",
                         "sha256": file_sha256(Path(checkpoint) / WEIGHTS_FILE)}
        return model
    if checkpoint is not None and not Path(checkpoint).exists():
        raise RobustvitError(f"checkpoint {checkpoint} does not exist; pass a folder written by `robustvit train` "
                             "(model.safetensors + spec.json) or a state-dict file")
    if name is None:
        raise RobustvitError("give a model name or a checkpoint folder")
    if name not in timm.list_models() and not timm.is_model(name):
        hint = "a timm model name or a checkpoint folder"
        if Path(name).exists():
            hint = f"{name} exists but holds no {SPEC_FILE}; it is not a robustvit checkpoint folder"
        raise unknown_name("model", name, list_models(), hint)
    build_kwargs = dict(kwargs)
    if num_classes is not None:
        build_kwargs["num_classes"] = int(num_classes)
    if img_size is not None:
        build_kwargs["img_size"] = int(img_size)
    net = _build(name, pretrained, build_kwargs)
    model = Normalized(net, spec_from_timm(name, net, build_kwargs))
    if checkpoint is not None:
        load_state_dict_file(net, checkpoint, name)
        model.weights = {"pretrained": True, "source": f"file:{checkpoint}", "sha256": file_sha256(checkpoint)}
    else:
        model.weights = {"pretrained": bool(pretrained), "source": f"timm:{name}" if pretrained else "random",
                         **({} if pretrained else RANDOM_RECORD)}
    return model


#: What a model with random weights carries in ``weights`` (and so in results.json ``model.weights``).
RANDOM_RECORD: dict[str, Any] = {"random": True, "note": "random weights: the numbers describe an untrained network"}


def build_named_model(spec: str | Path, *, pretrained: bool = False, weights: str | Path | None = None,
                      allow_random: bool = False, role: str = "model", option_prefix: str = "",
                      **kwargs: Any) -> Normalized:
    """Build a model named by the user for a secondary role (``role``: "transfer source", "classifier", …).

    ``spec`` is a checkpoint folder, or a model name with ``pretrained=True`` or ``weights=FILE`` (a state dict). A
    bare name would have random weights: refused in one line unless ``allow_random=True`` (then ``model.weights``
    says so). ``option_prefix`` names the caller's options in that message (``source_`` → ``source_pretrained=1``);
    ``kwargs`` go to :func:`create_model`.

    >>> build_named_model("resnet18", role="transfer source")          # doctest: +SKIP
    Traceback (most recent call last):
    robustvit.errors.RobustvitError: transfer source resnet18 would have random weights; ...
    """
    spec = str(spec)
    if is_checkpoint_dir(spec):
        if weights is not None:
            raise RobustvitError(f"{role} {spec} is a checkpoint folder; it takes no separate weights file")
        return create_model(spec)
    if pretrained and weights is not None:
        raise RobustvitError(f"{role} {spec}: give pretrained or a weights file, not both")
    if not pretrained and weights is None and not allow_random:
        raise RobustvitError(f"{role} {spec} would have random weights; pass {option_prefix}pretrained=1 (published "
                             f"weights), {option_prefix}weights=FILE (a state dict), a checkpoint folder instead of "
                             "the name, or allow_random=1 (results then marked not comparable)")
    model = create_model(spec, pretrained=pretrained, checkpoint=weights, **kwargs)
    if model.weights.get("source") == "random":
        model.weights.update({**RANDOM_RECORD, "allow_random": True})
    return model


def rebuild(model: Normalized, **kwargs) -> Normalized:
    """``model`` rebuilt with its constructor keywords updated by ``kwargs`` (``drop_path_rate=0.05``), adaptations
    replayed and weights loaded (strict): the same function in eval mode, the new settings in ``spec.kwargs``."""
    spec = copy.deepcopy(model.spec)
    spec.kwargs.update(kwargs)
    fresh = create_model(spec.architecture, **spec.kwargs)
    new = Normalized(fresh.net, spec)
    checkable = conv_stem_consistent(fresh.net)
    reapply_adaptations(new, where=f"model {spec.architecture}")
    check_structure(new, where=f"model {spec.architecture}", conv_stem=checkable)
    new.net.load_state_dict(model.net.state_dict())
    new.load_state_dict(model.state_dict())
    if hasattr(model, "weights"):
        new.weights = model.weights
    return new


def has_random_weights(model: nn.Module) -> bool:
    """Whether the model's recorded weights are random (``RANDOM_RECORD``); False when unknown."""
    w = getattr(model, "weights", None)
    return isinstance(w, dict) and (w.get("source") == "random" or bool(w.get("random")))


def warn_if_random(name: str, model: Normalized) -> None:
    """Warn when a model is evaluated with randomly initialised weights."""
    if model.weights.get("source") == "random":
        warnings.warn(f"{name} has random weights (no --pretrained, --weights or checkpoint): its results describe "
                      "an untrained network", stacklevel=2)


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file (weights provenance recorded in results)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _build(name: str, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    try:
        with offline_guard(name) if pretrained else nullcontext():
            return timm.create_model(name, pretrained=pretrained, **kwargs)
    except TypeError as e:
        raise RobustvitError(f"model {name!r} does not accept these options ({e}); remove them") from None
    except RuntimeError as e:
        if "pretrained" in str(e):
            raise RobustvitError(str(e)) from None
        raise


def spec_from_timm(name: str, net: nn.Module, kwargs: dict[str, Any]) -> ModelSpec:
    cfg = getattr(net, "pretrained_cfg", None) or {}
    input_size = tuple(cfg.get("input_size", (3, 224, 224)))
    if "img_size" in kwargs:
        s = kwargs["img_size"]
        input_size = (3, *s) if isinstance(s, (tuple, list)) else (3, s, s)
    ps = getattr(getattr(net, "patch_embed", None), "patch_size", None)
    patch = int(ps[0] if isinstance(ps, (tuple, list)) else ps) if ps is not None else None
    num_classes = int(getattr(net, "num_classes", kwargs.get("num_classes", cfg.get("num_classes", 1000))))
    return ModelSpec(architecture=name, num_classes=num_classes, input_size=tuple(int(v) for v in input_size),
                     mean=tuple(float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406))),
                     std=tuple(float(v) for v in cfg.get("std", (0.229, 0.224, 0.225))),
                     family=model_family(name, net), patch_size=patch,
                     crop_pct=float(cfg.get("crop_pct") or 0.875),
                     interpolation=str(cfg.get("interpolation") or "bilinear"),
                     kwargs={k: v for k, v in kwargs.items() if _jsonable(v)})


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except TypeError:
        return False


def save_checkpoint(model: Normalized, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write ``directory/model.safetensors`` + ``directory/spec.json`` (atomic per file), adaptations included."""
    if getattr(model, "class_index", None) is not None:
        raise RobustvitError("this model has a class map (map_classes); save it before mapping its classes")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state, seen = {}, set()
    for k, v in model.net.state_dict().items():          # tensors shared between modules (CoaT) are stored once
        v = v.detach().cpu().contiguous()                 # per key: safetensors refuses aliased storage
        ptr = (v.untyped_storage().data_ptr(), v.storage_offset()) if v.numel() else None
        state[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    with replacing(d / WEIGHTS_FILE, suffix=".tmp") as tmp:      # safetensors writes 0600; replacing: 0644
        save_file(state, str(tmp))
    meta = {"format": "robustvit-checkpoint", "version": 1, "robustvit": __version__,
            "spec": model.spec.to_dict(), **(extra or {})}
    write_text(d / SPEC_FILE, json.dumps(meta, indent=2))
    return d


def load_checkpoint(directory: str | Path, expect_architecture: str | None = None,
                    map_location: str | torch.device = "cpu") -> Normalized:
    """Rebuild a model from a checkpoint folder written by ``save_checkpoint``: the architecture from its
    constructor keywords, then the recorded adaptations (head, stem strides, patch size), then the weights; a
    recorded adaptation that cannot be re-applied is refused in one line."""
    d = Path(directory)
    spec = read_spec(d)
    if expect_architecture and expect_architecture != spec.architecture:
        raise RobustvitError(f"checkpoint {d} holds a {spec.architecture!r} model, not {expect_architecture!r}; "
                             f"pass --model {d} alone or the matching architecture")
    if spec.architecture not in list_models() and not timm.is_model(spec.architecture):
        raise RobustvitError(f"checkpoint {d} needs architecture {spec.architecture!r}, which this install does not "
                             "know")
    if not (d / WEIGHTS_FILE).is_file():
        raise RobustvitError(f"checkpoint {d} has no {WEIGHTS_FILE}")
    where = f"checkpoint {d}"
    try:
        net = _build(spec.architecture, False, dict(spec.kwargs))
        model = Normalized(net, spec)
        checkable = conv_stem_consistent(net)
        reapply_adaptations(model, where=where)
        check_structure(model, where=where, conv_stem=checkable)
    except RobustvitError as e:
        if where in str(e):
            raise
        raise RobustvitError(f"{where}: its {SPEC_FILE} does not build {spec.architecture!r} ({e})") from None
    except Exception as e:  # noqa: BLE001  a spec.json whose keywords or adaptations the architecture rejects
        first = str(e).splitlines()[0][:160] if str(e) else ""
        raise RobustvitError(f"{where}: its {SPEC_FILE} does not build {spec.architecture!r} ({type(e).__name__}: "
                             f"{first}); the file is damaged or from another version") from None
    load_state_dict_file(net, d / WEIGHTS_FILE, spec.architecture, map_location)
    return model


def read_spec(directory: str | Path) -> ModelSpec:
    """The :class:`ModelSpec` in ``directory/spec.json``; a missing, malformed or hostile file is refused."""
    path = Path(directory) / SPEC_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RobustvitError(f"{path} is not a valid robustvit spec file ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
        raise RobustvitError(f"{path} is not a valid robustvit spec file (no 'spec' object)")
    try:
        return ModelSpec.from_dict(meta["spec"])
    except RobustvitError as e:
        raise RobustvitError(f"{path} is not a valid robustvit spec file: {e}") from None


def load_state_dict_file(net: nn.Module, path: str | Path, architecture: str,
                         map_location: str | torch.device = "cpu") -> None:
    """Load weights safely (safetensors, or ``torch.load(weights_only=True)``) with a clear mismatch error."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path), device=str(map_location))
        else:
            state = torch.load(path, map_location=map_location, weights_only=True)
            if isinstance(state, dict):
                for key in ("state_dict", "model", "model_state"):
                    if key in state and isinstance(state[key], dict):
                        state = state[key]
                        break
    except Exception as e:  # corrupt file, pickle with code, …
        raise RobustvitError(f"cannot read weights from {path} ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200]})") from None
    if not isinstance(state, dict):
        raise RobustvitError(f"{path} does not hold a state dict")
    state = {k.removeprefix("module.").removeprefix("model."): v for k, v in state.items()}
    own = net.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    wrong = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or wrong:
        detail = (f"{len(missing)} missing, {len(unexpected)} unexpected, {len(wrong)} wrong-shaped tensors"
                  + (f", e.g. {wrong[0]} {tuple(state[wrong[0]].shape)} vs {tuple(own[wrong[0]].shape)}" if wrong else
                     f", e.g. {(missing or unexpected)[0]}"))
        raise RobustvitError(f"weights in {path} do not fit architecture {architecture!r} ({detail}); "
                             "is the checkpoint for another model or class count?")
    net.load_state_dict(state, strict=True)
