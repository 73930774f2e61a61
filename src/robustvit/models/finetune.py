"""Model surgery for fine-tuning (Dosovitskiy et al., arXiv:2010.11929, §3.2; Debenedetti, arXiv:2209.07399).

* :func:`reset_head`: a new, zero-initialised classification head.
* :func:`resample_pos_embed`: a learned position embedding resampled to a new patch grid, prefix (CLS) entries
  kept. ``bicubic`` is DeiT's (``F.interpolate(mode="bicubic", align_corners=False)``, no antialiasing, as
  facebookresearch/deit ``main.py``); ``linear`` is order-1 with aligned corners, as ``scipy.ndimage.zoom(order=1)``
  in Google's ViT code.
* :func:`adapt_input`: a new input resolution and/or patch size for a timm ViT (the kernel resampled by timm's
  ``resample_patch_embed``, FlexiViT's PI-resize) or an XCiT-style convolutional stem (the first stride-2
  convolutions get stride 1: patch 16 → 4 on CIFAR, as Debenedetti did).

Each changes the model in place, keeps its :class:`ModelSpec` in step (sizes, and the ``img_size``/``patch_size``
keywords a timm ViT checkpoint rebuilds from) and appends what it did to ``spec.adaptations`` (a conv stem: every
stride). :func:`reapply_adaptations` replays the record on a fresh network before a checkpoint's weights load;
:func:`check_structure` refuses a patch embedding that does not match the spec.

>>> m = create_model("vit_cifar_micro", num_classes=10)
>>> adapt_input(m, img_size=48)                 # 12×12 grid, position embedding resampled
>>> reset_head(m, 5)                            # zero-initialised 5-class head
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.wrapper import Normalized

INTERPOLATIONS = ("bicubic", "linear")
ADAPTATION_OPS = ("reset_head", "adapt_input")


def reset_head(model: Normalized, num_classes: int) -> None:
    """Replace the classifier with a zero-initialised one for ``num_classes`` classes."""
    net = model.net
    if not hasattr(net, "reset_classifier"):
        raise RobustvitError(f"{type(net).__name__} has no reset_classifier(); cannot give it a new head")
    net.reset_classifier(num_classes)
    head = net.get_classifier() if hasattr(net, "get_classifier") else None
    if isinstance(head, nn.Linear):
        nn.init.zeros_(head.weight)
        if head.bias is not None:
            nn.init.zeros_(head.bias)
    model.spec.num_classes = int(num_classes)
    model.spec.kwargs["num_classes"] = int(num_classes)
    model.spec.adaptations.append({"op": "reset_head", "num_classes": int(num_classes)})


def resample_pos_embed(posemb: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int],
                       num_prefix_tokens: int = 1, mode: str = "bicubic") -> torch.Tensor:
    """(1, prefix + Hₒ·Wₒ, D) → (1, prefix + Hₙ·Wₙ, D); identity (the same values) when the grid is unchanged."""
    if mode not in INTERPOLATIONS:
        raise RobustvitError(f"unknown position-embedding interpolation {mode!r}; use bicubic or linear")
    new_grid, old_grid = (int(new_grid[0]), int(new_grid[1])), (int(old_grid[0]), int(old_grid[1]))
    if new_grid == old_grid:
        return posemb
    if mode == "bicubic":
        from timm.layers import resample_abs_pos_embed

        return resample_abs_pos_embed(posemb, list(new_grid), list(old_grid), num_prefix_tokens=num_prefix_tokens,
                                      interpolation="bicubic", antialias=False)
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    d = grid.shape[-1]
    g = grid.reshape(1, *old_grid, d).permute(0, 3, 1, 2).float()
    g = F.interpolate(g, size=new_grid, mode="bilinear", align_corners=True)
    g = g.permute(0, 2, 3, 1).reshape(1, -1, d).to(posemb.dtype)
    return torch.cat([prefix, g], dim=1)


def adapt_input(model: Normalized, img_size: int | None = None, patch_size: int | None = None,
                interpolation: str = "bicubic") -> None:
    """Set a new input resolution and/or patch size (see the module docstring). It is tried first on a copy, which
    must run a forward at the new size: size-bound parts robustvit does not resample (relative-position tables,
    rotary grids, window partitions, …) are refused in one line instead of being left broken."""
    trial = copy.deepcopy(model).eval()
    try:
        _adapt_input(trial, img_size, patch_size, interpolation)
        s = trial.spec.image_size
        p = next(trial.parameters(), None)
        with torch.no_grad():
            out = trial(torch.zeros(1, 3, s, s, device=p.device if p is not None else "cpu"))
        if out.shape != (1, trial.spec.num_classes):
            raise RuntimeError(f"logits of shape {tuple(out.shape)}")
    except RobustvitError:
        raise
    except Exception as e:  # noqa: BLE001 — any failure of the adapted copy means: not adaptable this way
        what = ", ".join(f"{k}={v}" for k, v in (("img_size", img_size), ("patch_size", patch_size)) if v is not None)
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)[:160]
        raise RobustvitError(f"cannot adapt {type(model.net).__name__} to {what}: the adapted network fails at the "
                             f"new size ({first}); it has size-bound parts robustvit does not resample") from None
    del trial
    _adapt_input(model, img_size, patch_size, interpolation)


def _adapt_input(model: Normalized, img_size: int | None, patch_size: int | None, interpolation: str) -> None:
    net = model.net
    pe = getattr(net, "patch_embed", None)
    if pe is None:
        if patch_size is not None:
            raise RobustvitError(f"{type(net).__name__} has no patch embedding; --patch-size does not apply")
        if img_size is not None:
            model.spec.input_size = (3, int(img_size), int(img_size))   # convolutional nets take any size
            model.spec.adaptations.append({"op": "adapt_input", "img_size": int(img_size)})
        return
    old_grid = tuple(getattr(pe, "grid_size", ()) or ())
    if patch_size is not None:
        _set_patch_size(pe, int(patch_size))
    size = int(img_size or model.spec.image_size)
    if hasattr(pe, "_init_img_size"):
        pe.img_size, pe.grid_size, pe.num_patches = pe._init_img_size(size)
    elif hasattr(pe, "img_size"):
        pe.img_size = size
    pos = getattr(net, "pos_embed", None)
    if isinstance(pos, nn.Parameter) and old_grid and not getattr(pe, "dynamic_img_pad", False):
        prefix = pos.shape[1] - old_grid[0] * old_grid[1]       # entries before the grid (CaiT/ConViT: none)
        if not 0 <= prefix <= int(getattr(net, "num_prefix_tokens", 1)):
            raise RobustvitError(f"{type(net).__name__}'s position embedding has {pos.shape[1]} entries for a "
                                 f"{old_grid[0]}x{old_grid[1]} grid; cannot resample it")
        new = resample_pos_embed(pos.data, tuple(pe.grid_size), old_grid, prefix, interpolation)
        if new is not pos.data:
            net.pos_embed = nn.Parameter(new, requires_grad=pos.requires_grad)
    model.spec.input_size = (3, size, size)
    ps = getattr(pe, "patch_size", None)
    if ps is not None:
        model.spec.patch_size = int(ps[0] if isinstance(ps, (tuple, list)) else ps)
    if hasattr(pe, "_init_img_size"):   # timm ViT: the constructor rebuilds these shapes from a checkpoint's spec
        model.spec.kwargs["img_size"] = size
        model.spec.kwargs["patch_size"] = model.spec.patch_size
    record: dict = {"op": "adapt_input", "img_size": size, "patch_size": model.spec.patch_size,
                    "interpolation": interpolation}
    if _is_conv_stem(pe):               # XCiT: the strides are not constructor keywords; record them all
        record["stem_strides"] = stem_strides(net)
    model.spec.adaptations.append(record)


def _is_conv_stem(pe: nn.Module) -> bool:
    """Whether ``pe.proj`` is a stack holding convolutions (XCiT, FAN), not timm's one linear projection."""
    proj = getattr(pe, "proj", None)
    return (proj is not None and not isinstance(proj, nn.Conv2d)
            and any(isinstance(m, nn.Conv2d) for m in proj.modules()))


