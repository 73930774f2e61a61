"""Report section of the ``clean`` suite."""

from __future__ import annotations

from typing import Any

from robustvit.report.section import Section, md_table, register_section

GROUP = "clean"


@register_section("clean", order=10)
def clean_section(key: str, results: list[dict[str, Any]]) -> Section:
    rows = [[r["model"]["name"], r["suites"][key]["top1"], r["suites"][key]["top5"], r["suites"][key]["num_images"]]
            for r in results if key in r["suites"]]
    return Section("Top-1 and top-5", md_table(["model", "top-1", "top-5", "images"], rows))
