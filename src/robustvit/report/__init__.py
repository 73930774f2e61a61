"""Reports: the scorecard, then clean → natural shift → adversarial → inside the models → training, as
Markdown and a self-contained HTML page (plots embedded as PNG), from run folders (``results.json``; JSON only,
no analysis module imported). Suites with a dedicated view register a section renderer (``register_section``);
every other suite is a table of its scalar metrics; analyses and training runs are drawn generically.
"""

from robustvit.report.builder import (GROUPS, SECTIONS, Figure, Section, build_sections, load_results,
                                      register_section, write_report)
from robustvit.report.load import load_run, load_runs, merge_by_model

__all__ = ["GROUPS", "SECTIONS", "Figure", "Section", "build_sections", "load_results", "load_run", "load_runs",
           "merge_by_model", "register_section", "write_report"]
