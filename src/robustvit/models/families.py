"""The one model-family taxonomy.

* the **architecture family** a model is built as: ``ModelSpec.family`` (:data:`ARCHITECTURE_FAMILIES`);
* the **analysis family**, what an internals study can rely on (:data:`FAMILIES`): ViT and DeiT global token
  attention on a patch grid, XCiT channel attention, Swin windowed attention, FAN attention that takes a mask,
  CNNs residual blocks and no attention.

:func:`family_of` maps the first to the second (:data:`ANALYSIS_FAMILY`); where blocks vary (cait, beit, eva,
other) the model probe (``robustvit.models.probe.make_probe``) decides.

>>> family_of(create_model("resnet_cifar18", num_classes=10))
'cnn'
"""

from __future__ import annotations

from typing import Any

from torch import nn

from robustvit.errors import RobustvitError

#: The analysis families (what ``Analysis.families`` and ``robustvit list models --capabilities`` speak of).
FAMILIES: tuple[str, ...] = ("vit", "deit", "xcit", "swin", "fan", "cnn")
#: The architecture families ``ModelSpec.family`` takes.
ARCHITECTURE_FAMILIES: tuple[str, ...] = ("vit", "deit", "cait", "xcit", "swin", "fan", "beit", "eva", "resnet",
                                          "convnext", "other")
#: Architecture family → analysis family, where the architecture alone decides it.
ANALYSIS_FAMILY: dict[str, str] = {"vit": "vit", "deit": "deit", "xcit": "xcit", "swin": "swin", "fan": "fan",
                                   "resnet": "cnn", "convnext": "cnn"}
#: Name stems and network-class fragments → architecture family, in the order they are tried.
_NAMED = ("deit", "cait", "xcit", "swin", "fan", "convnext", "beit", "eva")


def architecture_family(name: str, net: nn.Module) -> str:
    """The architecture family of a timm model from its name and network class (``ModelSpec.family``)."""
    cls = type(net).__name__.lower()
    for fam in _NAMED:
        if name.startswith(fam) or fam in cls:
            return fam
    if "visiontransformer" in cls or name.startswith("vit"):
        return "vit"
    if "resnet" in cls or name.startswith(("resnet", "wide_resnet", "resnext")):
        return "resnet"
    return "other"


def probe_family(probe: Any) -> str:
    """The analysis family a built probe reports (a model the ``ViTProbe`` reproduces is vit)."""
    from robustvit.models.probe import BlockProbe

    return probe.family if isinstance(probe, BlockProbe) else "vit"


def family_of(model: nn.Module, probe: Any = None) -> str:
    """The analysis family of ``model`` (:data:`FAMILIES`, or ``other`` when no probe reads it): from
    ``spec.family`` where it decides, else from ``probe`` (built, or a function called only when needed), else
    from a new ``make_probe(model)``."""
    fam = getattr(getattr(model, "spec", None), "family", None)
    if fam in ANALYSIS_FAMILY:
        return ANALYSIS_FAMILY[fam]
    if callable(probe) and not hasattr(probe, "run"):
        try:
            probe = probe()
        except RobustvitError:
            return "other"
    if probe is None:
        from robustvit.models.probe import make_probe

        try:
            probe = make_probe(model)
        except RobustvitError:
            return "other"
    return probe_family(probe)


__all__ = ["ANALYSIS_FAMILY", "ARCHITECTURE_FAMILIES", "FAMILIES", "architecture_family", "family_of",
           "probe_family"]
