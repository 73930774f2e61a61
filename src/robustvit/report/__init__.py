"""Reports: side-by-side Markdown and HTML (plots embedded as PNG) for one or more results.json files.

Suites with a dedicated view register a section renderer (``register_section``); every other suite is
shown as a table of its scalar metrics.
"""

from robustvit.report.builder import Figure, Section, load_results, register_section, write_report

__all__ = ["Figure", "Section", "load_results", "register_section", "write_report"]