def stem_strides(net: nn.Module) -> dict[str, list[int]]:
    """{qualified name: [sh, sw]} of every convolution of a convolutional patch stem (``patch_embed.proj``)."""
    return {f"patch_embed.proj.{n}": [int(s) for s in m.stride]
            for n, m in net.patch_embed.proj.named_modules() if isinstance(m, nn.Conv2d)}


def stem_patch_size(pe: nn.Module) -> int:
    """The effective patch size of a convolutional stem: the product of its convolutions' strides."""
    p = 1
    for m in pe.proj.modules():
        if isinstance(m, nn.Conv2d):
            p *= int(m.stride[0])
    return p


def reapply_adaptations(model: Normalized, where: str = "checkpoint") -> None:
    """Replay ``model.spec.adaptations`` on a freshly built network before its weights load: a head reset where the
    class count differs, a conv stem's strides and patch size (timm ViTs rebuild those from ``spec.kwargs``).
    Refuses, in one line, an adaptation it cannot re-apply."""
    net = model.net
    for a in model.spec.adaptations:
        op = a.get("op")
        if op not in ADAPTATION_OPS:
            raise RobustvitError(f"{where} records an adaptation {op!r} this robustvit cannot re-apply "
                                 f"(known: {', '.join(ADAPTATION_OPS)}); load it with the robustvit that wrote it")
        if op == "reset_head":
            n = int(a["num_classes"])
            if int(getattr(net, "num_classes", n)) != n:
                if not hasattr(net, "reset_classifier"):
                    raise RobustvitError(f"{where} records a {n}-class head that {type(net).__name__} cannot take")
                net.reset_classifier(n)
            continue
        pe = getattr(net, "patch_embed", None)
        strides = a.get("stem_strides")
        if strides:
            if pe is None or not _is_conv_stem(pe):
                raise RobustvitError(f"{where} records convolutional-stem strides but {type(net).__name__} has no "
                                     "convolutional stem; the checkpoint is for another architecture")
            for name, stride in strides.items():
                try:
                    conv = net.get_submodule(name)
                except AttributeError:
                    conv = None
                if not isinstance(conv, nn.Conv2d):
                    raise RobustvitError(f"{where} records a stride for {name}, which is not a convolution of the "
                                         f"rebuilt {type(net).__name__}; the checkpoint is for another architecture")
                conv.stride = (int(stride[0]), int(stride[1]))
            p = stem_patch_size(pe)
            pe.patch_size = (p, p) if isinstance(pe.patch_size, (tuple, list)) else p
        if a.get("img_size") is not None and hasattr(pe, "img_size") and not hasattr(pe, "_init_img_size"):
            pe.img_size = (int(a["img_size"]), int(a["img_size"]))


