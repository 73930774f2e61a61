"""Corruption metrics: CE, mCE and relative mCE (AlexNet-normalised), retention, mean accuracies.

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261), section 4; retention from Zhou et al., "Understanding the Robustness in Vision
Transformers" (FAN, arXiv:2204.12451); "w/o noise" from the AFAT paper. With E_{s,c}^f the top-1 **error** of
model f on corruption c at severity s:

* CE_c^f = Σ_s E_{s,c}^f / Σ_s E_{s,c}^AlexNet; relative CE_c^f = Σ_s (E_{s,c}^f − E_clean^f) /
  Σ_s (E_{s,c}^AlexNet − E_clean^AlexNet); mCE / relative mCE: their mean over the 15 benchmark corruptions
  (×100, in percent, like the papers); retention = corrupted accuracy / clean accuracy.

The AlexNet errors are those of the official evaluation code (hendrycks/robustness, ``ImageNet-C/test.py``;
clean error 0.43478 = 1 − 56.522 %), meaningful only for ImageNet-C-like data (1000 classes, 224 px).

>>> err = {s: 0.5 * ALEXNET_ERRORS["fog"][s - 1] for s in range(1, 6)}
>>> round(corruption_error(err, ALEXNET_ERRORS["fog"]), 6)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from robustvit.errors import RobustvitError, unknown_name

#: Top-1 error of AlexNet on clean ImageNet validation images.
ALEXNET_CLEAN_ERROR = 0.43478

#: Top-1 error of AlexNet on ImageNet-C, per corruption, severities 1 → 5 (all 19 corruptions).
ALEXNET_ERRORS: dict[str, tuple[float, float, float, float, float]] = {
    "gaussian_noise": (0.69528, 0.82542, 0.93554, 0.98138, 0.99452),
    "shot_noise": (0.71224, 0.85108, 0.93574, 0.98182, 0.99146),
    "impulse_noise": (0.78374, 0.89808, 0.94870, 0.98720, 0.99548),
    "defocus_blur": (0.65624, 0.73202, 0.85036, 0.91364, 0.94714),
    "glass_blur": (0.64308, 0.75054, 0.88806, 0.91622, 0.93344),
    "motion_blur": (0.58430, 0.70048, 0.82108, 0.89750, 0.92638),
    "zoom_blur": (0.70008, 0.76992, 0.80784, 0.84198, 0.87198),
    "snow": (0.71726, 0.88392, 0.86468, 0.91870, 0.94952),
    "frost": (0.61390, 0.79734, 0.88790, 0.89942, 0.93430),
    "fog": (0.67474, 0.76050, 0.84378, 0.87260, 0.94500),
    "brightness": (0.45140, 0.48502, 0.54048, 0.62166, 0.72440),
    "contrast": (0.64548, 0.76150, 0.88874, 0.97760, 0.99270),
    "elastic_transform": (0.52596, 0.70116, 0.55686, 0.64076, 0.80554),
    "pixelate": (0.52218, 0.54620, 0.73728, 0.87092, 0.91262),
    "jpeg_compression": (0.51002, 0.54718, 0.57294, 0.65458, 0.74778),
    "speckle_noise": (0.66192, 0.74440, 0.90246, 0.94548, 0.97268),
    "gaussian_blur": (0.54732, 0.70444, 0.82574, 0.89864, 0.95940),
    "spatter": (0.47196, 0.62194, 0.75052, 0.84132, 0.90182),
    "saturate": (0.59342, 0.65514, 0.51174, 0.70834, 0.82260),
}

#: Top-1 error of AlexNet on ImageNet-3DCC (Kar et al. 2022, arXiv:2203.01441), severities 1 → 5: RobustBench's
#: normaliser of ``corruptions_mce_3d`` (1 − the AlexNet row of ``model_info/imagenet/corruptions/
#: unaggregated_results_3d.csv``, measured on its 5,000-image list; AlexNet's ``corruptions_acc_3d`` = 28.47 %).
ALEXNET_ERRORS_3DCC: dict[str, tuple[float, float, float, float, float]] = {
    "near_focus": (0.5384, 0.5808, 0.6178, 0.6446, 0.6718),
    "far_focus": (0.5278, 0.6098, 0.6686, 0.7100, 0.7414),
    "bit_error": (0.5568, 0.6000, 0.6728, 0.7370, 0.8502),
    "color_quant": (0.4490, 0.4612, 0.4982, 0.6694, 0.9032),
    "flash": (0.7142, 0.7520, 0.7918, 0.8440, 0.9042),
    "fog_3d": (0.5626, 0.7192, 0.8148, 0.8672, 0.9040),
    "h265_abr": (0.5020, 0.5164, 0.5506, 0.6374, 0.6306),
    "h265_crf": (0.4972, 0.4988, 0.5114, 0.5504, 0.5682),
    "iso_noise": (0.8692, 0.8948, 0.9342, 0.9714, 0.9880),
    "low_light": (0.7168, 0.7636, 0.8126, 0.8754, 0.9440),
    "xy_motion_blur": (0.6972, 0.7910, 0.8470, 0.8844, 0.9046),
    "z_motion_blur": (0.7208, 0.7692, 0.8070, 0.8340, 0.8484),
}

#: Mean AlexNet error over severities (the constants of the official ``test.py``).
ALEXNET_MEAN_ERRORS: dict[str, float] = {k: sum(v) / 5 for k, v in ALEXNET_ERRORS.items()}

NOISE_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise")

ErrBySev = Mapping[int, float] | Mapping[str, float] | Sequence[float]


def _by_severity(errors: ErrBySev) -> dict[int, float]:
    """Normalise {1: e1, …} / {"1": e1, …} / [e1, …, e5] to {severity int: float}."""
    items = errors.items() if isinstance(errors, Mapping) else enumerate(errors, 1)
    out = {int(k): float(v) for k, v in items}
    bad = [s for s in out if not 1 <= s <= 5]
    if bad:
        raise RobustvitError(f"severities must be 1-5, got {bad[0]}")
    return out


def _paired(err_by_sev: ErrBySev, alexnet_by_sev: ErrBySev) -> tuple[dict[int, float], dict[int, float]]:
    """Both error series by severity, checking AlexNet has every severity of the model's."""
    e, a = _by_severity(err_by_sev), _by_severity(alexnet_by_sev)
    missing = sorted(set(e) - set(a))
    if missing:
        raise RobustvitError(f"no AlexNet error for severity {missing[0]}")
    return e, a


