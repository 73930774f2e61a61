"""Published evaluation protocols as data, and the one place that decides whether a number is comparable.

Every headline number of a run carries ``protocol: {"name", "comparable", "deviations"}`` in its suite's or
analysis's result (:func:`attach`, called when ``results.json`` is written and when an older file is read).
``name`` is the published protocol (``robustbench:cifar10:Linf``, ``imagenet-c``, …; ``none`` for a suite no
benchmark defines); ``deviations`` are one-line reasons why the number is not that protocol's, computed only from
what the run recorded (a fact not recorded is a deviation, ``unknown …``, never assumed); ``comparable`` is true
when there are none. Report, leaderboard and exports read these entries; nothing else decides comparability.

Protocols (conditions in :data:`PROTOCOLS`):

* RobustBench (Croce et al. 2021, arXiv:2010.09670): standard AutoAttack (Croce & Hein 2020, arXiv:2003.01690:
  APGD-CE, APGD-T, FAB-T, Square; 9 target classes, 5,000 Square queries) at ε = 8/255 (L∞) or 0.5 (L2) on the
  10,000 CIFAR-10/100 test images, ε = 4/255 on ImageNet's validation set or its published 5,000-image list;
  ``corruptions``: the mean over 15 corruptions × 5 severities of the released CIFAR-10-C / CIFAR-100-C /
  ImageNet-C files (Hendrycks & Dietterich 2019, arXiv:1903.12261), mCE normalised by AlexNet's errors;
  ``corruptions_3d``: the same over the 12 corruptions × 5 severities of the released ImageNet-3DCC files (Kar et
  al. 2022, arXiv:2203.01441), mCE normalised by AlexNet's errors on ImageNet-3DCC.
* AutoAttack's own L1 protocol (RobustBench has no L1 leaderboard): the original's L1 ``standard`` version
  (Croce & Hein 2021, "Mind the box", arXiv:2103.01208) at ε = 12 (pixel units, [0, 1]^d) on the CIFAR-10 test
  set, ``autoattack:cifar10:L1``.
* ImageNet-P (mFR, Hendrycks & Dietterich), ImageNet-R/-A/-Sketch/-V2 (whole sets), cue-conflict shape bias
  (Geirhos et al. 2019, arXiv:1811.12231), Cityscapes-C / COCO-C as FAN builds them (Zhou et al. 2022,
  arXiv:2204.12451: imagecorruptions at native resolution, 16 corruptions × 5 severities), AFAT's patch occlusion
  (noise drawn in the model's normalised input space, as RSPC's code), the spatial grid of Engstrom et al. 2019
  (arXiv:1712.02779), randomized-smoothing certification (Cohen et al. 2019, arXiv:1902.02918: n = 100,000,
  n0 = 100, α = 0.001), robust accuracy against ε from minimum-norm distances (``min-norm``: Pintor et al. 2021,
  arXiv:2102.12827; a label, not a benchmark: comparable with runs of the same attack, norm and steps), and the
  analyses' paper settings (:data:`ANALYSIS_PROTOCOLS`, checked against the settings each analysis records).

The run-level ``notes`` (the run's sample of the data, a suite's own sample, random weights, an analysis run's
deviations: :func:`run_deviations`) and the ``comparable`` of an exported data set (:func:`sample_entry`) are
computed here too; other modules record facts only (``tests/report/test_protocols.py`` greps ``src/`` for it).

>>> p = assess("autoattack", {"attack": "autoattack", "norm": "linf", "eps": 8 / 255, "version": "custom",
...            "attacks": ["apgd_ce"], "num_images": 10000, "n_target_classes": 9},
...            {"data": {"spec": "cifar10:test", "num_images": 10000}, "model": {}})
>>> p["name"], p["comparable"], p["deviations"][0]
('robustbench:cifar10:Linf', False, 'partial AutoAttack: attacks=apgd_ce (standard: apgd_ce+apgd_t+fab_t+square)')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

#: AutoAttack's standard members, in order (Croce & Hein 2020).
STANDARD_AUTOATTACK = ("apgd_ce", "apgd_t", "fab_t", "square")
#: The 15 benchmark corruptions of ImageNet-C / CIFAR-10-C (Hendrycks & Dietterich 2019).
BENCHMARK_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur",
                         "motion_blur", "zoom_blur", "snow", "frost", "fog", "brightness", "contrast",
                         "elastic_transform", "pixelate", "jpeg_compression")
SEVERITIES = (1, 2, 3, 4, 5)
#: ImageNet-3DCC's 12 corruptions (Kar et al. 2022, arXiv:2203.01441), in RobustBench's order
#: (``robustbench.data.CORRUPTIONS_3DCC``).
CORRUPTIONS_3DCC = ("near_focus", "far_focus", "bit_error", "color_quant", "flash", "fog_3d", "h265_abr", "h265_crf",
                    "iso_noise", "low_light", "xy_motion_blur", "z_motion_blur")
#: Cityscapes-C / COCO-C as FAN (its Table 14, ``coco_c_test_all.sh``): the 15 plus speckle noise, unscaled.
DENSE_CORRUPTIONS = 16
#: Test-set sizes RobustBench evaluates on (ImageNet: the whole validation set or its published 5,000 list).
TEST_IMAGES = {"cifar10": (10_000,), "cifar100": (10_000,), "imagenet": (50_000, 5_000)}


@dataclass(frozen=True)
class Protocol:
    """A published protocol: its name, where it is defined, and the conditions a result must meet."""

    name: str
    paper: str
    conditions: dict[str, Any] = field(default_factory=dict)


def _rb(dataset: str, threat: str, eps: float | None = None, eps_text: str | None = None) -> Protocol:
    """RobustBench's protocol of ``dataset`` × ``threat``; L1 is AutoAttack's own standard version (no RobustBench
    leaderboard)."""
    cond: dict[str, Any] = {"dataset": dataset, "threat_model": threat, "images": TEST_IMAGES[dataset]}
    if threat == "corruptions":
        cond.update(corruptions=15, severities=5, source="released files", mce_baseline="AlexNet"
                    if dataset == "imagenet" else None)
    elif threat == "corruptions_3d":
        cond.update(corruptions=len(CORRUPTIONS_3DCC), severities=5, source="released ImageNet-3DCC files",
                    mce_baseline="AlexNet on ImageNet-3DCC")
    else:
        cond.update(attack="autoattack", version="standard", members=STANDARD_AUTOATTACK, eps=eps,
                    eps_text=eps_text, n_target_classes=9, square_queries=5000)
    if threat == "L1":
        return Protocol(f"autoattack:{dataset}:L1", "Croce & Hein 2021, arXiv:2103.01208", cond)
    return Protocol(f"robustbench:{dataset}:{threat}", "Croce et al. 2021, arXiv:2010.09670", cond)


#: Every published protocol robustvit measures against, by name.
PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    _rb("cifar10", "Linf", 8 / 255, "8/255"), _rb("cifar10", "L2", 0.5, "0.5"),
    _rb("cifar100", "Linf", 8 / 255, "8/255"), _rb("imagenet", "Linf", 4 / 255, "4/255"),
    _rb("cifar10", "L1", 12.0, "12"), *(_rb(d, "corruptions") for d in ("cifar10", "cifar100", "imagenet")),
    _rb("imagenet", "corruptions_3d"),
    *(Protocol(n, "Hendrycks & Dietterich 2019, arXiv:1903.12261", {"metric": "mFR", "source": "released files"})
      for n in ("imagenet-p", "cifar-10-p")),
    *(Protocol(n, p, {"images": "whole set"}) for n, p in (
        ("imagenet-r", "Hendrycks et al. 2021, arXiv:2006.16241"), ("imagenet-a", "Hendrycks et al. 2021, arXiv:1907.07174"),
        ("imagenet-sketch", "Wang et al. 2019, arXiv:1905.13549"), ("imagenet-v2", "Recht et al. 2019, arXiv:1902.10811"))),
    Protocol("cue-conflict", "Geirhos et al. 2019, arXiv:1811.12231", {"images": "the 1,280 stimuli"}),
    Protocol("cityscapes-c", "Zhou et al. 2022 (FAN), arXiv:2204.12451",
             {"corruptions": DENSE_CORRUPTIONS, "severities": 5, "size_scaling": False}),
    Protocol("coco-c", "Zhou et al. 2022 (FAN), arXiv:2204.12451",
             {"corruptions": DENSE_CORRUPTIONS, "severities": 5, "size_scaling": False}),
    Protocol("afat-occlusion", "AFAT; RSPC (Guo et al. 2023, arXiv:2301.13096) code", {"noise_space": "normalized"}),
    Protocol("spatial-grid", "Engstrom et al. 2019, arXiv:1712.02779", {"transforms": 5 * 5 * 31}),
    Protocol("randomized-smoothing", "Cohen et al. 2019, arXiv:1902.02918", {"n": 100_000, "n0": 100, "alpha": 0.001}),
    Protocol("derandomized-smoothing", "Levine & Feizi 2020, arXiv:2002.10733 (CIFAR-10: column band 4 px, 5×5 "
             "patches); Salman et al. 2022, arXiv:2110.07719 (ImageNet at 224 px: column band 19 px, 32×32 patches)",
             {"cifar10": ("column", 4, 5), "imagenet": ("column", 19, 32)}),
    Protocol("min-norm", "Pintor et al. 2021 (FMN), arXiv:2102.12827: robust accuracy against ε from minimum-norm "
             "distances; not a RobustBench number", {"attacks": ("fmn", "fab")}),
)}
#: Suites whose number has no published benchmark: measured as recorded, comparable with runs of the same settings.
NO_PROTOCOL = "none"


# ---- facts of the run ----------------------------------------------------------------------------------------
def dataset_of(run: dict[str, Any]) -> str | None:
    """RobustBench's data-set name of the run's ``--data`` (cifar10, cifar100, imagenet), else None."""
    spec = str((run.get("data") or {}).get("spec") or "")
    name = spec.split(":", 1)[0].strip().lower().replace("-", "_")
    return name if name in TEST_IMAGES else None


def _split(run: dict[str, Any]) -> list[str]:
    """A deviation when ``--data`` names a training split (RobustBench evaluates on the test / validation set)."""
    spec = str((run.get("data") or {}).get("spec") or "")
    parts = re.split(r"[:,/=]", spec.split(":", 1)[1].lower()) if ":" in spec else []
    return [f"data {spec!r} is a training split, not the test set"] if "train" in parts else []


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _common(result: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """Deviations of any suite: untrained weights, a sample instead of the data set, unreadable images."""
    out: list[str] = []
    weights = (run.get("model") or {}).get("weights") or {}
    if weights.get("source") == "random" or weights.get("random"):
        out.append("random weights")
    sub = (run.get("data") or {}).get("subset")
    if isinstance(sub, dict) and sub.get("method") not in ("all", "file", None):
        out.append(f"subset {sub.get('num_images')}/{sub.get('of')} ({sub.get('method')})")
    own = result.get("subset")
    if isinstance(own, dict) and own.get("method") not in ("all", "file"):
        out.append(f"suite subset {own.get('num_images')}/{own.get('of')} ({own.get('method')})")
    bad = _num(result.get("num_unreadable")) or _num((run.get("data") or {}).get("num_unreadable"))
    if bad:
        out.append(f"{int(bad)} unreadable images")
    return out


def _flags(result: dict[str, Any]) -> list[str]:
    flags = result.get("flags") or {}
    raised = sorted(k for k, f in flags.items() if isinstance(f, dict) and f.get("flag"))
    return [f"gradient-masking flag: {', '.join(raised)}"] if raised else []


def _image_count(n: float | None, allowed: tuple[int, ...]) -> list[str]:
    """A deviation when a recorded image count ``n`` is none of ``allowed`` (in the order given)."""
    if n is None or int(n) in allowed:
        return []
    return [f"{int(n):,} images (protocol: {' or '.join(f'{k:,}' for k in allowed)})"]


def _images(dataset: str, result: dict[str, Any]) -> list[str]:
    n = _num(result.get("num_images"))
    if n is None:
        return ["unknown number of images (num_images not recorded)"]
    return _image_count(n, TEST_IMAGES[dataset])


# ---- one checker per kind of suite ---------------------------------------------------------------------------
Checker = Callable[[str, dict[str, Any], dict[str, Any]], tuple[str, list[str]]]


#: The threat-model names (RobustBench's spelling) of the attack norms.
THREAT_MODELS = {"linf": "Linf", "l2": "L2", "l1": "L1"}


def threat_model(result: dict[str, Any]) -> str:
    """RobustBench's threat-model name of an attack result (``Linf`` / ``L2`` / ``L1``)."""
    return THREAT_MODELS.get(str(result.get("norm") or "linf").lower(), "Linf")


