"""Semantic-ness of adversarial perturbations (Debenedetti, "A Light Recipe to Train Robust Vision
Transformers", arXiv:2209.07399, and his thesis): the model's L∞ PGD perturbations δ, rescaled to images by
(δ + ε) / 2ε, are classified by a ``classifier``: top-1 / top-5 accuracy against the true labels measures how
much class content they carry. The paper uses strong standard models; without ``classifier=`` the analysed model
classifies its own perturbations (``classifier: self``; not the paper's setting).

``classifier=`` takes a checkpoint folder, or a timm name with ``classifier_pretrained=1`` (timm / hub) or
``classifier_weights=FILE`` (a state dict); a bare name (random weights, measuring nothing) needs
``allow_random=1``. The weights' provenance is recorded under ``classifier_weights``.

Plus the class-targeted visualisation: targeted L2 PGD from uniform noise towards chosen classes. The thesis
uses ε = 15 (``vis_eps``) at 224 × 224 px; an L2 radius grows with √(number of pixel values), so ε is scaled
by √(H·W)/224 to the model's resolution (``vis_scale=1``, the default; the result records both values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robustvit.analysis.base import FAMILIES, Analysis, Context, register_analysis
from robustvit.attacks import create_attack
from robustvit.attacks.pgd import class_visualisation
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.plotting import finish_figure
from robustvit.protocols import ANALYSIS_PROTOCOLS
from robustvit.utils import derive_seed, parse_eps


def rescale_perturbation(delta: torch.Tensor, eps: float) -> torch.Tensor:
    """δ ∈ [−ε, ε] → [0, 1]: (δ + ε) / 2ε."""
    return ((delta + eps) / (2 * eps)).clamp(0, 1)


def topk_correct(logits: torch.Tensor, y: torch.Tensor, k: int) -> int:
    return int((logits.topk(min(k, logits.shape[1]), dim=1).indices == y[:, None]).any(1).sum())


#: The paper's settings: L∞ ε = 4/255 (ImageNet), targeted PGD-100 with L2 ε = 15 at 224 px.
PAPER = ANALYSIS_PROTOCOLS["perturbation_semantics"].conditions        # checked by robustvit.protocols
PAPER_VIS_STEPS, PAPER_VIS_EPS, PAPER_RESOLUTION = PAPER["vis_steps"], PAPER["vis_eps"], PAPER["resolution"]


@dataclass
class SemanticsOptions:
    eps: str = option("4/255", help="L∞ ε of the PGD perturbations (a number or a fraction; the paper: 4/255)")
    steps: int = option(10, min=1, help="PGD steps")
    classifier: str = option("", help="checkpoint folder or timm name that classifies the perturbations "
                                      "(empty: the analysed model)")
    classifier_pretrained: bool = option(False, help="load the timm classifier's pretrained weights")
    classifier_weights: str = option("", help="a state-dict file for the timm classifier")
    allow_random: bool = option(False, help="accept a classifier with random weights (not comparable)")
    classes: int = option(8, min=1, help="classes of the class-targeted visualisation")
    vis_eps: float = option(PAPER_VIS_EPS, min=0, help="L2 ε of the visualisation at 224 px (the thesis: 15)")
    vis_steps: int = option(PAPER_VIS_STEPS, min=1, help="targeted PGD steps of the visualisation (100)")
    vis_scale: bool = option(True, help="scale vis_eps to the model's resolution by √(H·W)/224")

    def __post_init__(self) -> None:
        try:
            e = parse_eps(self.eps)
        except RobustvitError as err:
            raise RobustvitError(f"analysis 'perturbation_semantics': eps={self.eps!r} is not valid ({err})") from None
        if not math.isfinite(e) or e <= 0:
            raise RobustvitError(f"analysis 'perturbation_semantics': eps={self.eps!r} is out of range (eps must be "
                                 "a finite number > 0)")


def scaled_vis_eps(eps_224: float, height: int, width: int) -> float:
    """An L2 ε given at 224 × 224 × 3 scaled to an H × W × 3 image: ε·√(H·W·3 / (224·224·3))."""
    return float(eps_224) * math.sqrt(height * width / (PAPER_RESOLUTION * PAPER_RESOLUTION))


def load_classifier(classifier: str, *, pretrained: bool = False, weights: str = "", allow_random: bool = False,
                    num_classes: int | None = None,
                    device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model that classifies rescaled perturbations and its weights provenance (``{"pretrained", "source"
    [, "sha256"]}``): a checkpoint folder, or a timm name with ``pretrained`` or ``weights`` (a state-dict file
    for ``num_classes`` classes); a bare name only with ``allow_random``."""
    from robustvit.models import create_model
    from robustvit.models.factory import is_checkpoint_dir

    if pretrained and weights:
        raise RobustvitError("perturbation_semantics: give classifier_pretrained=1 or classifier_weights=FILE, "
                             "not both")
    if is_checkpoint_dir(classifier):
        if pretrained or weights:
            raise RobustvitError(f"perturbation_semantics: classifier={classifier} is a checkpoint folder with its "
                                 "own weights; drop classifier_pretrained / classifier_weights")
        clf = create_model(classifier)
    elif weights:
        if not Path(weights).is_file():
            raise RobustvitError(f"perturbation_semantics: classifier_weights={weights} is not a file; give a "
                                 ".safetensors/.pth state dict of the classifier")
        clf = create_model(classifier, checkpoint=weights, num_classes=num_classes)
    elif pretrained:
        clf = create_model(classifier, pretrained=True)
    elif allow_random:
        clf = create_model(classifier, num_classes=num_classes)
    else:
        raise RobustvitError(f"perturbation_semantics: classifier={classifier} has no weights; add "
                             "classifier_pretrained=1 (timm / hub), classifier_weights=FILE, or give a checkpoint "
                             "folder (allow_random=1 accepts random weights, not comparable)")
    prov = dict(getattr(clf, "weights", None) or {"pretrained": False, "source": "unknown"})
    return clf.to(device).eval(), prov