def alexnet_errors(name: str) -> tuple[float, ...]:
    """AlexNet's ImageNet-C top-1 errors of corruption ``name`` at severities 1-5."""
    if name not in ALEXNET_ERRORS:
        raise unknown_name("corruption", name, ALEXNET_ERRORS)
    return ALEXNET_ERRORS[name]


def corruption_error(err_by_sev: ErrBySev, alexnet_by_sev: ErrBySev) -> float:
    """CE = Σ_s E_s / Σ_s E_s^AlexNet over the severities of ``err_by_sev`` (a fraction, not percent; the paper
    sums all 5). ``alexnet_by_sev``: AlexNet's errors for (at least) those severities, e.g. ``ALEXNET_ERRORS[name]``."""
    e, a = _paired(err_by_sev, alexnet_by_sev)
    if not e:
        raise RobustvitError("corruption_error needs the error at one severity at least")
    return sum(e.values()) / sum(a[s] for s in e)


def relative_corruption_error(err_by_sev: ErrBySev, clean_error: float, alexnet_by_sev: ErrBySev,
                              alexnet_clean_error: float = ALEXNET_CLEAN_ERROR) -> float:
    """Relative CE = Σ_s (E_s − E_clean) / Σ_s (E_s^AlexNet − E_clean^AlexNet)."""
    e, a = _paired(err_by_sev, alexnet_by_sev)
    return sum(v - clean_error for v in e.values()) / sum(a[s] - alexnet_clean_error for s in e)


def mce(errors: Mapping[str, ErrBySev], names: Sequence[str] | None = None) -> float:
    """mCE in percent: 100 × the mean CE over ``names`` (default: every corruption in ``errors``), each
    normalised by AlexNet. ``errors[name]`` holds the model's top-1 errors by severity."""
    names = list(errors) if names is None else list(names)
    if not names:
        raise RobustvitError("mce needs at least one corruption")
    return 100.0 * sum(corruption_error(errors[n], alexnet_errors(n)) for n in names) / len(names)


def relative_mce(errors: Mapping[str, ErrBySev], clean_error: float, names: Sequence[str] | None = None) -> float:
    """Relative mCE in percent: 100 × the mean relative CE (the model's clean error is subtracted)."""
    names = list(errors) if names is None else list(names)
    if not names:
        raise RobustvitError("relative_mce needs at least one corruption")
    return 100.0 * sum(relative_corruption_error(errors[n], clean_error, alexnet_errors(n))
                       for n in names) / len(names)


def retention(corrupted_acc: float | None, clean_acc: float | None) -> float | None:
    """Retention rate (FAN): corrupted accuracy / clean accuracy; None when either is unknown or clean is 0."""
    if corrupted_acc is None or clean_acc is None or clean_acc <= 0:
        return None
    return float(corrupted_acc) / float(clean_acc)


def mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean of the values, or None if the list is empty or holds a None / NaN."""
    vals = list(values)
    if not vals or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
        return None
    return float(sum(vals)) / len(vals)  # type: ignore[arg-type]


__all__ = ["ALEXNET_CLEAN_ERROR", "ALEXNET_ERRORS", "ALEXNET_ERRORS_3DCC", "ALEXNET_MEAN_ERRORS", "NOISE_CORRUPTIONS", "alexnet_errors",
           "corruption_error", "mce", "mean_or_none", "relative_corruption_error", "relative_mce", "retention"]
