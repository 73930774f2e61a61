"""The report's building blocks: ``Figure``, ``Section``, the section registries and ``md_table``.

Section renderers (``robustvit.report.sections``) and the scorecard import these; ``robustvit.report.builder``
imports the renderers, never the other way round.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Literal

from robustvit.options import option
from robustvit.registry import Registry

Group = Literal["clean", "natural", "adversarial", "inside", "training"]
#: The report's groups, in page order, with their headings.
GROUPS: dict[str, str] = {"clean": "Clean accuracy", "natural": "Natural distribution shift",
                          "adversarial": "Adversarial robustness", "inside": "Inside the models", "training": "Training"}


@dataclass
class Figure:
    name: str               # file stem, e.g. "clean_accuracy"
    fig: Any                # a matplotlib figure, or the Path of a PNG written elsewhere (copied as it is)
    caption: str = ""       # also the image's alt text


@dataclass
class Section:
    title: str
    markdown: str = ""      # tables and text (Markdown; converted to HTML tables by a small renderer)
    figures: list[Figure] = field(default_factory=list)
    group: str | None = None   # None: the renderer's group
    details: list[str] = field(default_factory=list)   # long notes: a list in Markdown, folded in the HTML
    summary: str = "Notes"


@dataclass
class SectionOptions:
    """Where a registered section goes: its group on the page and its place within the group."""
    group: Group = "natural"
    order: int = option(50, min=0, max=100, help="position within the group (lower first)")


Renderer = Callable[[str, list[dict[str, Any]]], "Section | None"]
#: Report sections: ``fn(suite_key, results) -> Section`` registered under a suite-key pattern (e.g. ``"pgd*"``).
SECTIONS: Registry[Renderer] = Registry("report section", package="robustvit.report.sections")


#: Extra sections drawn after a suite's own section for every key their pattern matches (e.g. study plots).
EXTRA_SECTIONS: Registry[Renderer] = Registry("report extra section", package="robustvit.report.sections")


class _Registered:
    """A registered renderer: callable like the function, with its ``Options`` dataclass."""

    def __init__(self, fn: Renderer, options: type) -> None:
        self.fn, self.Options = fn, options
        self.__name__ = getattr(fn, "__name__", "section")

    def __call__(self, key: str, results: list[dict[str, Any]]) -> Section | None:
        return self.fn(key, results)


def _registered(fn: Renderer, group: str | None, order: int) -> _Registered:
    """``fn`` with its ``Options``: ``group`` (default the module's ``GROUP``, else ``natural``) and ``order``."""
    g = group or getattr(sys.modules.get(fn.__module__), "GROUP", "natural")
    opts = make_dataclass("Options", [("group", Group, field(default=g)),
                                      ("order", int, option(order, min=0, max=100))], bases=(SectionOptions,))
    return _Registered(fn, opts)


def register_section(pattern: str, *, group: str | None = None, order: int = 50) -> Callable[[Renderer], Renderer]:
    """Register ``fn(key, results) -> Section | None`` for suite keys matching ``pattern``; ``group`` (default
    the module's ``GROUP``, else ``natural``) places it on the page. The renderer's ``Options`` records both."""
    def deco(fn: Renderer) -> Renderer:
        SECTIONS.add(pattern, _registered(fn, group, order))
        return fn
    return deco


def register_extra_section(pattern: str, *, group: str | None = None,
                           order: int = 50) -> Callable[[Renderer], Renderer]:
    """Like ``register_section``, but drawn in addition to the key's own section (all matching extras run)."""
    def deco(fn: Renderer) -> Renderer:
        EXTRA_SECTIONS.add(f"{pattern}#{fn.__name__}", _registered(fn, group, order))
        return fn
    return deco


def key_stem(key: str, family: str) -> str:
    """A figure's file stem for suite ``key`` of ``family`` (``"corruptions:severities=3"`` →
    ``"corruptions_severities_3"``)."""
    return family if key == family else family + "_" + "".join(
        c if c.isalnum() else "_" for c in key[len(family):]).strip("_")


def file_stem(key: str) -> str:
    """Suite ``key`` as a file stem: runs of characters other than letters, digits, ``_.-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key)


def suite_runs(key: str, results: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(model name, suite result)`` of every run in ``results`` that holds suite ``key``."""
    return [(r["model"]["name"], r["suites"][key]) for r in results if isinstance(r["suites"].get(key), dict)]


def row_names(runs: list[tuple[str, dict[str, Any]]], field: str) -> list[str]:
    """The keys of every run's ``field`` mapping, in the order first seen (the rows of a side-by-side table)."""
    return list(dict.fromkeys(n for _, s in runs for n in s.get(field) or {}))


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else ("–" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v).replace("|", "\\|") for v in r) + " |" for r in rows]
    return "\n".join(lines)


__all__ = ["EXTRA_SECTIONS", "GROUPS", "SECTIONS", "Figure", "Group", "Renderer", "Section", "SectionOptions",
           "file_stem", "key_stem", "md_table", "register_extra_section", "register_section", "row_names", "suite_runs"]