def _autoattack(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    dataset, threat = dataset_of(run), threat_model(result)
    name = f"{'autoattack' if threat == 'L1' else 'robustbench'}:{dataset}:{threat}"
    dev: list[str] = []
    proto = PROTOCOLS.get(name)
    if proto is None:
        name, spec = "autoattack", (run.get("data") or {}).get("spec")
        dev.append(f"no AutoAttack L1 protocol for data {spec!r}" if threat == "L1"
                   else f"no RobustBench {threat} leaderboard for data {spec!r}")
    members = [str(m).replace("-", "_") for m in result.get("attacks") or []]
    version = result.get("version")
    if not members and version is None:
        dev.append("unknown AutoAttack members (attacks/version not recorded)")
    elif version not in (None, "standard") or (members and tuple(members) != STANDARD_AUTOATTACK):
        what = f"attacks={'+'.join(members)}" if members else f"version={version}"
        dev.append(f"partial AutoAttack: {what} (standard: {'+'.join(STANDARD_AUTOATTACK)})")
    overrides = result.get("overrides") or {}
    if overrides:
        dev.append("reduced AutoAttack: " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    elif result.get("reduced"):
        dev.append("reduced AutoAttack")
    targets = _num(result.get("n_target_classes"))
    if targets is not None and int(targets) != 9:
        dev.append(f"{int(targets)} target classes (standard: 9)")
    if proto is not None:
        dev += _split(run)
        eps = _num(result.get("eps"))
        if eps is None:
            dev.append("unknown ε (eps not recorded)")
        elif abs(eps - proto.conditions["eps"]) > 1e-6:
            dev.append(f"ε = {eps_text(eps, threat)} (protocol: {proto.conditions['eps_text']})")
        if not _common(result, run):                        # a sample is named there already
            dev += _images(dataset, result)                # type: ignore[arg-type]
    return name, dev + _flags(result)


def _attack(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    """PGD, APGD, FGSM, Patch-Fool, transfer: attacks, not benchmarks; only the common conditions apply."""
    return NO_PROTOCOL, _flags(result)


def _transfer(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    """A transfer matrix: no benchmark; its sources' random weights (``random_sources``) are deviations."""
    random = result.get("random_sources") or []
    dev = [f"random weights: {', '.join(map(str, random))} (untrained networks; the matrix is not comparable with "
           "published tables)"] if random else []
    return NO_PROTOCOL, dev + _flags(result)


def _spatial(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    if "reduced_grid" not in result:
        return "spatial-grid", ["unknown grid (reduced_grid not recorded)"]
    reduced = f"reduced grid {result.get('grid')} instead of 9x9x31 ({result.get('transforms')} transforms)"
    return "spatial-grid", [reduced] if result["reduced_grid"] else []


def corruption_counts(result: dict[str, Any]) -> tuple[int, int]:
    """How many of the 15 benchmark corruptions and of the 5 severities a corruptions result covers."""
    names = set(result.get("corruptions") or [])
    sev = {int(s) for s in result.get("severities") or [] if str(s).isdigit()}
    return len(names & set(BENCHMARK_CORRUPTIONS)), len(sev & set(SEVERITIES))


def _corruptions_3d(result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    """ImageNet-3DCC: RobustBench's ``corruptions_3d`` when all 12 × 5 released files of a 1000-class tree were
    read on 5,000 or 50,000 images."""
    cond = PROTOCOLS["robustbench:imagenet:corruptions_3d"].conditions
    dev: list[str] = []
    nc = len(set(result.get("corruptions") or []) & set(CORRUPTIONS_3DCC))
    ns = len({int(s) for s in result.get("severities") or [] if str(s).isdigit()} & set(SEVERITIES))
    if (nc, ns) != (cond["corruptions"], cond["severities"]):
        dev.append(f"{nc} of {cond['corruptions']} corruptions × {ns} of {cond['severities']} severities")
    classes = _num(result.get("num_classes"))
    if classes is None:
        dev.append("unknown number of classes (num_classes not recorded)")
    elif int(classes) != 1000:
        dev.append(f"{int(classes)} classes, not ImageNet-1k's 1000")
    dev += _split(run)
    if not _common(result, run):
        dev += _image_count(_num(result.get("num_images")), (5_000, 50_000))
    return "robustbench:imagenet:corruptions_3d", dev


def _corruptions(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    if result.get("source_layout") == "imagenet-3dcc":
        return _corruptions_3d(result, run)
    dataset = dataset_of(run)
    dev: list[str] = []
    if dataset is None:
        name = "common-corruptions"
        dev.append(f"data {(run.get('data') or {}).get('spec')!r} has no released -C files (CIFAR-10/100, ImageNet)")
    else:
        name = f"robustbench:{dataset}:corruptions"
        dev += _split(run)
    if "corruptions" not in result or "severities" not in result:
        dev.append("unknown corruptions or severities (not recorded)")
    else:
        nc, ns = corruption_counts(result)
        if (nc, ns) != (15, 5):
            dev.append(f"{nc} of 15 corruptions × {ns} of 5 severities")
    if not result.get("source"):
        dev.append("corrupted on the fly, not the released files (approximate)")
    if dataset is not None and not _common(result, run):
        dev += _image_count(_num(result.get("num_images")), tuple(sorted(TEST_IMAGES[dataset])))
    if result.get("mce") is not None and result.get("mce_protocol") == "approximate":
        dev.append("mCE approximate: " + ", ".join(map(str, result.get("mce_approximations") or ["not the released pipeline"])))
    return name, dev


def _named(name: str) -> Checker:
    def check(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
        return name, []
    return check


def _perturbations(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    name = "cifar-10-p" if result.get("benchmark") == "cifar-p" else "imagenet-p"
    dev = [] if result.get("source") else ["sequences generated in memory, not the released files"]
    return name, dev + [f"approximate: {a}" for a in result.get("approximations") or []]


def _occlusion(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    space = result.get("noise_space")
    if result.get("mode") == "drop":
        return "afat-occlusion", ["patches zeroed (mode=drop; AFAT: noise)"]
    if space is None:
        return "afat-occlusion", ["unknown occlusion-noise space (noise_space not recorded)"]
    return "afat-occlusion", [] if space == "normalized" else [f"noise in {space} space (AFAT/RSPC: normalized)"]


def _dense(name: str) -> Checker:
    def check(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
        dev: list[str] = []
        if result.get("size_scaling") is None:
            dev.append("unknown whether corrupted at native resolution (size_scaling not recorded)")
        elif result["size_scaling"]:
            dev.append("corruption strength scaled with image size (protocol: imagecorruptions unscaled)")
        names = result.get("corruptions")
        if isinstance(names, list) and len(names) != DENSE_CORRUPTIONS:
            dev.append(f"{len(names)} corruptions (FAN: {DENSE_CORRUPTIONS})")
        sev = result.get("severities")
        if isinstance(sev, list) and len(sev) != 5:
            dev.append(f"{len(sev)} of 5 severities")
        return name, dev
    return check


def _dense_name(run: dict[str, Any]) -> str:
    spec = str((run.get("data") or {}).get("spec") or "").split(":", 1)[0]
    return {"coco": "coco-c", "cityscapes": "cityscapes-c"}.get(spec, NO_PROTOCOL)


def _certify(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    cond = PROTOCOLS["randomized-smoothing"].conditions
    settings = result.get("settings") or {}
    dev = []
    for k in ("n", "n0", "alpha"):
        v = _num(settings.get(k))
        if v is None:
            dev.append(f"unknown {k} (not recorded)")
        elif v != cond[k]:
            dev.append(f"reduced: {k} = {v:g} (Cohen et al.: {cond[k]:g})")
    return "randomized-smoothing", dev


def _certify_patch(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    """Patch certification against the published setting of its data set (ablation, band width in pixels, a
    certified patch side among those evaluated); other data sets have none."""
    published = PROTOCOLS["derandomized-smoothing"].conditions.get(dataset_of(run) or "")
    if published is None:
        return NO_PROTOCOL, []
    kind, band, patch = published
    s = result.get("settings") or {}
    dev = []
    if (s.get("ablation"), s.get("size_pixels")) != (kind, band):
        dev.append(f"{s.get('ablation')} ablation of {s.get('size_pixels')} px (published: {kind} of {band} px)")
    if patch not in (s.get("patch_pixels") or []):
        dev.append(f"patches of {s.get('patch_pixels')} px (published: {patch}×{patch})")
    return "derandomized-smoothing", dev


def _min_norm(key: str, result: dict[str, Any], run: dict[str, Any]) -> tuple[str, list[str]]:
    """The ``min_norm`` curve: its own protocol (an attack's upper bound on robust accuracy at every ε, comparable
    with runs of the same attack, norm and steps)."""
    attack = result.get("attack")
    if attack not in PROTOCOLS["min-norm"].conditions["attacks"]:
        return "min-norm", [f"unknown minimum-norm attack {attack!r} (not recorded)"]
    return "min-norm", []


CHECKERS: dict[str, Checker] = {
    "autoattack": _autoattack, "spatial": _spatial, "corruptions": _corruptions, "perturbations": _perturbations,
    "patch_occlusion": _occlusion, "shape_bias": _named("cue-conflict"), "certify": _certify,
    "certify_patch": _certify_patch,
    "transfer": _transfer, **{n: _attack for n in ("pgd", "apgd", "fgsm", "patch_fool")},
    "fmn": _attack, "min_norm": _min_norm,
    **{n: _named(n.replace("_", "-")) for n in ("imagenet_r", "imagenet_a", "imagenet_sketch", "imagenet_v2")},
}


def base_name(key: str) -> str:
    """The suite name of a results key (``pgd:eps=4/255`` → ``pgd``)."""
    return key.split(":", 1)[0].replace("-", "_")


def assess(key: str, result: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The ``protocol`` entry of one suite result (key as in ``suites``) of ``run`` (a results.json dict)."""
    base = base_name(key)
    if base.startswith(("seg_", "det_")) and base.endswith("corruptions"):
        name, dev = _dense(_dense_name(run))(key, result, run)
        if name == NO_PROTOCOL:
            dev = [f"no published corruption benchmark for data {(run.get('data') or {}).get('spec')!r}"]
    elif base in CHECKERS:
        name, dev = CHECKERS[base](key, result, run)
    else:
        name, dev = NO_PROTOCOL, []
    if result.get("comparable") is False:          # written by a suite that judged itself (older results)
        dev += [str(n) for n in result.get("notes") or []] or ["marked not comparable by the suite"]
    dev = list(dict.fromkeys(_common(result, run) + dev))
    return {"name": name, "comparable": not dev, "deviations": dev}


#: The analyses' paper settings, by analysis name: what a result's recorded settings are checked against.
ANALYSIS_PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("grouping", "Zhou et al. 2022 (FAN), arXiv:2204.12451, Sec. 3 (noise x ~ N(0, 1))",
             {"sigma": 1.0, "threshold_kind": "absolute"}),
    Protocol("attention_stability", "Guo et al. 2023 (AFAT), arXiv:2306.07881; RSPC's occlusion code",
             {"noise_space": "normalized", "rho": 0.1, "min_masks": 100}),
    Protocol("lesion", "Bhojanapalli et al. 2021, arXiv:2103.14586, Fig. 8",
             {"samples": 25, "random_parts": ("block", "attn", "mlp"), "keep_first": True}),
    Protocol("correlation", "Bhojanapalli et al. 2021, arXiv:2103.14586, Fig. 7",
             {"method": "pearson", "level": "block"}),
    Protocol("perturbation_semantics", "Debenedetti et al. 2023, arXiv:2209.07399 (and the thesis)",
             {"eps": 4 / 255, "eps_text": "4/255", "classifier": "a strong standard model", "vis_steps": 100,
              "vis_eps": 15.0, "resolution": 224}),
)}


def _grouping(result: dict[str, Any], cond: dict[str, Any]) -> list[str]:
    dev = [] if "sigma" in result else ["unknown noise σ (sigma not recorded)"]
    if result.get("threshold_kind", cond["threshold_kind"]) != cond["threshold_kind"]:
        dev.append("grouping convention relative: eigenvalues above eig_threshold × the largest and noise clamped "
                   "in pixel space (FAN: absolute threshold, unclipped Gaussian input noise; convention=fan)")
    sigma = _num(result.get("sigma"))
    if sigma is not None and sigma != cond["sigma"]:
        dev.append(f"noise σ = {result['sigma']} (FAN writes the noise x ~ N(0, 1): σ = {cond['sigma']:g})")
    return dev


def _stability(result: dict[str, Any], cond: dict[str, Any]) -> list[str]:
    dev = []
    rho, patches = _num(result.get("rho")), result.get("num_patches")
    if rho and result.get("occluded_patches") == 0 and patches:
        dev.append(f"rho = {result['rho']} of {patches} patches rounds to none occluded")
    if "noise_space" not in result:
        dev.append("unknown occlusion-noise space (noise_space not recorded)")
    elif result["noise_space"] != cond["noise_space"]:
        dev.append("occlusion noise U[0, 1) in pixel space (RSPC: in the normalised input space)")
    if rho is not None and rho != cond["rho"]:
        dev.append(f"rho = {result['rho']} of the patches occluded (AFAT: {cond['rho']})")
    masks = _num(result.get("num_masks"))
    if masks is not None and masks < cond["min_masks"]:
        dev.append(f"{int(masks)} random masks per image (AFAT: 100–1000)")
    ps, model_ps = (result.get("options") or {}).get("patch_size"), result.get("model_patch_size")
    if ps and model_ps and ps != model_ps:
        dev.append(f"occluded {ps}-px patches, not the model's {model_ps}-px patches")
    return dev


def _lesion(result: dict[str, Any], cond: dict[str, Any]) -> list[str]:
    opts, removable = result.get("options") or {}, result.get("removable_parts")
    if removable is None:                   # not recorded: the result's notes carry its departures
        return []
    if not opts.get("random", True):
        return ["no random removals (random=0; the paper removes n random blocks / attention / MLP layers)"]
    dev = []
    samples = opts.get("samples", cond["samples"])
    if samples != cond["samples"]:
        dev.append(f"{samples} random subsets per n (the paper: {cond['samples']})")
    parts = list(opts.get("random_parts") or cond["random_parts"])
    names = {"block": "random", "attn": "random_attention", "mlp": "random_mlp"}
    missing = [names[k] for k in cond["random_parts"] if k in removable and k not in parts]
    if missing:
        dev.append(f"random removals left out: {', '.join(missing)} (random_parts={'+'.join(parts)})")
    if any(v is False for v in (result.get("random_first_kept") or {}).values()):
        dev.append("random attention / MLP removals may include the first block (keep_first=0)")
    return dev


def _correlation(result: dict[str, Any], cond: dict[str, Any]) -> list[str]:
    dev = []
    asked = (result.get("options") or {}).get("method")
    if asked == "cka" and result.get("method") == "cka" and result.get("family") not in ("cnn", "swin"):
        dev.append("linear CKA (the paper uses |Pearson ρ| for ViTs; method=pearson)")
    if result.get("level", cond["level"]) != cond["level"]:
        dev.append("one representation per stage (the paper compares every block; level=block)")
    return dev


def _semantics(result: dict[str, Any], cond: dict[str, Any]) -> list[str]:
    dev = []
    clf, weights = result.get("classifier"), result.get("classifier_weights") or {}
    if clf == "self":
        dev.append("classifier = the analysed model itself (the thesis uses strong standard models)")
    elif clf is not None and weights.get("source") == "random":
        dev.append(f"classifier {clf} has random weights (allow_random=1): its accuracy measures nothing; the paper "
                   "uses strong standard models")
    eps = _num(result.get("eps_value"))
    if eps is not None and abs(eps - cond["eps"]) > 1e-12:
        dev.append(f"eps = {result.get('eps')} (the paper: {cond['eps_text']})")
    vis = result.get("visualisation") or {}
    steps = _num(vis.get("steps"))
    if steps is not None and steps < cond["vis_steps"]:
        dev.append(f"visualisation with {int(steps)} targeted PGD steps (the paper: {cond['vis_steps']})")
    vis_eps, res = (result.get("options") or {}).get("vis_eps", vis.get("eps_l2_at_224")), vis.get("resolution")
    if "eps_scaled" in vis and not vis["eps_scaled"] and list(res or []) != [cond["resolution"]] * 2:
        dev.append(f"visualisation L2 ε = {vis_eps} unscaled at {res[0]}×{res[1]} px (the paper's ε is for "
                   f"{cond['resolution']} px)")
    elif _num(vis_eps) is not None and abs(float(vis_eps) - cond["vis_eps"]) > 1e-12:
        dev.append(f"visualisation L2 ε = {vis_eps} at {cond['resolution']} px (the paper: {cond['vis_eps']})")
    return dev


#: Checks of an analysis's recorded settings against its paper's (:data:`ANALYSIS_PROTOCOLS`).
ANALYSIS_CHECKERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[str]]] = {
    "grouping": _grouping, "attention_stability": _stability, "lesion": _lesion, "correlation": _correlation,
    "perturbation_semantics": _semantics}


def subset_note(subset: dict[str, Any] | None) -> str | None:
    """Why numbers on the sample ``subset`` (a ``data.subset`` record) are not the whole data set's; None for no
    sample or a published list (``--subset FILE``)."""
    if not isinstance(subset, dict) or subset.get("method") in ("all", "file", None):
        return None
    what = (f"a class-stratified sample, seed {subset.get('seed')}" if subset.get("method") == "stratified"
            else "the first images")
    cls = f", {subset['num_classes']} classes" if subset.get("num_classes") is not None else ""
    return (f"{subset.get('num_images')} of {subset.get('of')} images ({what}{cls}), not the whole data set or a "
            "published subset")


def sample_entry(subset: dict[str, Any] | None) -> dict[str, Any]:
    """``comparable`` and ``notes`` of images drawn as ``subset`` (e.g. an exported corrupted data set's)."""
    note = subset_note(subset)
    return {"comparable": note is None, "notes": [note] if note else []}


def _random_weights(run: dict[str, Any]) -> list[str]:
    w = (run.get("model") or {}).get("weights") or {}
    if w.get("source") == "random" or w.get("comparable") is False:
        return [str(w.get("note") or "random weights: the numbers describe an untrained network")]
    return []


def run_deviations(doc: dict[str, Any]) -> list[str]:
    """The run-level notes of a results.json document: its sample of the data (run-wide, then each suite's own
    ``limit=`` sample, prefixed with its key), random weights and, for an analysis run, every analysis's deviations."""
    notes = []
    run_note = subset_note((doc.get("data") or {}).get("subset"))
    if run_note:
        notes.append(run_note)
    for key, res in (doc.get("suites") or {}).items():
        note = subset_note(res.get("subset")) if isinstance(res, dict) else None
        if note and note != run_note:
            notes.append(f"{key}: {note}")
    notes += _random_weights(doc)
    analyses = doc.get("analyses") if doc.get("kind") == "analysis" else None
    for res in (analyses or {}).values():
        if isinstance(res, dict) and isinstance(res.get("protocol"), dict):
            notes += [str(d) for d in res["protocol"].get("deviations") or []]
    return list(dict.fromkeys(notes))


def analysis_protocol(name: str, result: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The ``protocol`` entry of an analysis result: its recorded settings checked against the paper's
    (:data:`ANALYSIS_PROTOCOLS`), fewer images than the paper's (``paper_images``), the run's sample and weights,
    and every ``notes`` entry the analysis recorded (what it computed differently on this architecture)."""
    proto = ANALYSIS_PROTOCOLS.get(name)
    dev = ANALYSIS_CHECKERS[name](result, proto.conditions) if proto is not None else []
    n, paper = _num(result.get("num_images")), _num(result.get("paper_images"))
    if n is not None and paper and n < paper:
        dev.append(f"{int(n)} images (the paper used {int(paper)})")
    dev += [str(x) for x in result.get("notes") or []]
    dev = list(dict.fromkeys(_common({}, run) + dev))
    return {"name": proto.name if proto is not None else f"{name} (paper setting)", "comparable": not dev,
            "deviations": dev}


def attach(doc: dict[str, Any], *, force: bool = False, analyses: bool = True) -> dict[str, Any]:
    """Give every suite and analysis result of ``doc`` its ``protocol`` entry (kept when already recorded, unless
    ``force``; an analysis entry only with ``analyses`` too), record the run-level ``notes`` (:func:`run_deviations`
    and those already recorded) and set ``comparable``: every entry comparable and no note. In place."""
    entries = []
    for key, res in (doc.get("suites") or {}).items():
        if isinstance(res, dict):
            if force or not isinstance(res.get("protocol"), dict):
                res["protocol"] = assess(key, res, doc)
            entries.append(res["protocol"])
    payload = doc.get("analyses")
    for name, res in payload.items() if isinstance(payload, dict) else ():
        if isinstance(res, dict) and name != "figures":
            if (force and analyses) or not isinstance(res.get("protocol"), dict):
                res["protocol"] = analysis_protocol(name, res, doc)
            entries.append(res["protocol"])
    doc["notes"] = list(dict.fromkeys(run_deviations(doc) + [str(n) for n in doc.get("notes") or []]))
    doc["comparable"] = all(p["comparable"] for p in entries) and not doc["notes"]
    return doc


def protocol_of(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recorded ``protocol`` entry of a suite result (None when absent)."""
    p = (result or {}).get("protocol")
    return p if isinstance(p, dict) else None


def eps_text(eps: float | None, threat: str = "Linf") -> str:
    """ε as RobustBench writes it: L∞ as grey levels (``8/255``), L2 and L1 as a decimal (``0.5``, ``3.0``, ``12.0``)."""
    if eps is None:
        return "–"
    if threat in ("L2", "L1"):
        return f"{eps:.1f}" if abs(eps * 10 - round(eps * 10)) < 1e-6 else f"{eps:.4g}"
    grey = eps * 255
    return f"{round(grey)}/255" if abs(grey - round(grey)) < 1e-4 else f"{eps:.4g}"


def wilson_interval(accuracy: float | None, n: int | None, z: float = 1.959964) -> tuple[float, float] | None:
    """95 % Wilson score interval of a proportion measured on ``n`` images (Wilson 1927); None without ``n``."""
    if accuracy is None or not n:
        return None
    p = min(max(float(accuracy), 0.0), 1.0)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


__all__ = ["ANALYSIS_CHECKERS", "ANALYSIS_PROTOCOLS", "BENCHMARK_CORRUPTIONS", "CHECKERS", "CORRUPTIONS_3DCC",
           "NO_PROTOCOL", "PROTOCOLS", "Protocol", "STANDARD_AUTOATTACK", "analysis_protocol", "assess", "attach",
           "base_name", "corruption_counts", "dataset_of", "eps_text", "protocol_of", "run_deviations",
           "sample_entry", "subset_note", "threat_model", "wilson_interval"]
