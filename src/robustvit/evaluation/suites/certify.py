"""Suites ``certify`` (randomized smoothing, L2) and ``certify_patch`` (derandomized smoothing against patches).

``certify:sigma=0.25:n0=100:n=100000:alpha=0.001`` — Cohen, Rosenfeld & Kolter (ICML 2019, arXiv:1902.02918):
CERTIFY per image (:func:`robustvit.certify.certify`); ``certified_accuracy`` {radius: fraction correct with a
certified L2 radius (pixel units) at least that}, ``abstain_rate``, ``per_image`` and the table that
locuslab/smoothing's ``certify.py`` writes (``table``). ``predict=N`` also runs PREDICT with N draws.

``certify_patch:ablation=column:size=19:patch=32`` — Levine & Feizi (NeurIPS 2020, arXiv:2002.10733) with the
ViT token dropping of Salman et al. (CVPR 2022, arXiv:2110.07719): the base classifier on every ablation position,
``certified_accuracy`` {patch side: fraction certified and correct}. Sizes are pixels of the evaluated image, or of
an image of side ``reference`` scaled to it. Result keys: docs/certified.md.
"""

from __future__ import annotations

import datetime
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from robustvit.certify.ablation import ABLATIONS, Ablation, AblatedModel, ablation_counts, patch_certificate
from robustvit.certify.smoothing import ABSTAIN, certify, predict
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.options import option
from robustvit.runs.atomic import write_text

#: Radii of ``certified_accuracy`` (Cohen et al.'s CIFAR-10 table: 0 to 1 in steps of 0.25, their plots go further).
DEFAULT_RADII = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)
#: Cohen et al.'s published setting (the protocol the comparability labels compare against).
COHEN_PROTOCOL = {"n0": 100, "n": 100_000, "alpha": 0.001}


@register_suite
class Certify(Suite):
    name = "certify"
    description = "randomized smoothing (Cohen et al. 2019): certified L2 accuracy against radius"
    smoke: ClassVar[dict[str, Any]] = {"n0": 4, "n": 16, "batch": 64}
    demo_skip = ("certifies a model trained with Gaussian noise (train --loss gaussian_noise); "
                 "run `robustvit eval --suite certify` on one (docs/certified.md)")

    @dataclass
    class Options(SuiteOptions):
        sigma: float = option(0.25, min=1e-6, help="noise standard deviation in pixel units ([0, 1] images)")
        n0: int = option(100, min=1, help="noise draws that select the top class")
        n: int = option(100_000, min=1, help="noise draws that estimate its probability")
        alpha: float = option(0.001, min=1e-12, max=0.5, help="failure probability of the certificate")
        batch: int = option(400, min=1, help="noisy images per forward")
        radii: list[float] = option(default_factory=lambda: list(DEFAULT_RADII), min=0,
                                    help="radii of certified_accuracy, joined by +")
        predict: int = option(0, min=0, help="also run PREDICT with this many draws (0: skip)")

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        o = self.opts
        t0 = time.perf_counter()
        cert = certify(ctx.model, batch.x, sigma=o.sigma, n0=o.n0, n=o.n, alpha=o.alpha, num_classes=ctx.num_classes,
                       batch=o.batch, generator=batch.generator)
        seconds = (time.perf_counter() - t0) / max(len(batch.y), 1)
        y = batch.y.cpu().numpy()
        correct = cert.predict == y
        out: dict[str, Any] = {
            "n": int(len(y)), "abstain": int((cert.predict == ABSTAIN).sum()),
            "certified": [int((correct & (cert.radius >= r)).sum()) for r in o.radii],
            "per_image": {str(int(i)): [int(lab), int(p), float(rad), int(c), round(seconds, 4)]
                          for i, lab, p, rad, c in zip(batch.ids.tolist(), y, cert.predict, cert.radius, correct)}}
        if o.predict:
            pred = predict(ctx.model, batch.x, sigma=o.sigma, n=o.predict, alpha=o.alpha, num_classes=ctx.num_classes,
                           batch=o.batch, generator=batch.generator)
            out["predict_correct"] = int((pred == y).sum())
            out["predict_abstain"] = int((pred == ABSTAIN).sum())
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        o, s = self.opts, stats["all"]
        n = max(s["n"], 1)
        rows = sorted(((int(k), *v) for k, v in s["per_image"].items()), key=lambda r: r[0])
        res: dict[str, Any] = {
            "certified_accuracy": {f"{r:g}": c / n for r, c in zip(o.radii, s["certified"])},
            "abstain_rate": s["abstain"] / n, "num_images": s["n"],
            "settings": {"sigma": o.sigma, "n0": o.n0, "n": o.n, "alpha": o.alpha, "batch": o.batch,
                         "noise": "Gaussian in pixel units, added before the model's normalisation, not clipped"},
            "per_image": [{"idx": i, "label": lab, "predict": p, "radius": rad, "correct": c}
                          for i, lab, p, rad, c, _ in rows]}
        if o.predict:
            res["predict"] = {"n": o.predict, "accuracy": s["predict_correct"] / n, "abstain_rate": s["predict_abstain"] / n}
        if ctx.out_dir is not None:
            path = Path(ctx.out_dir) / "certify" / (re.sub(r"[^A-Za-z0-9_.=+-]+", "_", self.key) + ".tsv")
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, locuslab_table(rows))
            res["table"] = str(path.relative_to(ctx.out_dir))
        return res


