"""The little Markdown the sections write (tables, paragraphs, ``code``, **bold**, *emphasis*) as HTML, and
the page around it. Everything is escaped first; no Markdown syntax reaches the HTML."""

from __future__ import annotations

import html
import re

from robustvit.report.verdict import BEST

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EM = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")

STYLE = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:1.2em auto;padding:0 1em;"
    "color:#222;line-height:1.45}h1{font-size:1.5em;margin:.2em 0 .4em}"
    "h2{border-bottom:2px solid #ddd;margin-top:2em;padding-bottom:.2em}h3{margin-top:1.5em}"
    "table{border-collapse:collapse;margin:.6em 0 1em;font-size:.92em}"
    "td,th{border:1px solid #ccc;padding:.25em .55em;text-align:right}th{background:#f3f3f3}"
    "td:first-child,th:first-child,td.text,th.text{text-align:left}.scroll{overflow-x:auto}"
    "img{max-width:100%;height:auto}figure{margin:1em 0}figcaption{color:#555;font-size:.9em}"
    ".note{color:#555;font-size:.92em}code{background:#f3f3f3;padding:0 .2em}#scorecard{font-size:.95em}"
    "#scorecard td.labels{text-align:left;color:#8a4b00;font-size:.88em}nav{margin:.4em 0 1em;font-size:.95em}"
    "nav a{margin-right:1em}details{margin:.4em 0}summary{cursor:pointer;color:#444}.warn{color:#8a4b00}"
    "td.best{background:#e6f4ea;font-weight:600}.gap,.facts{color:#666;font-size:.86em;font-weight:normal}"
    ".facts{display:block}#scorecard-title+p{font-size:1.1em;margin:.5em 0}"
)


def inline(text: str) -> str:
    """One line of Markdown as escaped HTML: `code` spans, **bold** and *emphasis*."""
    parts = html.escape(text, quote=False).split("`")
    out = [f"<code>{p}</code>" if i % 2 else _EM.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", p))
           for i, p in enumerate(parts)]
    if len(parts) % 2 == 0:                       # an unpaired backtick: keep it as text
        out[-1] = "`" + out[-1].removeprefix("<code>").removesuffix("</code>")
    return "".join(out)


def markdown(md: str, table_id: str | None = None) -> str:
    """Tables (``| a | b |`` with a ``|---|`` rule) and paragraphs as HTML."""
    out: list[str] = []
    rows: list[list[str]] = []
    para: list[str] = []

    def flush_para() -> None:
        if para:
            out.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()

    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            flush_para()
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if not all(c and set(c) <= set("-: ") for c in cells):
                rows.append([c.replace("\\|", "|") for c in cells])
            continue
        if rows:
            head, *rest = rows
            tid = f" id='{table_id}'" if table_id and not any("<table id=" in o for o in out) else ""
            text_cols = {j for j in range(len(head)) if rest and all(not _numeric(r[j]) for r in rest if j < len(r))}
            th = "".join(f"<th class='text'>{inline(c)}</th>" if j in text_cols else f"<th>{inline(c)}</th>"
                         for j, c in enumerate(head))
            out.append(f"<div class='scroll'><table{tid}><thead><tr>{th}</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(_labels_td(c) if tid and head[j] == "labels" else _td(c)
                                                  for j, c in enumerate(r)) + "</tr>" for r in rest)
                       + "</tbody></table></div>")
            rows = []
        if line.strip():
            para.append(line.strip())
        else:
            flush_para()
    return "\n".join(out)


def _numeric(cell: str) -> bool:
    """Whether a table cell holds a number (with its facts, bold and ``BEST``), else text."""
    cell = cell.replace("**", "").replace(BEST, "").replace("  ", " ")
    number = r"[–\-+]?[\d.,]*\d[\d.,]*( ?[%MkG])?( ± [\d.]+)?( \(.*\)| \[.*\])*|–|"
    return re.fullmatch(number, cell.strip()) is not None


#: A number's facts after it: the gap to clean ``(−38.1)``, the interval ``[35.0, 47.6]``, the images ``(n=200)``.
_FACTS = re.compile(r"(?P<gap> \([−+][\d.]+\))?(?P<ci>(?: \[[\d., ]+\])?(?: \(n=\d+\))?)(?= \(ε=|$)")


def _td(cell: str) -> str:
    """A cell: text left-aligned; the column's best (``BEST``) with class ``best``; a number's gap to clean smaller
    beside it (``span.gap``), its interval and count on a line below (``span.facts``)."""
    if not _numeric(cell):
        return f"<td class='text'>{inline(cell)}</td>"
    m = _FACTS.search(cell)
    body = inline(cell)
    if m and m.group(0):
        gap = f"<span class='gap'>{inline(m.group('gap'))}</span>" if m.group("gap") else ""
        ci = f"<span class='facts'>{inline(m.group('ci'))}</span>" if m.group("ci") else ""
        body = inline(cell[:m.start()]) + gap + ci + inline(cell[m.end():])
    if BEST in cell:
        return f"<td class='best' title='best of this column'>{body}</td>"
    return f"<td>{body}</td>"


def _labels_td(cell: str) -> str:
    """The scorecard's labels folded: how many deviations (and whether attacks ran on different images)."""
    parts = [p for p in cell.split("; ") if p]
    if not parts or cell in ("comparable", "–"):
        return f"<td class='labels'>{inline(cell)}</td>"
    split = any(p.startswith("attacks on different images") for p in parts)
    summary = (f"{len(parts)} deviation{'s' if len(parts) > 1 else ''}"
               + ("; attacks on different images" if split else ""))
    return f"<td class='labels'><details><summary>{inline(summary)}</summary>{inline(cell)}</details></td>"


def page(title: str, body: list[str]) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
            f"content='width=device-width,initial-scale=1'><title>{html.escape(title)}</title><style>{STYLE}</style>"
            f"</head><body>{''.join(body)}</body></html>")