def compute_semantics(ctx: Context, o: SemanticsOptions) -> dict[str, Any]:
    classifier, vis_eps, vis_steps = o.classifier, o.vis_eps, o.vis_steps
    e = parse_eps(o.eps)
    notes: list[str] = []
    spec = getattr(ctx.model, "spec", None)
    if classifier:
        clf, prov = load_classifier(classifier, pretrained=o.classifier_pretrained, weights=o.classifier_weights,
                                    allow_random=o.allow_random, device=ctx.device,
                                    num_classes=getattr(spec, "num_classes", None))
    elif o.classifier_pretrained or o.classifier_weights:
        raise RobustvitError("perturbation_semantics: classifier_pretrained / classifier_weights need "
                             "classifier=NAME")
    else:
        clf = ctx.model
        prov = dict(getattr(ctx.model, "weights", None) or {"source": "the analysed model"})
    size = tuple(spec.input_size) if spec is not None else tuple(ctx.batch(0, 1)[0].shape[1:])
    clf_spec = getattr(clf, "spec", None)
    clf_size = tuple(clf_spec.input_size) if clf_spec is not None and clf is not ctx.model else size
    if clf_size[1:] != size[1:]:
        notes.append(f"perturbations resized from {size[1]}×{size[2]} to the classifier's "
                     f"{clf_size[1]}×{clf_size[2]}")
    num_classes = spec.num_classes if spec is not None else None
    if clf_spec is not None and num_classes is not None and clf_spec.num_classes < num_classes:
        raise RobustvitError(f"perturbation_semantics: classifier {classifier} has {clf_spec.num_classes} classes, "
                             f"the model {num_classes}; give a classifier for the same classes")

    def classify(img: torch.Tensor) -> torch.Tensor:
        if img.shape[-2:] != clf_size[1:]:
            img = torch.nn.functional.interpolate(img, size=clf_size[1:], mode="bilinear", align_corners=False)
        return clf(img)

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        atk = create_attack("pgd", ctx.model, eps=e, norm="linf", steps=o.steps,
                            seed=derive_seed(ctx.seed, "perturbation_semantics", c) % (2 ** 31))
        delta = atk(x, y) - x
        logits = classify(rescale_perturbation(delta, e))
        yield "stats", {"top1": topk_correct(logits, y, 1), "top5": topk_correct(logits, y, 5), "n": int(len(y)),
                        "attack_fooled": int((ctx.model(x + delta).argmax(1) != y).sum())}

    st = ctx.units(["stats"], unit)["stats"]
    n = st["n"]
    names = (spec.class_names if spec is not None else None) or getattr(ctx.dataset, "classes", None)
    k = min(o.classes, num_classes or o.classes)
    target = torch.randperm(num_classes or k, generator=torch.Generator().manual_seed(ctx.seed))[:k]
    eps_l2 = scaled_vis_eps(vis_eps, size[1], size[2]) if o.vis_scale else float(vis_eps)
    imgs, cls = class_visualisation(ctx.model, target.tolist(), image_size=size, seed=ctx.seed, device=ctx.device,
                                    eps=eps_l2, steps=vis_steps)
    with torch.no_grad():
        hit = (ctx.model(imgs).argmax(1) == cls).float().mean().item()
    return {"eps": o.eps, "eps_value": e, "steps": o.steps, "classifier": classifier or "self",
            "classifier_weights": prov,
            "top1": st["top1"] / n, "top5": st["top5"] / n, "attack_success_rate": st["attack_fooled"] / n,
            "visualisation": {"classes": cls.tolist(), "eps_l2": eps_l2, "eps_l2_at_224": float(vis_eps),
                              "eps_scaled": bool(o.vis_scale), "resolution": [size[1], size[2]], "steps": vis_steps,
                              "reached_target": hit,
                              "class_names": [names[i] for i in cls.tolist()] if names else None},
            "notes": notes, "_vis": imgs.detach().cpu()}


def plot_semantics(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    imgs = result.get("_vis")
    if imgs is None:
        return []
    v = result["visualisation"]
    fig, axes = plt.subplots(1, len(imgs), figsize=(1.6 * len(imgs), 2.0), squeeze=False)
    for i, ax in enumerate(axes[0]):
        ax.imshow(imgs[i].permute(1, 2, 0).clamp(0, 1).numpy())
        ax.set_title(v["class_names"][i] if v.get("class_names") else str(v["classes"][i]), fontsize=7)
        ax.axis("off")
    return [finish_figure(fig, out / "perturbation_semantics.png", f"Class-targeted visualisation (L2 ε = "
                          f"{v['eps_l2']:.3g}, {v['steps']} steps) — {result.get('model', '')}", fontsize=8)]


@register_analysis
class PerturbationSemantics(Analysis):
    name = "perturbation_semantics"
    smoke = {"steps": 1, "classes": 2, "vis_steps": 1}
    families = (*FAMILIES, "other")     # needs only the model's forward and gradients, no probe: any classifier
    description = "classify rescaled PGD perturbations (top-1/top-5) and class-targeted visualisation (Light Recipe)"
    Options = SemanticsOptions
    run = staticmethod(compute_semantics)
    plot = staticmethod(plot_semantics)


perturbation_semantics = PerturbationSemantics.function(
    """``{"top1", "top5"}`` of ``classifier`` on rescaled PGD perturbations, and the class-targeted
    visualisation. Keywords: :class:`SemanticsOptions` and the run's limit, batch_size, seed, device, store,
    progress.""")
