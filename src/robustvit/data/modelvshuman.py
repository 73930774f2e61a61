"""Readers for bethgelab/model-vs-human's released layouts (Geirhos et al., NeurIPS 2021, arXiv:2106.07411).

Images (``modelvshuman/datasets``, one folder per data set): the parametric sets (colour … uniform-noise) as
``ROOT/<set>/dnn/session-*/<trial>_<tag>_<subject>_<condition>_<category>_<rest>.png`` (its
``InfoMappingWithSessions``); sketch, stylized, edge, silhouette and cue-conflict as ``ROOT/<set>/<category>/<file>``,
one condition ``0``. Human data (``raw-data/<set>/<set>_subject-XX_session_1.csv``): :func:`read_human_trials`,
conditions named as model-vs-human's pandas reads them (``1`` in a float column → ``1.0``, ``true`` → ``True``).

Stylized-ImageNet (Geirhos et al., ICLR 2019, arXiv:1811.12231) for training has ImageNet's layout and is read by
the ``imagenet`` source; its 16-class version above is ``stylized``.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from robustvit.errors import RobustvitError, unknown_name
from robustvit.metrics.modelvshuman import Trial, short_image_name

#: Every model-vs-human data set → its conditions, in the order of its experiments (``experiments.py``).
DATASETS: Mapping[str, tuple[str, ...]] = {
    "colour": ("cr", "bw"),
    "contrast": ("c100", "c50", "c30", "c15", "c10", "c05", "c03", "c01"),
    "high-pass": ("inf", "3.0", "1.5", "1.0", "0.7", "0.55", "0.45", "0.4"),
    "low-pass": ("0", "1", "3", "5", "7", "10", "15", "40"),
    "phase-scrambling": ("0", "30", "60", "90", "120", "150", "180"),
    "power-equalisation": ("0", "pow"),
    "false-colour": ("True", "False"),
    "rotation": ("0", "90", "180", "270"),
    "eidolonI": tuple(f"{2 ** i}-10-10" for i in range(8)),
    "eidolonII": tuple(f"{2 ** i}-3-10" for i in range(8)),
    "eidolonIII": tuple(f"{2 ** i}-0-10" for i in range(8)),
    "uniform-noise": ("0.0", "0.03", "0.05", "0.1", "0.2", "0.35", "0.6", "0.9"),
    "sketch": ("0",),
    "stylized": ("0",),
    "edge": ("0",),
    "silhouette": ("0",),
    "cue-conflict": ("0",),
}
IMG_EXTENSIONS = (".png", ".jpg", ".jpeg")


def check_dataset(name: str) -> str:
    if name not in DATASETS:
        raise unknown_name("model-vs-human data set", name, DATASETS)
    return name


@dataclass(frozen=True)
class Stimulus:
    """One released image: its file, data set, condition, category and image id (shared with the humans')."""

    path: str
    dataset: str
    condition: str
    category: str
    image: str


def _canonical(value: str, dataset: str) -> str:
    """A condition as model-vs-human names it (pandas' reading of the CSV column), e.g. ``1`` → ``1.0``."""
    names = DATASETS[dataset]
    if value in names:
        return value
    for n in names:
        if n.lower() == value.strip().lower():
            return n
        try:
            if float(n) == float(value):
                return n
        except ValueError:
            pass
    raise RobustvitError(f"{dataset}: unknown condition {value!r} (expected one of {', '.join(names)})")


def read_stimuli(root: str | Path, dataset: str, categories: list[str]) -> list[Stimulus]:
    """The released images of ``dataset`` under ``root`` (model-vs-human's ``datasets`` folder)."""
    base = Path(root).expanduser() / check_dataset(dataset)
    if not base.is_dir():
        raise RobustvitError(f"{base} does not exist; root= must be model-vs-human's datasets folder "
                             f"(holding {dataset}/…)")
    out: list[Stimulus] = []
    sessions = base / "dnn"
    if sessions.is_dir():
        for f in sorted(p for p in sessions.glob("session-*/*") if p.suffix.lower() in IMG_EXTENSIONS):
            parts = f.name.split("_")
            if len(parts) < 6 or parts[4] not in categories:
                raise RobustvitError(f"cannot read condition and category from {f.name!r}; expected "
                                     "<trial>_<tag>_<subject>_<condition>_<category>_… (model-vs-human's names)")
            out.append(Stimulus(str(f), dataset, _canonical(parts[3], dataset), parts[4], short_image_name(f.name)))
    else:
        for d in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if d.name not in categories:
                raise RobustvitError(f"{base}: folder {d.name!r} is not one of the 16 categories")
            out += [Stimulus(str(f), dataset, "0", d.name, short_image_name(f.name))
                    for f in sorted(d.iterdir()) if f.suffix.lower() in IMG_EXTENSIONS]
    if not out:
        raise RobustvitError(f"{base} holds no images (expected dnn/session-*/… or <category>/…)")
    return out


def read_human_trials(raw_data: str | Path, dataset: str) -> list[Trial]:
    """The human observers' trials of ``dataset`` from model-vs-human's ``raw-data`` folder (``subject-*`` files)."""
    folder = Path(raw_data).expanduser() / check_dataset(dataset)
    files = sorted(folder.glob("*subject-*.csv")) if folder.is_dir() else []
    if not files:
        raise RobustvitError(f"no human data in {folder}; raw_data= must be model-vs-human's raw-data folder "
                             f"(holding {dataset}/{dataset}_subject-01_session_1.csv …)")
    trials = []
    for f in files:
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                row = {k.lower(): v for k, v in row.items()}
                try:
                    trials.append(Trial(row["subj"], _canonical(row["condition"], dataset),
                                        short_image_name(row["imagename"]), row["category"], row["object_response"]))
                except KeyError as e:
                    raise RobustvitError(f"{f} lacks column {e}; expected model-vs-human's raw-data columns "
                                         "subj, object_response, category, condition, imagename") from None
    return trials
