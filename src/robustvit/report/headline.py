"""The headline numbers of a run: what the scorecard, the leaderboard and the exports show.

One row per model × data × threat model (an attack norm and budget found in the run's attack suites, e.g.
``linf`` 4/255; ``none`` without attack suites); the clean and natural-shift columns repeat on each row.

Columns (``COLUMNS``; top-1 accuracy in [0, 1] unless stated): ``clean``, ``corruption_mean`` (benchmark
corruptions and severities evaluated, Hendrycks & Dietterich, arXiv:1903.12261), ``mce`` (AlexNet-normalised,
%, lower is better), ``corruption_mean_3d`` / ``mce_3d`` (ImageNet-3DCC, Kar et al., arXiv:2203.01441),
``pgd``, ``apgd``, ``autoattack`` (robust accuracy at the row's threat model), ``occlusion`` (mean over ρ, AFAT),
``shape_bias`` (Geirhos et al., arXiv:1811.12231), ``spatial`` (worst-of-grid, Engstrom et al.), the ImageNet
shifts, ``mfr`` (mean flip rate, %, lower is better) and the certified accuracies.

Each number has its cell facts: ``<column>_n`` (images), ``<column>_ci95`` (95 % Wilson score interval, for
accuracies), ``<column>_images`` (:func:`images_id`), ``<column>_protocol`` (:mod:`robustvit.protocols`) and,
for ``GAP_COLUMNS``, ``<column>_gap``: the value minus the clean accuracy of the same images (the suite's own
``clean_accuracy``, else the ``clean`` column), a fraction (−0.381: 38.1 points below clean). ``labels`` joins
the deviations of the row's cells; ``comparable`` holds when every cell of the row is comparable.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from robustvit.protocols import THREAT_MODELS, attach, base_name, eps_text as _eps_text, wilson_interval

#: Column name → (header text, True when lower is better).
COLUMNS: dict[str, tuple[str, bool]] = {
    "clean": ("clean", False),
    "corruption_mean": ("corruption mean", False),
    "mce": ("mCE (%)", True),
    "corruption_mean_3d": ("3DCC mean", False),
    "mce_3d": ("3DCC mCE (%)", True),
    "pgd": ("PGD", False),
    "apgd": ("APGD", False),
    "autoattack": ("AutoAttack", False),
    "occlusion": ("occlusion", False),
    "shape_bias": ("shape bias", False),
    "spatial": ("spatial", False),
    "imagenet_r": ("ImageNet-R", False),
    "imagenet_a": ("ImageNet-A", False),
    "imagenet_sketch": ("ImageNet-Sketch", False),
    "imagenet_v2": ("ImageNet-V2", False),
    "mfr": ("mFR (%)", True),
    "certified_l2": ("certified L2 r=0.5", False),
    "certified_patch": ("certified patch", False),
}
ID_COLUMNS = ("model", "data", "threat_model", "eps")
ATTACK_COLUMNS = ("pgd", "apgd", "autoattack")
THREAT_SUITES = ("pgd", "autoattack", "apgd", "fgsm")
#: Columns in percent already (no interval: not a proportion of images).
PERCENT_COLUMNS = ("mce", "mce_3d", "mfr")
#: Column → (suite, field) of the number, for the columns read from one suite field.
SOURCES: dict[str, tuple[str, str]] = {
    "clean": ("clean", "top1"), "corruption_mean": ("corruptions", "mean_accuracy"), "mce": ("corruptions", "mce"),
    "corruption_mean_3d": ("corruptions", "corruptions_acc_3d"), "mce_3d": ("corruptions", "corruptions_mce_3d"),
    "shape_bias": ("shape_bias", "shape_bias"), "spatial": ("spatial", "accuracy"), "mfr": ("perturbations", "mfr"),
    **{n: (n, "top1") for n in ("imagenet_r", "imagenet_a", "imagenet_sketch", "imagenet_v2")},
}
#: Columns without a binomial interval (not a fraction of images classified correctly).
NO_INTERVAL = ("mce", "mce_3d", "mfr", "shape_bias")
#: Robustness accuracies shown with their gap to clean (``<column>_gap``): every accuracy column but ``clean``.
GAP_COLUMNS = tuple(c for c in COLUMNS if c != "clean" and c not in NO_INTERVAL)


def eps_text(eps: float | None, threat: str = "Linf") -> str:
    """ε as text: 4/255 for L∞ budgets that are whole grey levels, a decimal for L2 and L1 (``0.5``, ``12.0``)."""
    return _eps_text(eps, THREAT_MODELS.get(threat.lower(), "Linf"))


def _num(v: Any) -> float | None:
    """``v`` as a float when it is a finite number (not a bool), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _count(s: dict[str, Any]) -> int | None:
    n = _num(s.get("num_images", s.get("n")))
    return int(n) if n else None


