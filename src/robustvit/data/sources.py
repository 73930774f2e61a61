"""Data sources: ``folder:``, ``npz:``, ``cifar10:``/``cifar100:`` (torchvision), ``imagenet:`` and
``synthshapes:``, each one registered :class:`DataSource` with its options declared as an ``Options``
dataclass, and the one data spec grammar :func:`parse_data_spec`.

The grammar, shared with suites and analyses (``name:key=value:key=value``), with the source's argument
(a split or a path) first::

    SOURCE:ARG[:key=value…]        synthshapes:train:count=100:masks=1    folder:/data/pets:size=64
    SOURCE:ARG[,key=value…]        synthshapes:train,count=100,masks=1    (the comma form, also accepted)
    SOURCE:key=value[:key=value…]  imagenet_r:root=/data/imagenet-r       (no argument: the source's default)

Trailing ``key=value`` items separated by ``:`` or ``,`` are options (keys are identifiers; dashes read as
underscores); the rest, which may contain commas or colons (a path), is the argument. Values cannot contain
``:`` or ``,``; lists are joined by ``+``.

>>> parse_data_spec("synthshapes:train:count=100:masks=1")
('synthshapes', 'train', {'count': '100', 'masks': '1'})
>>> SOURCES.parse_options("synthshapes", {"count": "100", "masks": "1"}).masks
True
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from robustvit.data.base import FileImageDataset, ImageDataset, Resize, TensorImageDataset
from robustvit.data.subset import select_subset
from robustvit.data.synthshapes import MAX_CLASSES, SPLITS, SynthShapesDataset
from robustvit.errors import RobustvitError
from robustvit.options import NoOptions, option, parse_options
from robustvit.registry import Registry

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: A source called as a function: ``fn(arg, options, resize, strict) -> ImageDataset``; ``options`` are the
#: spec's raw ``key=value`` strings; ``resize`` (None: images as stored) is the model's preprocessing.
SourceFn = Callable[[str, dict[str, Any], "Resize | None", bool], ImageDataset]


class DataSource:
    """A registered data source: ``name`` (the spec's ``SOURCE``), other spellings in ``aliases``, its options
    as the ``Options`` dataclass, and :meth:`build`. Calling it as ``source(arg, raw_options, resize, strict)``
    parses the options (one-line errors naming the bad key or value and the valid ones) and builds."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = NoOptions

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        """The data set for ``arg`` with typed ``options`` (an ``Options`` instance)."""
        raise NotImplementedError

    def parse(self, raw: Mapping[str, Any] | None) -> Any:
        """``raw`` spec strings (or typed values) as an ``Options`` instance."""
        return parse_options(self.Options, raw, what=f"data source {self.name!r}")

    def __call__(self, arg: str, options: Mapping[str, Any] | Any, resize: Resize | None = None,
                 strict: bool = False) -> ImageDataset:
        opts = options if isinstance(options, self.Options) else self.parse(options)
        return self.build(arg, opts, resize, strict)

    def __repr__(self) -> str:
        return f"<data source {self.name}>"


class FunctionSource(DataSource):
    """A source written as a function ``fn(arg, options, resize, strict)`` that reads its raw options itself.
    With ``options`` (a dataclass) the spec's options are checked against it first (one-line errors) and
    passed on as given; without, they are passed unchecked."""

    def __init__(self, name: str, fn: SourceFn, options: type | None = None, aliases: tuple[str, ...] = ()) -> None:
        self.name, self.fn, self.aliases = name, fn, tuple(aliases)     # type: ignore[misc]
        self.checked = options is not None
        self.Options = options or NoOptions                               # type: ignore[misc]
        self.__doc__ = fn.__doc__

    def __call__(self, arg: str, options: Mapping[str, Any] | Any, resize: Resize | None = None,
                 strict: bool = False) -> ImageDataset:
        raw = dict(options) if isinstance(options, Mapping) else {k: v for k, v in vars(options).items()
                                                                  if v is not None}     # typed: given values only
        if self.checked and isinstance(options, Mapping):
            self.parse(raw)
        return self.fn(arg, raw, resize, strict)


#: Every data source by its spec name (``create_dataset("NAME:ARG…")``).
SOURCES: Registry[DataSource] = Registry("data source", package="robustvit.data",
                                        hint="write SOURCE:ARG, e.g. synthshapes:test")


def register_source(obj: Any, fn: SourceFn | None = None, *, options: type | None = None) -> Any:
    """Register a data source. As a class decorator, ``@register_source`` on a :class:`DataSource` subclass
    registers one instance under its ``name`` (and ``aliases``); ``register_source("name")(fn)`` registers a
    function ``fn(arg, options, resize, strict)`` (with ``options=``: its options dataclass, checked first)."""
    if isinstance(obj, str):
        def deco(f: SourceFn) -> SourceFn:
            SOURCES.add(obj, FunctionSource(obj, f, options))
            return f
        return deco(fn) if fn is not None else deco
    if isinstance(obj, type) and issubclass(obj, DataSource):
        if not obj.name:
            raise ValueError(f"{obj.__name__} has no `name`")
        SOURCES.add(obj.name, obj())
        return obj
    raise RobustvitError(f"register_source takes a DataSource class or a name, got {type(obj).__name__}")


# ---------------------------------------------------------------- the one data spec grammar
_OPTION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*=(.*)$", re.S)


def parse_data_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"synthshapes:train:count=100"`` or ``"synthshapes:train,count=100"`` → ``("synthshapes", "train",
    {"count": "100"})``: the source, the argument and the raw options in the order given (see the module's
    grammar). One-line errors for a spec without ``SOURCE:`` and for a key given twice with different values
    (the same value twice is accepted)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise RobustvitError(f"data spec {spec!r} must look like SOURCE:ARG[:key=value…] (sources: "
                             f"{', '.join(SOURCES.list())}), e.g. synthshapes:test or folder:/path/to/images")
    source, rest = spec.split(":", 1)
    items: list[tuple[str, str]] = []
    while True:
        cut = max(rest.rfind(":"), rest.rfind(","))
        m = _OPTION.match(rest[cut + 1:])
        if m is None:
            break
        items.append((m.group(1).replace("-", "_"), m.group(2).strip()))
        rest = rest[:max(cut, 0)]
        if cut < 0:
            break
    options: dict[str, str] = {}
    for key, value in reversed(items):
        if options.get(key, value) != value:
            raise RobustvitError(f"data option {key!r} is given twice with different values in {spec!r}; keep one")
        options[key] = value
    return source.strip(), rest, options


# ---------------------------------------------------------------- helpers shared by the sources
def cache_root(options: Mapping[str, Any]) -> Path:
    """Download/cache folder: option ``root=``, else $ROBUSTVIT_DATA, else ~/.cache/robustvit."""
    return Path(options.get("root") or os.environ.get("ROBUSTVIT_DATA") or Path.home() / ".cache" / "robustvit")


def override_resize(resize: Resize | None, options: dict[str, Any]) -> Resize | None:
    """``resize`` with the data options ``size``, ``crop_pct`` and ``interpolation`` applied (popped)."""
    size, crop, interp = options.pop("size", None), options.pop("crop_pct", None), options.pop("interpolation", None)
    if size is None and resize is None:
        return None
    base = resize or Resize(int(size))
    return Resize(int(size or base.size), float(crop or base.crop_pct), str(interp or base.interpolation))


# ---------------------------------------------------------------- built-in sources
@register_source
class SynthShapes(DataSource):
    """``synthshapes:train|test|cue_conflict[:size=32:count=N:seed=S:classes=K:texture_correlation=p:masks=1:
    boxes=1]`` — the embedded synthetic data set (generated, not stored); rendered at the model's size."""

    name = "synthshapes"

    @dataclass
    class Options:
        # ranges are checked by SynthShapesDataset (size 8-224, 2-12 classes, texture_correlation in [0, 1])
        size: int | None = option(None, help="image side (default: the model's input size, else 32)")
        count: int | None = option(None, help="images (default: 10000 train, 2000 test, 1000 cue_conflict)")
        seed: int | None = option(None, help="generation seed (default: 0 train, 1 test, 2 cue_conflict)")
        classes: int = option(10, help=f"number of shape classes (2-{MAX_CLASSES})")
        texture_correlation: float = option(0.5, help="P(texture tied to the shape)")
        masks: bool = option(False, help="per-pixel masks (segmentation)")
        boxes: bool = option(False, help="COCO-style boxes (detection)")

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        split = arg or "train"
        if split not in SPLITS:
            raise RobustvitError(f"unknown synthshapes split {split!r}; use train, test or cue_conflict")
        count, seed = SPLITS[split]
        size = options.size if options.size is not None else (resize.size if resize is not None else 32)
        count = count if options.count is None else options.count
        seed = seed if options.seed is None else options.seed
        k, tc = options.classes, options.texture_correlation
        spec = f"synthshapes:{split},size={size},count={count},seed={seed},classes={k},texture_correlation={tc:g}"
        spec += ",masks=1" if options.masks else ""
        spec += ",boxes=1" if options.boxes else ""
        return SynthShapesDataset(count, size=size, seed=seed, classes=k, texture_correlation=tc,
                                  cue_conflict=split == "cue_conflict", spec=spec, masks=options.masks,
                                  boxes=options.boxes)


@dataclass
class ResizeOptions:
    """The model's preprocessing, overridden: ``size``, ``crop_pct``, ``interpolation``."""

    size: int | None = option(None, min=1, help="input side (default: the model's)")
    crop_pct: float | None = option(None, min=0.0, max=1.0, help="centre-crop fraction (default: the model's)")
    interpolation: str | None = option(None, help="bilinear, bicubic, nearest, box, hamming or lanczos")


def _resize_with(resize: Resize | None, options: Any) -> Resize | None:
    return override_resize(resize, {f.name: getattr(options, f.name) for f in fields(ResizeOptions)})


@dataclass
class FolderOptions(ResizeOptions):
    """``ResizeOptions`` and ``count``: a seeded class-stratified sample of the folder's images."""

    count: int | None = option(None, min=1, help="a seeded class-stratified sample of this many images (as "
                               "--limit; default: all)")
    seed: int = option(0, help="seed of the count= sample")


@register_source
class Folder(DataSource):
    """``folder:/path[:size=S:crop_pct=P:interpolation=I:count=N:seed=S]`` — torchvision ImageFolder layout
    ``<root>/<class>/<image>``; classes sorted. Images are brought to the model's input with its own
    preprocessing (``resize``); the options override it. ``count=N``: a seeded class-stratified sample of N
    images (:func:`robustvit.data.subset.select_subset`), e.g. for a quick training run."""

    name = "folder"
    Options = FolderOptions

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        root = Path(arg).expanduser()
        if not root.is_dir():
            raise RobustvitError(f"folder {root} does not exist; give the root of an ImageFolder tree "
                                 "(<root>/<class>/<image>)")
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        if not classes:
            raise RobustvitError(f"folder {root} has no class sub-folders; expected <root>/<class>/<image>")
        samples = [(str(p), i) for i, c in enumerate(classes) for p in sorted((root / c).rglob("*"))
                   if p.suffix.lower() in IMG_EXTENSIONS]
        if not samples:
            raise RobustvitError(f"folder {root} has no images with extensions {', '.join(IMG_EXTENSIONS)}")
        if options.count is not None and options.count < len(samples):
            keep = select_subset(torch.tensor([c for _, c in samples]), options.count, "stratified", options.seed)
            samples = [samples[i] for i in keep.tolist()]
        return FileImageDataset(samples, classes, f"folder:{root}", _resize_with(resize, options), strict)


@register_source
class ImageNet(Folder):
    """``imagenet:/path/to/val`` — the validation set in ImageFolder layout (1000 wnid folders),
    brought to the model's input with its own preprocessing (default Resize(256) + CenterCrop(224))."""

    name = "imagenet"

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        ds = super().build(arg, options, resize or Resize(224), strict)
        if ds.num_classes != 1000:
            raise RobustvitError(f"imagenet:{arg} has {ds.num_classes} class folders, expected 1000 wnid folders; "
                                 "use folder: for other layouts")
        ds.spec = f"imagenet:{arg}"
        return ds


@register_source
class Npz(DataSource):
    """``npz:/path.npz`` with arrays ``x`` uint8 (N, H, W, 3) and ``y`` (N,) (optional ``classes``)."""

    name = "npz"

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        path = Path(arg).expanduser()
        if not path.is_file():
            raise RobustvitError(f"npz file {path} does not exist")
        try:
            with np.load(path, allow_pickle=False) as f:
                if "x" not in f or "y" not in f:
                    raise RobustvitError(f"{path} must hold arrays 'x' (uint8 N×H×W×3) and 'y' (N,); "
                                         f"found {', '.join(f.files)}")
                x, y = f["x"], f["y"]
                classes = [str(c) for c in f["classes"]] if "classes" in f else None
        except (OSError, ValueError) as e:
            raise RobustvitError(f"cannot read {path} as .npz ({e})") from None
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[-1] != 3:
            raise RobustvitError(f"{path}: 'x' must be uint8 of shape (N, H, W, 3), got {x.dtype} {x.shape}")
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.number) or not np.array_equal(y, np.round(y)):
            raise RobustvitError(f"{path}: 'y' must hold one integer label per image, got {y.dtype} {y.shape} "
                                 f"for {len(x)} images")
        classes = classes or [str(i) for i in range(int(y.max()) + 1 if len(y) else 0)]
        if len(y) and int(y.max()) >= len(classes):
            raise RobustvitError(f"{path}: label {int(y.max())} but only {len(classes)} classes in 'classes'")
        return TensorImageDataset(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(),
                                  torch.from_numpy(y.astype(np.int64)), classes, f"npz:{path}")


