"""Build ``report.md`` and ``report.html`` from results dicts (see the package docstring)."""

from __future__ import annotations

import base64
import fnmatch
import html
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from robustvit.errors import RobustvitError  # noqa: E402
from robustvit.registry import Registry  # noqa: E402


@dataclass
class Figure:
    name: str               # file stem, e.g. "clean_accuracy"
    fig: Any                # a matplotlib figure, or the Path of a PNG written elsewhere (copied as it is)
    caption: str = ""


@dataclass
class Section:
    title: str
    markdown: str = ""      # tables and text (Markdown; converted to HTML tables by a small renderer)
    figures: list[Figure] = field(default_factory=list)


Renderer = Callable[[str, list[dict[str, Any]]], "Section | None"]
#: Report sections: ``fn(suite_key, results) -> Section`` registered under a suite-key pattern (e.g. ``"pgd*"``).
SECTIONS: Registry[Renderer] = Registry("report section")
register_section = SECTIONS.register


def renderer_for(key: str) -> Renderer:
    """The section renderer whose pattern matches the suite key (the most specific, i.e. longest, pattern
    wins), else the generic table of scalar metrics."""
    matches = [p for p in SECTIONS.list() if fnmatch.fnmatch(key, p)]
    return SECTIONS.get(max(matches, key=len)) if matches else _scalar_section


def load_results(paths: list[str | Path]) -> list[dict[str, Any]]:
    out = []
    from robustvit.analysis import attach_analyses, load_analysis_folder

    for p in map(Path, paths):
        f = p / "results.json" if p.is_dir() else p
        if not f.is_file() and p.is_dir() and (analysis := load_analysis_folder(p)) is not None:
            out.append(analysis)
            continue
        if not f.is_file():
            raise RobustvitError(f"{p} holds no results.json; pass folders written by `robustvit eval` or `robustvit analyze`")
        try:
            res = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise RobustvitError(f"{f} is not valid JSON ({e})") from None
        res["_dir"] = str(f.parent)
        out.append(attach_analyses(res, f.parent / "analysis"))
    return out


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else ("–" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _scalar_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    metrics: list[str] = []
    for r in results:
        for m, v in r["suites"].get(key, {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and m not in metrics and m != "seconds":
                metrics.append(m)
    if not metrics:
        return None
    rows = [[m] + [r["suites"].get(key, {}).get(m) for r in results] for m in metrics]
    return Section(f"Suite `{key}`", md_table(["metric"] + [r["model"]["name"] for r in results], rows))


def _weights(model: dict[str, Any]) -> str:
    """The weights column: where they came from; random weights are flagged."""
    source = model.get("weights", {}).get("source", "not recorded")
    return "**random (untrained)**" if source == "random" else source


def _overview(results: list[dict[str, Any]]) -> Section:
    rows = [[r["model"]["name"], r["model"]["spec"]["family"], f"{r['model']['params'] / 1e6:.2f} M",
             "×".join(map(str, r["model"]["spec"]["input_size"][1:])), _weights(r["model"]), r["data"]["spec"],
             r["data"]["num_images"], r["run"]["device"]] for r in results]
    md = md_table(["model", "family", "params", "input", "weights", "data", "images", "device"], rows)
    random = [r["model"]["name"] for r in results if r["model"].get("weights", {}).get("source") == "random"]
    if random:
        md += (f"\n\n**Warning:** {', '.join(random)} evaluated with randomly initialised weights (no `--pretrained`, "
               "`--weights` or checkpoint): those results describe an untrained network.")
    fig = None
    if all("clean" in r["suites"] for r in results):
        f, ax = plt.subplots(figsize=(4 + len(results), 3))
        names = [r["model"]["name"] for r in results]
        ax.bar(names, [r["suites"]["clean"]["top1"] for r in results], color="#4c72b0")
        ax.set_ylim(0, 1), ax.set_ylabel("clean top-1"), ax.set_title("Clean accuracy")
        f.tight_layout()
        fig = Figure("clean_accuracy", f)
    extra = [r for r in results if r.get("training")]
    if extra:
        f, ax = plt.subplots(figsize=(5, 3))
        for r in extra:
            ep = [m["epoch"] for m in r["training"]]
            ax.plot(ep, [m.get("val_acc", m["train_acc"]) for m in r["training"]], marker="o", label=r["model"]["name"])
        ax.set_xlabel("epoch"), ax.set_ylabel("validation accuracy"), ax.set_ylim(0, 1), ax.legend()
        ax.set_title("Training")
        f.tight_layout()
        return Section("Models", md, [x for x in (fig, Figure("training", f)) if x])
    return Section("Models", md, [fig] if fig else [])


def build_sections(results: list[dict[str, Any]]) -> list[Section]:
    from robustvit.report import sections as _builtin  # noqa: F401  (registers built-in renderers)

    sections = [_overview(results)]
    keys: list[str] = []
    for r in results:
        keys += [k for k in r["suites"] if k not in keys]
    for key in keys:
        renderer = renderer_for(key)
        sec = renderer(key, results)
        if sec is not None:
            sections.append(sec)
    return sections


def write_report(results: list[dict[str, Any]], out: Path, title: str = "robustvit report",
                 notes: list[str] | None = None) -> tuple[Path, Path]:
    """Write ``out/report.md`` (figures as ``out/figures/*.png``) and a self-contained ``out/report.html``."""
    if not results:
        raise RobustvitError("no results to report")
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    sections = build_sections(results)
    md = [f"# {title}", ""] + [f"> {n}" for n in notes or []] + [""]
    body = [f"<h1>{html.escape(title)}</h1>"] + [f"<p class='note'>{html.escape(n)}</p>" for n in notes or []]
    for sec in sections:
        md += [f"## {sec.title}", "", sec.markdown, ""]
        body += [f"<h2>{_inline(sec.title)}</h2>", _md_to_html(sec.markdown)]
        for fig in sec.figures:
            png = out / "figures" / f"{fig.name}.png"
            if isinstance(fig.fig, Path):
                shutil.copyfile(fig.fig, png)
            else:
                fig.fig.savefig(png, dpi=110)
                plt.close(fig.fig)
            md += [f"![{fig.caption or fig.name}](figures/{png.name})", ""]
            b64 = base64.b64encode(png.read_bytes()).decode()
            body.append(f"<figure><img src='data:image/png;base64,{b64}' alt='{html.escape(fig.name)}'>"
                        f"<figcaption>{html.escape(fig.caption)}</figcaption></figure>")
    (out / "report.md").write_text("\n".join(md))
    style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
             "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}"
             ".note{color:#555;font-style:italic}code{background:#f3f3f3;padding:0 .2em}")
    (out / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                                     f"<style>{style}</style></head><body>{''.join(body)}</body></html>")
    return out / "report.md", out / "report.html"


def _inline(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _md_to_html(md: str) -> str:
    """Tables, paragraphs and inline code: all the Markdown that sections produce."""
    out, rows = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
            continue
        if rows:
            head, *rest = rows
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rest)
                       + "</table>")
            rows = []
        if line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join(out)