#: A cell: value, images, protocol entry and (optionally) the clean accuracy of the same images and the suite's own
#: sample of the run's data (results.json's suite ``subset``; None: the run's images).
Cell = tuple[Any, ...]


def _cell(value: float | None, s: dict[str, Any]) -> Cell:
    return value, _count(s), s.get("protocol"), _num(s.get("clean_accuracy")), s.get("subset")


def images_id(run: dict[str, Any], own: Any, n: int | None) -> str:
    """A short digest of the images a number was measured on (the run's data spec, the suite's own sample else the
    run's, and the count): equal digests, the same images."""
    data = run.get("data") or {}
    key = json.dumps([data.get("spec"), own if own is not None else data.get("subset"), n], sort_keys=True,
                     default=str)
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def _named(suites: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The results of the suites called ``name`` (whatever their options), in order."""
    return [s for key, s in suites.items() if base_name(key) == name and isinstance(s, dict)]


def _first(suites: dict[str, Any], name: str, field: str) -> Cell:
    """The cell of ``field`` in the first ``name`` suite that records it as a number."""
    for s in _named(suites, name):
        if _num(s.get(field)) is not None:
            return _cell(_num(s[field]), s)
    return None, None, None


def _certified(suites: dict[str, Any], name: str, at: str | None) -> Cell:
    """``certified_accuracy`` of the first ``name`` suite at key ``at`` (None: its first key)."""
    for s in _named(suites, name):
        acc = s.get("certified_accuracy")
        if isinstance(acc, dict) and acc:
            return _cell(_num(acc.get(at if at is not None else next(iter(acc)))), s)
    return None, None, None


def _occlusion(suites: dict[str, Any]) -> Cell:
    """The mean occlusion accuracy over ρ of the first ``patch_occlusion`` suite."""
    for s in _named(suites, "patch_occlusion"):
        if s.get("per_rho"):
            vals = [_num(e.get("mean")) for e in s["per_rho"].values() if isinstance(e, dict)]
            vals = [v for v in vals if v is not None]
            if vals:
                return _cell(sum(vals) / len(vals), s)
    return None, None, None


def threat_models(suites: dict[str, Any]) -> list[tuple[str, float]]:
    """The (norm, ε) budgets of the run's attack suites, strongest L∞ first."""
    found = {(str(s.get("norm") or "linf"), round(float(s["eps"]), 8)) for key, s in suites.items()
             if base_name(key) in THREAT_SUITES and isinstance(s, dict) and _num(s.get("eps")) is not None}
    return sorted(found, key=lambda t: (t[0] != "linf", -t[1]))


def _attack(suites: dict[str, Any], name: str, norm: str, eps: float) -> Cell:
    """The strongest matching suite of ``name`` (lowest robust accuracy)."""
    found = [_cell(_num(s.get("accuracy")), s) for s in _named(suites, name)
             if _num(s.get("eps")) is not None and str(s.get("norm") or "linf") == norm
             and abs(float(s["eps"]) - eps) < 1e-6]
    found = [c for c in found if c[0] is not None]
    return min(found, key=lambda c: c[0]) if found else (None, None, None)   # type: ignore[arg-type,return-value]


def _put(row: dict[str, Any], col: str, cell: Cell, run: dict[str, Any]) -> None:
    v, n, proto, *same = cell
    row[col], row[f"{col}_n"], row[f"{col}_protocol"] = v, n, proto
    row[f"{col}_images"] = None if v is None else images_id(run, same[1] if len(same) > 1 else None, n)
    ci = None if col in NO_INTERVAL else wilson_interval(v, n)
    row[f"{col}_ci95"] = None if ci is None else [round(ci[0], 6), round(ci[1], 6)]
    if col in GAP_COLUMNS:          # the clean accuracy of the same images; filled from ``clean`` by ``_gaps``
        row[f"{col}_gap"] = None if v is None or not same or same[0] is None else round(v - same[0], 6)


def _gaps(row: dict[str, Any]) -> None:
    """``<column>_gap`` from the ``clean`` column where the suite recorded no clean accuracy of its own."""
    for c in GAP_COLUMNS:
        if row.get(c) is not None and row.get(f"{c}_gap") is None and row.get("clean") is not None:
            row[f"{c}_gap"] = round(row[c] - row["clean"], 6)


def _labels(row: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The deviations of the row's cells (those every cell shares once, the others as ``column: …``), attacks on
    different images, and the precision of suites not computed in fp32."""
    per = {c: list((row.get(f"{c}_protocol") or {}).get("deviations") or []) for c in COLUMNS if row.get(c) is not None}
    where: dict[str, list[str]] = {}
    for c, devs in per.items():
        for d in devs:
            where.setdefault(d, []).append(COLUMNS[c][0])
    out = [d if len(cols) == len(per) else f"{', '.join(cols)}: {d}" for d, cols in where.items()]
    shown = [c for c in ATTACK_COLUMNS if row.get(c) is not None and row.get(f"{c}_n")]
    if len({row.get(f"{c}_images") for c in shown}) > 1:
        out.append("attacks on different images: " + ", ".join(f"{COLUMNS[c][0]} n={row[f'{c}_n']}" for c in shown))
    low = sorted({str(s["precision"]) for s in (run.get("suites") or {}).values()
                  if isinstance(s, dict) and s.get("precision") not in (None, "fp32")})
    if low:             # how the numbers were computed (``--precision``); attacks re-check robust points in fp32
        out.append(" + ".join(low))
    return out


def protocol_notes(key: str, results: list[dict[str, Any]]) -> list[str]:
    """One line per model for a suite section: the protocol of its ``key`` result and its deviations."""
    out = []
    for r in results:
        p = ((r.get("suites") or {}).get(key) or {}).get("protocol")
        if isinstance(p, dict):
            what = "comparable" if p.get("comparable") else "not comparable: " + "; ".join(p.get("deviations") or [])
            out.append(f"{(r.get('model') or {}).get('name')}: protocol {p.get('name')}, {what}.")
    return out


def labels(run: dict[str, Any]) -> list[str]:
    """The comparability labels of a run's scorecard row."""
    return scorecard_row(run)["labels_list"]


def rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaderboard rows of one run (or model entry): identity columns, ``COLUMNS`` with their cell facts,
    ``labels`` and ``comparable``."""
    attach(run)                                      # each number's protocol entry, where a result lacks one
    suites = run.get("suites") or {}
    model = run.get("model") or {}
    base: dict[str, Any] = {"model": model.get("name"), "data": (run.get("data") or {}).get("spec"),
                            "params": model.get("params"), "flops": model.get("flops"),
                            "num_classes": _num((model.get("spec") or {}).get("num_classes"))
                            or _num(((run.get("data") or {}).get("subset") or {}).get("num_classes"))}
    for col, (suite, fld) in SOURCES.items():
        _put(base, col, _first(suites, suite, fld), run)
    _put(base, "occlusion", _occlusion(suites), run)
    _put(base, "certified_l2", _certified(suites, "certify", "0.5"), run)
    _put(base, "certified_patch", _certified(suites, "certify_patch", None), run)
    if base["clean"] is None:   # an attack suite's clean accuracy on its own images
        for name in ("pgd", "autoattack", "apgd"):
            v, n, proto, *rest = _first(suites, name, "clean_accuracy")
            if v is not None:
                _put(base, "clean", (v, n, proto, None, rest[1]), run)
                break
    out = []
    for norm, eps in threat_models(suites) or [("none", None)]:
        row = {**base, "threat_model": "none" if eps is None else THREAT_MODELS.get(norm, "Linf"), "eps": eps}
        for col in ATTACK_COLUMNS:
            _put(row, col, (None, None, None) if eps is None else _attack(suites, col, norm, eps), run)
        _gaps(row)
        lab = _labels(row, run)
        shown = [row.get(f"{c}_protocol") for c in COLUMNS if row.get(c) is not None]
        row["comparable"] = (all(p is not None and p.get("comparable") for p in shown) if shown
                             else bool(run.get("comparable")))
        row["labels_list"], row["labels"] = lab, "; ".join(lab) or "comparable"
        out.append(row)
    return out


def scorecard_row(run: dict[str, Any]) -> dict[str, Any]:
    """One row per model: the strongest threat model that has an attack number (else the first)."""
    rs = rows(run)
    return next((r for r in rs if any(r[c] is not None for c in ATTACK_COLUMNS)), rs[0])
