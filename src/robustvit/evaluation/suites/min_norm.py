"""Suite ``min_norm``: each image's smallest adversarial perturbation found, and robust accuracy against ε from it
(one run gives the whole curve, as the robustness curves of Pintor et al. 2021, arXiv:2102.12827).

``min_norm:attack=fmn:norm=l2:steps=100`` — the minimum-norm attack (``fmn``, :mod:`robustvit.attacks.fmn`, by
default; ``fab``, :mod:`robustvit.attacks.fab`, L∞/L2, its ``last_distance``) runs on every correctly classified
image; a misclassified image has distance 0, one where no adversarial point was found ``inf`` (null in JSON). Norm
and steps: the option, else ``--norm``/``--steps``, else L∞ and the attack's own; FAB's ε as the attack suites'.

``curve`` is ``[[ε, accuracy], …]``: the fraction of all images whose distance exceeds ε, at 0 and at every distinct
distance (a step function, :func:`accuracy_at`); an upper bound of the true robust accuracy, as the attack finds an
upper bound of each minimal perturbation. Result keys: docs/attacks.md.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from robustvit.attacks import create_attack
from robustvit.attacks.base import Attack, canonical_norm, get_attack_class
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.adversarial import attack_kwargs, attack_memory, chunk_seed, data_convention
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, nonfinite_result, register_suite
from robustvit.metrics.accuracy import correct, nonfinite_rows
from robustvit.options import Eps, option

#: The attacks the suite takes its distances from.
MIN_NORM_ATTACKS = ("fmn", "fab")
#: Quantiles of the distances in the result (``median_distance`` is the 0.5 one).
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def accuracy_curve(distances: list[float], n: int | None = None) -> list[list[float]]:
    """``[[ε, accuracy(ε)], …]`` at ε = 0 and at every distinct finite positive distance, accuracy(ε) = the fraction
    of the ``n`` images (default: as many as distances) whose distance exceeds ε.

    >>> accuracy_curve([0.0, 0.5, 0.25, float("inf")])
    [[0.0, 0.75], [0.25, 0.5], [0.5, 0.25]]
    """
    n = len(distances) if n is None else n
    ds = sorted(distances)
    points = sorted({0.0} | {d for d in ds if 0 < d < math.inf})
    return [[e, (len(ds) - bisect_right(ds, e)) / max(n, 1)] for e in points]


def accuracy_at(curve: list[list[float]], eps: float) -> float | None:
    """Robust accuracy at ``eps`` read from a ``curve`` (the value at the largest point ≤ ε); None for ε < 0.

    >>> accuracy_at([[0.0, 0.75], [0.25, 0.5], [0.5, 0.25]], 0.3)
    0.5
    """
    i = bisect_right([p[0] for p in curve], eps)
    return curve[i - 1][1] if i else None


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` with linear interpolation between order statistics (NumPy's default); ``inf``
    where it interpolates towards an infinite value; NaN for no values."""
    s = sorted(values)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or s[lo] == s[hi]:
        return s[lo]
    return math.inf if math.isinf(s[hi]) else s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _json(v: float) -> float | None:
    return v if math.isfinite(v) else None


@register_suite
class MinNorm(Suite):
    name = "min_norm"
    aliases = ("min-norm",)
    description = "robust accuracy against ε from each image's smallest adversarial perturbation (FMN or FAB)"
    smoke: ClassVar[dict[str, Any]] = {"steps": 3}
    demo_skip = "the demo runs pgd, fgsm and autoattack (run `robustvit eval --suite min_norm`)"

    @dataclass
    class Options(SuiteOptions):
        attack: Literal[MIN_NORM_ATTACKS] = option("fmn", help="fmn (Pintor et al. 2021; linf, l2, l1) or fab "
                                                               "(Croce & Hein 2020; linf, l2)")
        norm: str | None = option(None, help="threat model: linf, l2 or l1 (default: --norm, else linf)")
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else the attack's: 100)")
        eps: Eps | None = option(None, min=0, help="fab only: its restarts' ε (default: --eps, else the data's)")
        restarts: int | None = option(None, min=1, help="fab only: restarts on the images not yet within ε "
                                                        "(default 5)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        extra = [k for k in ("eps", "restarts") if k in self.options and self.opts.attack != "fab"]
        if extra:
            raise RobustvitError(f"suite min_norm: {extra[0]}= applies to attack=fab only (FMN needs no ε and "
                                 "has no restarts)")
        norms = get_attack_class(self.opts.attack).norms
        if self.opts.norm is not None and canonical_norm(self.opts.norm) not in norms:
            raise RobustvitError(f"suite min_norm: attack {self.opts.attack} takes norm={' or '.join(norms)}, "
                                 f"not {self.opts.norm!r}")

    def attack_for(self, ctx: EvalContext, seed: int) -> Attack:
        cls = get_attack_class(self.opts.attack)
        norm = canonical_norm(self.option(ctx, "norm") or "linf")
        steps = self.option(ctx, "steps")
        kw: dict[str, Any] = {"norm": norm, **({"steps": steps} if steps is not None else {})}
        if self.opts.attack == "fab":
            given = {k: self.options[k] for k in ("eps", "restarts") if k in self.options}
            kw.update(attack_kwargs(cls, {**given, "norm": norm}, {"eps": ctx.options.get("eps")},
                                    data_convention(ctx))[0])
        return create_attack(self.opts.attack, ctx.model, seed=seed, **kw)

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        x, y = batch.x, batch.y
        with torch.no_grad():
            clean_logits = ctx.model(x)
        clean_ok = correct(clean_logits, y)
        dist = torch.zeros(len(y), device=x.device, dtype=torch.float64)
        idx = clean_ok.nonzero().squeeze(1)
        if idx.numel():
            atk = self.attack_for(ctx, chunk_seed(batch))
            with attack_memory(ctx.model, atk, ctx.num_classes):
                atk(x[idx], y[idx])
            dist[idx] = atk.last_distance.double()    # type: ignore[attr-defined]
        per_image = {str(i): _json(d) for i, d in zip(batch.ids.tolist(), dist.tolist())}
        return {"n": int(y.numel()), "clean": int(clean_ok.sum()), "nonfinite": nonfinite_rows(clean_logits).sum(),
                "per_image": per_image}

    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        """The attack and each of its options as it applied (FMN's ε plays no part and is left out)."""
        atk = self.attack_for(ctx, 0)
        skip = ("seed", "targeted", "norm") + (("eps",) if atk.name == "fmn" else ())
        return {"attack": atk.name, "norm": atk.norm, **{k: v for k, v in atk.settings().items()
                                                         if k not in skip and isinstance(v, (bool, int, float, str))}}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats.get("all", {})
        n = s.get("n", 0)
        rows = sorted((int(k), math.inf if v is None else float(v)) for k, v in (s.get("per_image") or {}).items())
        distances = [d for _, d in rows]
        attacked = [d for d in distances if d > 0]                  # the correctly classified images
        quantiles = {f"{q:g}": _json(quantile(attacked, q)) for q in QUANTILES}
        return {**self.settings(ctx), "curve": accuracy_curve(distances, n),
                "quantiles": quantiles, "median_distance": quantiles["0.5"],
                "clean_accuracy": s.get("clean", 0) / max(n, 1), "num_images": n,
                "num_not_found": sum(math.isinf(d) for d in attacked),
                "per_image": [{"idx": i, "distance": _json(d)} for i, d in rows],
                **nonfinite_result(self.key, s.get("nonfinite", 0))}
