"""Build ``report.md`` and ``report.html`` from runs: the scorecard (``id="scorecard"``), then the groups in
page order. Each suite key is drawn by the registered section whose pattern matches it (the longest wins), else
by a table of its scalar metrics; analyses by the analysis renderers; training runs by their curves.
"""

from __future__ import annotations

import base64
import fnmatch
import html
import shutil
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from robustvit.errors import RobustvitError  # noqa: E402
from robustvit.plotting import save_figure  # noqa: E402
from robustvit.report import html as H  # noqa: E402
from robustvit.report.load import load_runs, merge_by_model, normalise  # noqa: E402
from robustvit.report.section import (EXTRA_SECTIONS, GROUPS, SECTIONS, Figure, Renderer,  # noqa: E402,F401
                                      Section, md_table, register_extra_section, register_section)


def _pattern(key: str) -> str | None:
    """The most specific (longest) registered section pattern matching suite ``key``."""
    matches = [p for p in SECTIONS.list() if fnmatch.fnmatch(key, p)]
    return max(matches, key=len) if matches else None


def renderer_for(key: str) -> Renderer:
    """The section renderer of the suite key (:func:`_pattern`), else the generic table of scalar metrics."""
    pattern = _pattern(key)
    return SECTIONS.get(pattern) if pattern else _scalar_section


def _placement(key: str) -> tuple[str, int]:
    """(group, order) of the suite key's section; unregistered keys go last in ``natural``."""
    pattern = _pattern(key)
    if pattern is None:
        return "natural", 90
    opts = SECTIONS.options_class(pattern)()
    return opts.group, opts.order


def load_results(paths: list[str | Path]) -> list[dict[str, Any]]:
    """The runs in ``paths`` (``robustvit.report.load``), the runs of one model joined into one entry."""
    return merge_by_model(load_runs(paths))


def _scalar_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    """A table of the suite's numbers (``seconds`` left out), models side by side."""
    metrics = list(dict.fromkeys(m for r in results for m, v in r["suites"].get(key, {}).items()
                                 if isinstance(v, (int, float)) and not isinstance(v, bool) and m != "seconds"))
    if not metrics:
        return None
    rows = [[m] + [r["suites"].get(key, {}).get(m) for r in results] for m in metrics]
    return Section(f"Suite `{key}`", md_table(["metric"] + [r["model"]["name"] for r in results], rows))


def _prepare(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results in ``load_run``'s form, every model named, one entry per model."""
    runs = [normalise({**r, "model": r.get("model") or {"name": "?"}}) for r in results]
    for r in runs:
        r.setdefault("model", {}).setdefault("name", "?")
    return merge_by_model(runs)


def build_sections(results: list[dict[str, Any]]) -> list[Section]:
    """Every section of the report in page order (the scorecard first); ``Section.group`` set on each."""
    from robustvit.report.scorecard import overview_section, scorecard_section, size_section
    from robustvit.report.sections.analysis import analysis_sections
    from robustvit.report.sections.training import training_section

    results = _prepare(results)
    placed: list[tuple[int, int, int, Section]] = []

    def put(sec: Section | None, group: str, order: int) -> None:
        if sec is not None:
            sec.group = sec.group or group
            placed.append((list(GROUPS).index(sec.group), order, len(placed), sec))

    put(overview_section(results), "clean", 0)
    put(size_section(results), "clean", 5)
    for key in dict.fromkeys(k for r in results for k in r["suites"]):
        group, order = _placement(key)
        if (group, order) == ("natural", 90) and any(isinstance(r["suites"].get(key), dict)
                                                     and "eps" in r["suites"][key] for r in results):
            group = "adversarial"
        put(renderer_for(key)(key, results), group, order)
        for name, extra in EXTRA_SECTIONS.items():
            if fnmatch.fnmatch(key, name.rsplit("#", 1)[0]):
                opts = extra.Options()
                put(extra(key, results), opts.group, opts.order)
    for sec in analysis_sections(results):
        put(sec, "inside", 50)
    put(training_section(results), "training", 50)
    placed.sort(key=lambda t: t[:3])
    return [scorecard_section(results)] + [s for *_, s in placed]


def _figure_html(fig: Figure, png: Path, section: Section) -> str:
    alt = fig.caption or f"{section.title}: {fig.name.replace('_', ' ')}"
    b64 = base64.b64encode(png.read_bytes()).decode()
    return (f"<figure><img src='data:image/png;base64,{b64}' alt='{html.escape(alt, quote=True)}'>"
            f"<figcaption>{H.inline(fig.caption)}</figcaption></figure>")


def write_report(results: list[dict[str, Any]], out: Path, title: str = "robustvit report",
                 notes: list[str] | None = None) -> tuple[Path, Path]:
    """Write ``out/report.md`` (figures as ``out/figures/*.png``) and a self-contained ``out/report.html``."""
    if not results:
        raise RobustvitError("no results to report")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    sections = build_sections(results)
    md = [f"# {title}", ""]
    body = [f"<h1>{html.escape(title)}</h1>"]
    groups_seen: list[str] = []
    used: set[str] = set()
    for i, sec in enumerate(sections):
        group = sec.group or "natural"
        if i == 1:    # after the scorecard: the run notes, folded, and links to the groups
            present = list(dict.fromkeys(s.group for s in sections[1:] if s.group))
            body.append("<nav>" + "".join(f"<a href='#{g}'>{GROUPS[g]}</a>" for g in present) + "</nav>")
            if notes:
                md += [f"> {n}" for n in notes] + [""]
                body.append("<details><summary>About these runs</summary>"
                            + "".join(f"<p class='note'>{H.inline(n)}</p>" for n in notes) + "</details>")
        if i > 0 and group not in groups_seen:
            groups_seen.append(group)
            md += [f"## {GROUPS[group]}", ""]
            body.append(f"<h2 id='{group}'>{html.escape(GROUPS[group])}</h2>")
        if i == 0:
            md += [f"## {sec.title}", "", sec.markdown, ""]
            body += [f"<h2 id='scorecard-title'>{H.inline(sec.title)}</h2>", H.markdown(sec.markdown, "scorecard")]
        elif sec.title != GROUPS.get(group):
            md += [f"### {sec.title}", "", sec.markdown, ""]
            body += [f"<h3>{H.inline(sec.title)}</h3>", H.markdown(sec.markdown)]
        else:
            md += [sec.markdown, ""]
            body.append(H.markdown(sec.markdown))
        if sec.details:
            md += [f"- {d}" for d in sec.details] + [""]
            body.append(f"<details><summary>{H.inline(sec.summary)}</summary><ul>"
                        + "".join(f"<li>{H.inline(d)}</li>" for d in sec.details) + "</ul></details>")
        for fig in sec.figures:
            stem = fig.name
            while stem in used:
                stem += "_"
            used.add(stem)
            png = out / "figures" / f"{stem}.png"
            if isinstance(fig.fig, Path):
                shutil.copyfile(fig.fig, png)
            else:
                save_figure(fig.fig, png)
            md += [f"![{fig.caption or fig.name}](figures/{png.name})", ""]
            body.append(_figure_html(fig, png, sec))
    if len(sections) == 1 and notes:
        md += [f"> {n}" for n in notes] + [""]
        body += [f"<p class='note'>{H.inline(n)}</p>" for n in notes]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text(H.page(title, body))
    return out / "report.md", out / "report.html"
