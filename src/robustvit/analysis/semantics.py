"""Semantic-ness of adversarial perturbations (Debenedetti, "A Light Recipe to Train Robust Vision
Transformers", arXiv:2209.07399, and his thesis): PGD perturbations δ of the model (L∞, ``eps``) are
rescaled to images by (δ + ε) / 2ε and classified by a ``classifier`` (a model name or checkpoint; default
the analysed model itself) — top-1 / top-5 accuracy against the true labels measures how much class
content the perturbations carry (robust models' perturbations look like the class). Plus the
class-targeted visualisation: targeted PGD from uniform noise with a large L2 ε (15, 100 steps) towards
chosen classes, saved as an image grid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robustvit.analysis.base import Analysis, Context, make_context
from robustvit.attacks import create_attack
from robustvit.attacks.pgd import class_visualisation
from robustvit.utils import derive_seed, parse_eps


def rescale_perturbation(delta: torch.Tensor, eps: float) -> torch.Tensor:
    """δ ∈ [−ε, ε] → [0, 1]: (δ + ε) / 2ε."""
    return ((delta + eps) / (2 * eps)).clamp(0, 1)


def topk_correct(logits: torch.Tensor, y: torch.Tensor, k: int) -> int:
    k = min(k, logits.shape[1])
    return int((logits.topk(k, dim=1).indices == y[:, None]).any(1).sum())


def compute_semantics(ctx: Context, eps: str = "4/255", steps: int = 10, classifier: str = "",
                      classes: int = 8, vis_eps: float = 15.0, vis_steps: int = 100) -> dict[str, Any]:
    e = parse_eps(eps)
    clf = ctx.model
    if classifier:
        from robustvit.models import create_model
        clf = create_model(classifier).to(ctx.device).eval()

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        atk = create_attack("pgd", ctx.model, eps=e, norm="linf", steps=steps,
                            seed=derive_seed(ctx.seed, "perturbation_semantics", c) % (2 ** 31))
        delta = atk(x, y) - x
        logits = clf(rescale_perturbation(delta, e))
        yield "stats", {"top1": topk_correct(logits, y, 1), "top5": topk_correct(logits, y, 5), "n": int(len(y)),
                        "attack_fooled": int((ctx.model(x + delta).argmax(1) != y).sum())}

    st = ctx.units(["stats"], unit)["stats"]
    n = st["n"]
    spec = getattr(ctx.model, "spec", None)
    size = tuple(spec.input_size) if spec is not None else tuple(ctx.batch(0, 1)[0].shape[1:])
    num_classes = spec.num_classes if spec is not None else None
    names = (spec.class_names if spec is not None else None) or getattr(ctx.dataset, "classes", None)
    k = min(classes, num_classes or classes)
    target = torch.randperm(num_classes or k, generator=torch.Generator().manual_seed(ctx.seed))[:k]
    imgs, cls = class_visualisation(ctx.model, target.tolist(), image_size=size, seed=ctx.seed, device=ctx.device,
                                    eps=vis_eps, steps=vis_steps)
    with torch.no_grad():
        hit = (ctx.model(imgs).argmax(1) == cls).float().mean().item()
    notes = [] if classifier else ["classifier = the analysed model itself (the thesis uses strong standard models)"]
    return {"eps": eps, "steps": steps, "classifier": classifier or "self", "top1": st["top1"] / n,
            "top5": st["top5"] / n, "attack_success_rate": st["attack_fooled"] / n,
            "visualisation": {"classes": cls.tolist(), "eps_l2": vis_eps, "steps": vis_steps,
                              "reached_target": hit,
                              "class_names": [names[i] for i in cls.tolist()] if names else None},
            "notes": notes, "_vis": imgs.detach().cpu()}


def perturbation_semantics(model: torch.nn.Module, dataset: Any, *, eps: str = "4/255", steps: int = 10,
                           classifier: str = "", classes: int = 8, vis_eps: float = 15.0, vis_steps: int = 100,
                           **common: Any) -> dict[str, Any]:
    """``{"top1", "top5"}`` of ``classifier`` on rescaled PGD perturbations, and the class-targeted
    visualisation. ``common``: limit, batch_size, seed, device, store, progress."""
    ctx = make_context(model, dataset, name="perturbation_semantics", **common)
    return compute_semantics(ctx, eps, steps, classifier, classes, vis_eps, vis_steps)


def plot_semantics(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt

    imgs = result.get("_vis")
    if imgs is None:
        return []
    v = result["visualisation"]
    n = len(imgs)
    fig, axes = plt.subplots(1, n, figsize=(1.6 * n, 2.0), squeeze=False)
    for i in range(n):
        axes[0, i].imshow(imgs[i].permute(1, 2, 0).clamp(0, 1).numpy())
        name = v["class_names"][i] if v.get("class_names") else str(v["classes"][i])
        axes[0, i].set_title(name, fontsize=7)
        axes[0, i].axis("off")
    fig.suptitle(f"Class-targeted visualisation (L2 ε = {v['eps_l2']}, {v['steps']} steps) — {result.get('model', '')}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "perturbation_semantics.png", dpi=110)
    plt.close(fig)
    return ["perturbation_semantics.png"]


class PerturbationSemantics(Analysis):
    name = "perturbation_semantics"
    families = ("vit", "deit", "xcit", "swin", "fan", "cnn")
    description = "classify rescaled PGD perturbations (top-1/top-5) and class-targeted visualisation (Light Recipe)"
    options = {"eps": "4/255", "steps": 10, "classifier": "", "classes": 8, "vis_eps": 15.0, "vis_steps": 100}

    def compute(self, ctx: Context, **o: Any) -> dict[str, Any]:
        return compute_semantics(ctx, str(o["eps"]), int(o["steps"]), str(o["classifier"]), int(o["classes"]),
                                 float(o["vis_eps"]), int(o["vis_steps"]))

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return plot_semantics(result, out)
