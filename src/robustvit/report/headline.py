"""The headline numbers of a run: what the scorecard and the leaderboard show.

One row per model × data × threat model. A threat model is an attack norm and budget (``linf``, ε = 4/255)
found in the run's attack suites; the clean and natural-shift columns repeat on each of a model's rows. A
run without attack suites has one row with threat model ``none``.

Columns (top-1 accuracy in [0, 1] unless stated): ``clean``, ``corruption_mean`` (mean over the benchmark
corruptions and severities, Hendrycks & Dietterich, arXiv:1903.12261), ``mce`` (AlexNet-normalised, %, lower is
better), ``pgd``, ``autoattack`` (robust accuracy at the row's threat model), ``occlusion`` (mean over the ρ
values measured, AFAT), ``shape_bias`` (Geirhos et al., arXiv:1811.12231), ``spatial`` (worst-of-grid,
Engstrom et al.), ``imagenet_r``/``imagenet_a``/``imagenet_sketch``/``imagenet_v2``, ``mfr`` (mean flip rate,
%, lower is better), and ``labels``: why a number is not comparable with published tables.
"""

from __future__ import annotations

import math
from typing import Any

#: Column name → (header text, True when lower is better).
COLUMNS: dict[str, tuple[str, bool]] = {
    "clean": ("clean", False),
    "corruption_mean": ("corruption mean", False),
    "mce": ("mCE (%)", True),
    "pgd": ("PGD", False),
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
THREAT_SUITES = ("pgd", "autoattack", "apgd", "fgsm")


def base_name(key: str) -> str:
    """The suite name of a results key (``pgd:eps=4/255`` → ``pgd``; old hyphenated names → snake_case)."""
    return key.split(":", 1)[0].replace("-", "_")


def eps_text(eps: float | None) -> str:
    """4/255-style text for a budget in pixel units ([0, 1]); plain decimals when not a whole grey level."""
    if eps is None:
        return "–"
    grey = eps * 255
    return f"{round(grey)}/255" if abs(grey - round(grey)) < 1e-4 else f"{eps:.4g}"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _first(suites: dict[str, Any], name: str, field: str) -> float | None:
    for key, s in suites.items():
        if base_name(key) == name and isinstance(s, dict) and _num(s.get(field)) is not None:
            return _num(s[field])
    return None


def _certified(suites: dict[str, Any], name: str, at: str | None) -> float | None:
    """``certified_accuracy`` of the first ``name`` suite at key ``at`` (None: its first key)."""
    for key, s in suites.items():
        acc = s.get("certified_accuracy") if base_name(key) == name and isinstance(s, dict) else None
        if isinstance(acc, dict) and acc:
            return _num(acc.get(at if at is not None else next(iter(acc))))
    return None


def _occlusion(suites: dict[str, Any]) -> float | None:
    for key, s in suites.items():
        if base_name(key) == "patch_occlusion" and isinstance(s, dict) and s.get("per_rho"):
            vals = [_num(e.get("mean")) for e in s["per_rho"].values() if isinstance(e, dict)]
            vals = [v for v in vals if v is not None]
            if vals:
                return sum(vals) / len(vals)
    return None


def threat_models(suites: dict[str, Any]) -> list[tuple[str, float]]:
    """The (norm, ε) budgets of the run's attack suites, strongest L∞ first."""
    found: set[tuple[str, float]] = set()
    for key, s in suites.items():
        if base_name(key) in THREAT_SUITES and isinstance(s, dict) and _num(s.get("eps")) is not None:
            found.add((str(s.get("norm") or "linf"), round(float(s["eps"]), 8)))
    return sorted(found, key=lambda t: (t[0] != "linf", -t[1]))


def _attack_accuracy(suites: dict[str, Any], names: tuple[str, ...], norm: str, eps: float) -> float | None:
    """Robust accuracy of the strongest matching suite (lowest accuracy; most steps break ties)."""
    vals = [_num(s.get("accuracy")) for key, s in suites.items()
            if base_name(key) in names and isinstance(s, dict) and _num(s.get("eps")) is not None
            and str(s.get("norm") or "linf") == norm and abs(float(s["eps"]) - eps) < 1e-6]
    vals = [v for v in vals if v is not None]
    return min(vals) if vals else None


def labels(run: dict[str, Any]) -> list[str]:
    """Short comparability labels: why the run's numbers are not the published protocol's, and the precision of
    suites not computed in fp32 (``bf16``, ``tf32``)."""
    out: list[str] = []
    model = run.get("model") or {}
    if (model.get("weights") or {}).get("source") == "random":
        out.append("random weights")
    data = run.get("data") or {}
    sub = data.get("subset") or {}
    if isinstance(sub, dict) and sub.get("of") and sub.get("num_images") and sub["num_images"] < sub["of"]:
        out.append(f"subset {sub['num_images']}/{sub['of']}")
    suites = run.get("suites") or {}
    if any(isinstance(s, dict) and s.get("subset") for s in suites.values()) and not any(o.startswith("subset") for o in out):
        out.append("suite subsets")
    if any(isinstance(s, dict) and (s.get("reduced") or s.get("reduced_grid")) for s in suites.values()):
        out.append("reduced attack")
    if any(base_name(k) == "certify" and isinstance(s, dict) and (s.get("settings") or {}).get("n", 100_000) < 100_000
           for k, s in suites.items()):
        out.append("reduced certification")     # Cohen et al. certify with n = 100,000
    if any(isinstance(s, dict) and (s.get("mce_protocol") == "approximate" or s.get("protocol") == "approximate")
           for s in suites.values()):
        out.append("approximate protocol")
    if any(isinstance(s, dict) and any(f.get("flag") for f in (s.get("flags") or {}).values() if isinstance(f, dict))
           for s in suites.values()):
        out.append("gradient-masking flag")
    if not out and run.get("comparable") is False:
        out.append("not comparable")
    low = sorted({str(s["precision"]) for s in suites.values()
                  if isinstance(s, dict) and s.get("precision") not in (None, "fp32")})
    if low:             # how the numbers were computed (``--precision``); attacks re-check robust points in fp32
        out.append(" + ".join(low))
    return out


def rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaderboard rows of one run (or model entry): identity columns, ``COLUMNS`` and ``labels``."""
    suites = run.get("suites") or {}
    model = run.get("model") or {}
    base: dict[str, Any] = {
        "model": model.get("name"), "data": (run.get("data") or {}).get("spec"),
        "params": model.get("params"), "flops": model.get("flops"),
        "clean": _first(suites, "clean", "top1"),
        "corruption_mean": _first(suites, "corruptions", "mean_accuracy"),
        "mce": _first(suites, "corruptions", "mce"),
        "occlusion": _occlusion(suites),
        "shape_bias": _first(suites, "shape_bias", "shape_bias"),
        "spatial": _first(suites, "spatial", "accuracy"),
        **{n: _first(suites, n, "top1") for n in ("imagenet_r", "imagenet_a", "imagenet_sketch", "imagenet_v2")},
        "mfr": _first(suites, "perturbations", "mfr"),
        "certified_l2": _certified(suites, "certify", "0.5"), "certified_patch": _certified(suites, "certify_patch", None),
        "labels": "; ".join(labels(run)) or "comparable",
        "comparable": bool(run.get("comparable")),
    }
    if base["clean"] is None:   # an attack suite's clean accuracy on its own images
        base["clean"] = _first(suites, "pgd", "clean_accuracy") or _first(suites, "autoattack", "clean_accuracy")
    threats = threat_models(suites)
    if not threats:
        return [{**base, "threat_model": "none", "eps": None, "pgd": None, "autoattack": None}]
    return [{**base, "threat_model": norm.capitalize() if norm == "l2" else "Linf", "eps": eps,
             "pgd": _attack_accuracy(suites, ("pgd",), norm, eps),
             "autoattack": _attack_accuracy(suites, ("autoattack", "apgd"), norm, eps)} for norm, eps in threats]


def scorecard_row(run: dict[str, Any]) -> dict[str, Any]:
    """One row per model: the strongest threat model that has an AutoAttack or PGD number (else the first)."""
    rs = rows(run)
    return next((r for r in rs if r["autoattack"] is not None or r["pgd"] is not None), rs[0])
