"""Report section of the ``clean`` suite."""

from __future__ import annotations

from typing import Any

from robustvit.report.builder import Section, md_table, register_section


@register_section("clean")
def clean_section(key: str, results: list[dict[str, Any]]) -> Section:
    rows = [[r["model"]["name"], r["suites"][key]["top1"], r["suites"][key]["top5"], r["suites"][key]["num_images"]]
            for r in results if key in r["suites"]]
    return Section("Clean accuracy", md_table(["model", "top-1", "top-5", "images"], rows))