def locuslab_table(rows: list[tuple]) -> str:
    """locuslab/smoothing ``certify.py``'s output: ``idx label predict radius correct time`` tab-separated, radius
    as ``{:.3}``, time as ``datetime.timedelta``."""
    lines = ["idx\tlabel\tpredict\tradius\tcorrect\ttime"]
    lines += [f"{i}\t{lab}\t{p}\t{rad:.3}\t{c}\t{datetime.timedelta(seconds=t)}" for i, lab, p, rad, c, t in rows]
    return "\n".join(lines) + "\n"


@register_suite
class CertifyPatch(Suite):
    name = "certify_patch"
    description = "derandomized smoothing (Levine & Feizi 2020; smoothed ViTs, Salman et al. 2022): certified patches"
    smoke: ClassVar[dict[str, Any]] = {"size": 4, "patch": [2], "stride": 8}
    demo_skip = ("certifies a model trained with ablations (train --loss ablation); "
                 "run `robustvit eval --suite certify_patch` on one (docs/certified.md)")

    @dataclass
    class Options(SuiteOptions):
        ablation: Literal[ABLATIONS] = option("column", help="column (full-height band) or block (square)")
        size: int = option(19, min=1, help="retained band width in pixels")
        patch: list[int] = option(default_factory=lambda: [32], min=1, help="adversarial patch sides in pixels, "
                                                                            "joined by +")
        reference: int | None = option(None, min=1, help="sizes are pixels of an image of this side, scaled to the "
                                                         "evaluated image (default: pixels of the evaluated image)")
        tokens: Literal["auto", "drop", "zero_fill"] = option("auto", help="drop the ablated ViT tokens (Salman et "
                                                                        "al.; auto: where it applies) or zero-fill")
        stride: int = option(1, min=1, help="pixels between band positions (1: every position; Δ = ⌈(m + s − 1) / "
                                            "stride⌉ per axis)")
        encoding: Literal["auto", "rgb", "levine_feizi"] = option("auto", help="rgb (3 channels, ablated pixels 0) or "
                                                      "levine_feizi (6 channels: x and 1 − x, 0 where ablated; the "
                                                      "network must take 6); auto: what the network takes")
        threshold: float | None = option(None, min=0, max=1, help="vote for every class whose softmax is at least "
                                         "this (Levine & Feizi's θ; none: each position votes for its argmax)")
        batch: int = option(256, min=1, help="ablated images per forward")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._ablated: dict[int, AblatedModel] = {}

    def ablated(self, ctx: EvalContext) -> AblatedModel:
        key = id(ctx.model)
        if key not in self._ablated:
            self._ablated[key] = AblatedModel(ctx.model, self.opts.tokens, self.opts.encoding)
            if self._ablated[key].note:
                warnings.warn(f"suite {self.key}: {self._ablated[key].note}", stacklevel=2)
        return self._ablated[key]

    def pixels(self, value: int, side: int) -> int:
        ref = self.opts.reference
        return value if ref is None else max(1, round(value * side / ref))

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        h, w = batch.x.shape[-2:]
        band = Ablation(self.opts.ablation, self.pixels(self.opts.size, w), self.opts.stride)
        counts = ablation_counts(self.ablated(ctx), batch.x, band, ctx.num_classes, self.opts.batch,
                                 self.opts.threshold)
        out: dict[str, Any] = {"n": int(len(batch.y)), "votes_true": counts.gather(1, batch.y[:, None]).sum(),
                               "certified": []}
        for m in self.opts.patch:
            pred, cert = patch_certificate(counts, band.delta(self.pixels(m, w), h, w))
            out["certified"].append((cert & (pred == batch.y)).sum())
        out["correct"] = (counts.argmax(1) == batch.y).sum()
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats["all"]
        n = max(s["n"], 1)
        side = int(ctx.image_size or 0)
        ablated = self.ablated(ctx)
        band = Ablation(self.opts.ablation, self.pixels(self.opts.size, side or 1), self.opts.stride)
        positions = len(band.positions(side, side)) if side else None
        res: dict[str, Any] = {
            "certified_accuracy": {str(m): c / n for m, c in zip(self.opts.patch, s["certified"])},
            "clean_accuracy": s["correct"] / n,
            "ablated_accuracy": (s["votes_true"] / (n * positions) if positions and self.opts.threshold is None
                                 else None),                                # θ votes are not the base's accuracy
            "num_images": s["n"], "tokens": ablated.mode, "encoding": ablated.encoding,
            "settings": {"ablation": self.opts.ablation, "size": self.opts.size, "patch": list(self.opts.patch),
                         "reference": self.opts.reference, "stride": self.opts.stride, "positions": positions,
                         "threshold": self.opts.threshold,
                         "size_pixels": self.pixels(self.opts.size, side) if side else None,
                         "patch_pixels": [self.pixels(m, side) for m in self.opts.patch] if side else None,
                         "delta": [band.delta(self.pixels(m, side), side, side) for m in self.opts.patch] if side else None,
                         "votes": ("argmax" if self.opts.threshold is None
                                   else f"every class with softmax >= {self.opts.threshold:g}"),
                         "rule": "top count − runner-up > 2Δ; Δ = ⌈(m + s − 1) / stride⌉ (column), its square (block)"}}
        if ablated.note:
            res["tokens_note"] = ablated.note
        return res
