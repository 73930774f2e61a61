"""The metrics of model-vs-human (Geirhos et al., "Partial success in closing the gap between human and machine
vision", NeurIPS 2021, arXiv:2106.07411), as ``modelvshuman/plotting/analyses.py`` and ``plot.py`` compute them.

A *trial* is one decision on one image (:class:`Trial`). Per data set, condition and (decision maker, human
observer) pair: **OOD accuracy** (the share of correct trials); **accuracy difference** (accuracy₁ − accuracy₂)²
(``SixteenClassAccuracyDifference``); **observed consistency** (the share of images both decided correctly or
both wrongly); **error consistency** (Geirhos, Meding & Wichmann 2020, arXiv:2006.16736): Cohen's κ =
(c_obs − c_exp) / (1 − c_exp) with c_exp = p₁p₂ + (1 − p₁)(1 − p₂); 1 when c_obs = 1. The benchmark numbers
average over the conditions not in the reference's ``EXCLUDE_CONDITIONS``, then over the human observers, then
over the data sets (``format_benchmark_df``).

>>> error_consistency([True, True, False, False], [True, False, False, True])["error_consistency"]
0.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from robustvit.errors import RobustvitError

#: Conditions model-vs-human leaves out of its benchmark: not out of distribution (e.g. 100 % contrast) or mean
#: human accuracy below 0.2 (``plot.py``'s ``EXCLUDE_CONDITIONS``).
EXCLUDED_CONDITIONS: Mapping[str, tuple[str, ...]] = {
    "colour": ("cr",),
    "contrast": ("c100", "c03", "c01"),
    "high-pass": ("inf", "0.55", "0.45", "0.4"),
    "low-pass": ("0", "15", "40"),
    "phase-scrambling": ("0", "150", "180"),
    "power-equalisation": ("0",),
    "false-colour": ("True",),
    "rotation": ("0",),
    "eidolonI": ("1-10-10", "64-10-10", "128-10-10"),
    "eidolonII": ("1-3-10", "32-3-10", "64-3-10", "128-3-10"),
    "eidolonIII": ("1-0-10", "16-0-10", "32-0-10", "64-0-10", "128-0-10"),
    "uniform-noise": ("0.0", "0.6", "0.9"),
}


@dataclass(frozen=True)
class Trial:
    """One decision: ``subject`` (a human observer or a model), ``condition``, ``image`` (the image id shared
    by every observer), the true ``category`` and the ``response``."""

    subject: str
    condition: str
    image: str
    category: str
    response: str

    @property
    def correct(self) -> bool:
        return self.response == self.category


def short_image_name(name: str) -> str:
    """The image id of a model-vs-human file name, without its trial-specific prefix (``get_short_imagename``):
    ``0001_cop_s01_c30_knife_10_n03041632_7380.png`` → ``n03041632_7380.png``."""
    parts = name.split("_")
    if len(parts) == 1:
        return parts[0]
    a, b = parts[-2:]
    return f"{a}_{b}" if a.startswith("n0") else b


def accuracy(trials: Sequence[Trial]) -> float:
    """The share of correct trials."""
    if not trials:
        raise RobustvitError("no trials to score")
    return sum(t.correct for t in trials) / len(trials)


def error_consistency(correct_1: Sequence[bool], correct_2: Sequence[bool]) -> dict[str, float]:
    """Expected, observed and error consistency (Cohen's κ) of two observers' correctness on the same images."""
    if len(correct_1) != len(correct_2) or not correct_1:
        raise RobustvitError("error consistency needs the same, non-empty list of images for both observers")
    n = len(correct_1)
    p1, p2 = sum(map(bool, correct_1)) / n, sum(map(bool, correct_2)) / n
    expected = p1 * p2 + (1 - p1) * (1 - p2)
    observed = sum(bool(a) == bool(b) for a, b in zip(correct_1, correct_2)) / n
    kappa = 1.0 if observed == 1.0 else (observed - expected) / (1.0 - expected)
    return {"expected_consistency": expected, "observed_consistency": observed, "error_consistency": kappa}


def pair_metrics(model: Sequence[Trial], human: Sequence[Trial]) -> dict[str, float]:
    """Accuracy difference, observed and error consistency of two observers on one condition, trials paired by
    image id (both must hold the same images)."""
    by_image = {t.image: t for t in model}
    if len(by_image) != len(model) or {t.image for t in human} != set(by_image) or len(human) != len(model):
        raise RobustvitError(f"observers {model[0].subject if model else '?'} and {human[0].subject if human else '?'} "
                             "did not see the same images in this condition")
    ordered = sorted(human, key=lambda t: t.image)
    c1, c2 = [by_image[t.image].correct for t in ordered], [t.correct for t in ordered]
    out = error_consistency(c1, c2)
    out["accuracy_difference"] = (sum(c1) / len(c1) - sum(c2) / len(c2)) ** 2
    return out


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def _by(trials: Iterable[Trial], *keys: str) -> dict[tuple, list[Trial]]:
    out: dict[tuple, list[Trial]] = {}
    for t in trials:
        out.setdefault(tuple(getattr(t, k) for k in keys), []).append(t)
    return out


HUMAN_METRICS = ("accuracy_difference", "observed_consistency", "error_consistency")


def compare_with_humans(dataset: str, model: Sequence[Trial], humans: Sequence[Trial],
                        conditions: Sequence[str] | None = None) -> dict[str, object]:
    """A model's trials against the human observers' on one data set.

    Returns ``conditions`` ({condition: model ``accuracy``, ``human_accuracy`` (mean over observers) and the
    three pair metrics averaged over the observers}) and the data set's benchmark numbers (``ood_accuracy`` and
    the pair metrics averaged over the benchmark's conditions, i.e. those not in :data:`EXCLUDED_CONDITIONS`).
    ``conditions``: the order to report (default: the humans' conditions, sorted)."""
    me = {t.subject for t in model}
    human_cells = _by((t for t in humans if t.subject not in me), "condition", "subject")   # never oneself
    model_cells = _by(model, "condition")
    conds = list(conditions) if conditions is not None else sorted({c for c, _ in human_cells})
    per: dict[str, dict[str, float]] = {}
    for c in conds:
        subjects = sorted(s for cc, s in human_cells if cc == c)
        m = model_cells.get((c,), [])
        if not subjects or not m:
            continue
        pairs = [pair_metrics(m, human_cells[(c, s)]) for s in subjects]
        per[c] = {"accuracy": accuracy(m), "human_accuracy": _mean(accuracy(human_cells[(c, s)]) for s in subjects),
                  **{k: _mean(p[k] for p in pairs) for k in HUMAN_METRICS}, "num_images": len(m),
                  "num_observers": len(subjects)}
    if not per:
        raise RobustvitError(f"{dataset}: the model and the human observers share no condition")
    bench = [c for c in per if c not in EXCLUDED_CONDITIONS.get(dataset, ())]
    # mean over conditions per observer, then over observers: equal to the mean over conditions of the means
    # over observers when every observer saw every condition (model-vs-human's data)
    return {"conditions": per, "benchmark_conditions": bench, "ood_accuracy": _mean(per[c]["accuracy"] for c in bench),
            **{k: _mean(per[c][k] for c in bench) for k in HUMAN_METRICS}}


def benchmark_summary(per_dataset: Mapping[str, Mapping[str, object]]) -> dict[str, float]:
    """The means over data sets of ``ood_accuracy`` and the pair metrics (``format_benchmark_df``'s last step)."""
    keys = ("ood_accuracy",) + HUMAN_METRICS
    return {k: _mean(float(v[k]) for v in per_dataset.values() if k in v)   # type: ignore[arg-type]
            for k in keys if any(k in v for v in per_dataset.values())}