@dataclass
class CifarOptions:
    root: str | None = option(None, help="download/cache folder (default: $ROBUSTVIT_DATA, else ~/.cache/robustvit)")
    download: bool = option(True, help="download on first use")


class _TorchvisionCifar(DataSource):
    Options = CifarOptions

    def build(self, arg: str, options: Any, resize: Resize | None, strict: bool) -> ImageDataset:
        import torchvision

        split = arg or "test"
        if split not in ("train", "test"):
            raise RobustvitError(f"unknown {self.name} split {split!r}; use train or test")
        root = cache_root({"root": options.root})
        cls = torchvision.datasets.CIFAR10 if self.name == "cifar10" else torchvision.datasets.CIFAR100
        try:
            ds = cls(str(root), train=split == "train", download=options.download)
        except RuntimeError as e:
            raise RobustvitError(f"{self.name} not found under {root} ({e}); connect to the internet once or pass "
                                 "root=DIR") from None
        x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
        return TensorImageDataset(x, torch.tensor(ds.targets), list(ds.classes), f"{self.name}:{split}")


@register_source
class Cifar10(_TorchvisionCifar):
    """``cifar10:train|test[:root=DIR:download=0]`` — torchvision's CIFAR-10 (downloaded on first use)."""

    name = "cifar10"


@register_source
class Cifar100(_TorchvisionCifar):
    """``cifar100:train|test[:root=DIR:download=0]`` — torchvision's CIFAR-100 (downloaded on first use)."""

    name = "cifar100"


__all__ = ["DataSource", "FunctionSource", "SOURCES", "SourceFn", "register_source", "parse_data_spec",
           "cache_root", "override_resize", "IMG_EXTENSIONS", "MAX_CLASSES", "SynthShapes", "Folder", "ImageNet",
           "Npz", "Cifar10", "Cifar100", "ResizeOptions", "FolderOptions", "CifarOptions"]
