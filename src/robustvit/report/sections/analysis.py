"""The "Inside the models" group: one table of every analysis's headline numbers, models side by side (the clean
accuracy on the analysis images one row), then one section per analysis with its notes and the figures it wrote.

A result's numbers are its ``headline`` ({label: number}), else those its registered reader picks
(``register_analysis_headline``), else its top-level real numbers (counts, options and bookkeeping excluded).
An analysis with its own view registers a renderer (``register_analysis_section``); none is needed to appear.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robustvit.registry import Registry
from robustvit.report.section import Figure, GROUPS, Section, md_table

GROUP = "inside"
#: Result fields that describe the run, not the model.
BOOKKEEPING = {"analysis", "model", "family", "data", "num_images", "subset", "seed", "batch_size", "options",
               "comparable", "notes", "seconds", "figures", "headline", "schema", "patch_size", "num_masks",
               "protocol", "paper_images", "eps_value", "model_patch_size", "num_patches", "removable_parts"}

AnalysisRenderer = Callable[[str, list[tuple[str, dict[str, Any]]]], "Section | None"]
#: Analysis sections: ``fn(name, [(model, result), …]) -> Section`` under an analysis-name pattern.
ANALYSIS_SECTIONS: Registry[AnalysisRenderer] = Registry("report analysis section", package="robustvit.report.sections")
register_analysis_section = ANALYSIS_SECTIONS.register
HeadlineReader = Callable[[dict[str, Any]], dict[str, float]]
#: The headline numbers of an analysis without a ``headline`` field: ``fn(result) -> {label: number}``.
ANALYSIS_HEADLINES: Registry[HeadlineReader] = Registry("analysis headline", package="robustvit.report.sections")
register_analysis_headline = ANALYSIS_HEADLINES.register
#: The label of the one clean-accuracy row of the table.
CLEAN = "clean accuracy (analysis images)"


def _label(name: str, key: str) -> str:
    """The table row of ``key`` of analysis ``name``."""
    return f"{name.replace('_', ' ')}: {key.replace('_', ' ')}"


def headline(name: str, result: dict[str, Any]) -> dict[str, float]:
    """The numbers an analysis result leads with: its ``headline``, its registered reader's, else its top-level
    floats (not its options or bookkeeping)."""
    if isinstance(result.get("headline"), dict):
        return {_label(name, k): v for k, v in result["headline"].items()}
    if name in ANALYSIS_HEADLINES.list():
        return {_label(name, k): v for k, v in ANALYSIS_HEADLINES.get(name)(result).items() if v is not None}
    settings = set(result.get("options") or {})   # the analysis's own options are settings, not results
    return {_label(name, k): v for k, v in result.items()
            if k not in BOOKKEEPING and k not in settings and isinstance(v, float)}


def deviations(result: dict[str, Any]) -> list[str]:
    """What an analysis result departs from its paper in: its ``protocol`` entry's deviations (results without
    one: their ``notes``)."""
    p = result.get("protocol")
    return list(p.get("deviations") or []) if isinstance(p, dict) else list(result.get("notes") or [])


def generic_section(name: str, found: list[tuple[str, dict[str, Any]]]) -> Section | None:
    """An analysis's deviations from its paper and the figures it wrote, models one after the other."""
    notes = [f"{m}: {'; '.join(dev)}" for m, r in found if (dev := deviations(r))]
    figures = [Figure(f"analysis_{name}_{i}_{Path(f).stem}", Path(f),
                      f"{m}: {name.replace('_', ' ')} ({Path(f).stem.replace('_', ' ')})")
               for i, (m, r) in enumerate(found) for f in r.get("figures") or [] if Path(f).is_file()]
    if not notes and not figures:
        return None
    return Section(name.replace("_", " ").capitalize(), "", figures, group=GROUP, details=notes,
                   summary="Settings that differ from the paper")


def analysis_sections(results: list[dict[str, Any]]) -> list[Section]:
    """The summary table and one section per analysis found in ``results`` (each run's ``analyses``)."""
    names = list(dict.fromkeys(n for r in results for n in r.get("analyses") or {}))
    if not names:
        return []
    models = [r["model"]["name"] for r in results if r.get("analyses")]
    values: dict[str, dict[str, Any]] = {CLEAN: {}}
    for r in results:
        for n, res in (r.get("analyses") or {}).items():
            clean = res.get("clean_accuracy")
            if isinstance(clean, float) and values[CLEAN].get(r["model"]["name"], clean) == clean:
                values[CLEAN][r["model"]["name"]] = clean   # one row; an analysis on other images keeps its own
            for label, v in headline(n, res).items():
                if not (label == _label(n, "clean_accuracy") and values[CLEAN].get(r["model"]["name"]) == v):
                    values.setdefault(label, {})[r["model"]["name"]] = v
    values = {k: v for k, v in values.items() if v}
    md = md_table(["measure"] + models, [[lab] + [vals.get(m) for m in models] for lab, vals in values.items()])
    out = [Section(GROUPS[GROUP], md + "\n\nThe headline numbers of each analysis (accuracies as fractions); the "
                   "figures below show the full curves and maps.", group=GROUP)] if values else []
    for n in names:
        found = [(r["model"]["name"], r["analyses"][n]) for r in results if n in (r.get("analyses") or {})]
        matches = [p for p in ANALYSIS_SECTIONS.list() if fnmatch.fnmatch(n, p)]
        fn = ANALYSIS_SECTIONS.get(max(matches, key=len)) if matches else generic_section
        sec = fn(n, found)
        if sec is not None:
            sec.group = GROUP
            out.append(sec)
    return out