def conv_stem_consistent(net: nn.Module) -> bool:
    """True when ``net`` has a convolutional stem whose strides multiply to its ``patch_size`` (XCiT, FAN)."""
    pe = getattr(net, "patch_embed", None)
    if pe is None or not _is_conv_stem(pe) or getattr(pe, "patch_size", None) is None:
        return False
    ps = pe.patch_size
    return stem_patch_size(pe) == int(ps[0] if isinstance(ps, (tuple, list)) else ps)


def check_structure(model: Normalized, where: str = "checkpoint", conv_stem: bool = True) -> None:
    """Refuse a network whose patch embedding is not the one its spec describes (a checkpoint must never load as
    another network). ``conv_stem``: the fresh stem's strides multiply to its patch size
    (:func:`conv_stem_consistent`), so they can be checked."""
    pe = getattr(model.net, "patch_embed", None)
    want = model.spec.patch_size
    if pe is None or want is None:
        return
    if _is_conv_stem(pe):
        if not conv_stem:
            return
        have = stem_patch_size(pe)
    else:
        ps = getattr(pe, "patch_size", None)
        have = int(ps[0] if isinstance(ps, (tuple, list)) else ps) if ps is not None else want
    if have != want:
        raise RobustvitError(f"{where} describes patch size {want} but the rebuilt {model.spec.architecture} has "
                             f"patch size {have}; the checkpoint's adaptations cannot be re-applied — refusing to "
                             "load it as another network")


def _set_patch_size(pe: nn.Module, patch: int) -> None:
    if hasattr(pe, "backbone"):                                          # hybrid: a CNN stem's feature map
        raise RobustvitError(f"{type(pe).__name__} embeds a CNN's feature map; its patch size follows the CNN's "
                             "strides and cannot be changed (--patch-size does not apply)")
    proj = getattr(pe, "proj", None)
    if isinstance(proj, nn.Conv2d) and hasattr(pe, "set_input_size"):   # linear projection (timm PatchEmbed)
        pe.set_input_size(patch_size=patch)
        return
    old = getattr(pe, "patch_size", None)
    old = int(old[0] if isinstance(old, (tuple, list)) else old) if old is not None else None
    if proj is not None and old is not None:                             # convolutional stem (XCiT)
        strided = [m for m in proj.modules() if isinstance(m, nn.Conv2d) and m.stride == (2, 2)]
        if patch > old or old % patch or (old // patch) & (old // patch - 1):
            raise RobustvitError(f"a convolutional stem can go from patch {old} to {old}/2^k, not to {patch}")
        k = int(math.log2(old // patch))
        if k > len(strided):
            raise RobustvitError(f"the stem has only {len(strided)} stride-2 convolutions; cannot reach patch {patch}")
        for conv in strided[:k]:
            conv.stride = (1, 1)
        pe.patch_size = patch
        return
    raise RobustvitError(f"cannot change the patch size of {type(pe).__name__}")
