"""Open a report in headless Chromium (Debian's ``chromium``) and check it from inside the page.

A copy of the page gets a small script that, once the page has loaded, records JavaScript errors, images that did
not load (``naturalWidth == 0``) and the scorecard's bounding box in the 1280×800 viewport; ``--dump-dom`` returns
the DOM with that record. Console errors Chromium logs on stderr (``CONSOLE``/``Uncaught``) count as errors too.
A screenshot of the first screen is written beside it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

VIEWPORT = (1280, 800)
_PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e)));
const __orig = console.error; console.error = (...a) => { window.__errors.push(a.join(' ')); __orig(...a); };
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const sc = document.getElementById('scorecard');
  const r = sc ? sc.getBoundingClientRect() : null;
  const out = {errors: window.__errors, images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    missing_alt: imgs.filter(i => !i.alt).length,
    scorecard: r && {top: r.top, bottom: r.bottom, left: r.left, right: r.right},
    viewport: [window.innerWidth, window.innerHeight], first_table_id: (document.querySelector('table') || {}).id || null};
  const pre = document.createElement('pre'); pre.id = '__check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def find_chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _run(binary: str, args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    w, h = VIEWPORT
    base = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--enable-logging=stderr", "--v=0", f"--window-size={w},{h}", "--virtual-time-budget=10000"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=timeout)


def check_page(html_file: Path, screenshot: Path, binary: str | None = None) -> dict[str, Any]:
    """Load ``html_file``; return the in-page record plus ``console_errors`` (from Chromium's log) and write
    ``screenshot`` (PNG of the first 1280×800)."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium not found")
    probe = html_file.with_name(html_file.stem + ".probe.html")
    text = html_file.read_text()
    probe.write_text(text.replace("<head>", "<head>" + _PROBE, 1))
    try:
        dom = _run(binary, ["--dump-dom", probe.resolve().as_uri()])
        m = re.search(r"<pre id=\"__check\">(.*?)</pre>", dom.stdout, re.S)
        if m is None:
            raise RuntimeError(f"the page did not finish loading in Chromium: {dom.stderr[-500:]}")
        record = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        record["console_errors"] = [line for line in dom.stderr.splitlines()
                                    if "CONSOLE" in line and ("error" in line.lower() or "Uncaught" in line)]
        _run(binary, [f"--screenshot={screenshot.resolve()}", html_file.resolve().as_uri()])
    finally:
        probe.unlink(missing_ok=True)
    return record
