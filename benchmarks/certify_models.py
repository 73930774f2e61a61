"""The *Certification* section of ``docs/models.md``: for one tiny configuration of every timm architecture family,
how ``certify_patch`` feeds it ablated images — run, not predicted.

    PYTHONPATH=src python benchmarks/certify_models.py --out docs/models.md [--only vit,resnet]

For each family of ``tests/conformance/families.py`` (the same tiny seeded models as the rest of docs/models.md):

* *ablated tokens*: what :class:`robustvit.certify.AblatedModel` chooses with ``tokens=auto`` — ``drop`` (Salman et
  al.'s token dropping: the ViT probe re-runs the kept tokens) or ``zero_fill`` (the reason in one line) — and the
  votes of 2 random images over 4 column positions computed that way (✓ ran with finite logits, ! failed);
* *6-channel input*: the family built with ``in_chans=6`` and certified with ``encoding=levine_feizi`` (Levine &
  Feizi's x and 1 − x channels, 0 where ablated): ✓ ran, ✗ the architecture refuses ``in_chans=6`` (the reason),
  ! another error.

``benchmarks/model_capabilities.py`` writes the same section when it regenerates the whole file; this script
replaces only that section. CPU only; about a minute on one core.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

from families import FAMILIES, Family, _tame_head, build, perturb  # noqa: E402

from robustvit.certify import Ablation, AblatedModel, ablation_counts  # noqa: E402
from robustvit.errors import RobustvitError  # noqa: E402

TITLE = "## Certification (`certify_patch`)"
BEFORE = "## Checkpoints and fine-tuning adaptations"
COMMAND = "PYTHONPATH=src python benchmarks/certify_models.py --out docs/models.md"


def _votes(model: Any, tokens: str, encoding: str) -> AblatedModel:
    """Build the ablated model and count 2 images' votes over 4 column positions (raises on any failure)."""
    ablated = AblatedModel(model, tokens, encoding)
    side = int(model.spec.image_size)
    band = Ablation("column", max(1, side // 4), stride=side // 4)
    x = torch.rand(2, 3, side, side, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        counts = ablation_counts(ablated, x, band, model.spec.num_classes)
    if counts.sum().item() != 2 * len(band.positions(side, side)):
        raise RuntimeError(f"{counts.sum().item()} votes for 2 images × 4 positions")
    return ablated


def build6(fam: Family, seed: int = 0) -> Any:
    """The family's tiny model built with ``in_chans=6``, perturbed as :func:`families.build` does; BatchNorm
    statistics from one training-mode pass over 8 seeded standard-normal 6-channel inputs."""
    from robustvit.models import create_model

    torch.manual_seed(seed)
    model = create_model(fam.model, **{**fam.build_kwargs, "in_chans": 6})
    if not fam.pass_img_size:
        model.spec.input_size = (3, fam.img_size, fam.img_size)
    perturb(model.net, seed)
    bns = [m for m in model.net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
        model.net.train()
        with torch.no_grad():
            model.net(torch.randn(8, 6, fam.img_size, fam.img_size, generator=torch.Generator().manual_seed(1)))
    _tame_head(model, seed)
    return model.eval()


def certify_row(fam: Family) -> dict[str, Any]:
    """{"tokens": {"status", "mode", "reason"}, "six": {"status", "reason"}} for one family."""
    row: dict[str, Any] = {}
    try:
        ablated = _votes(build(fam), "auto", "rgb")
        row["tokens"] = {"status": "ok", "mode": ablated.mode, "reason": ablated.note}
    except Exception as e:  # noqa: BLE001  (reported, not fatal)
        row["tokens"] = {"status": "failed", "mode": None, "reason": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    try:
        model = build6(fam)
    except (RobustvitError, TypeError, RuntimeError, ValueError, AssertionError) as e:
        row["six"] = {"status": "refused", "reason": str(e).splitlines()[0] if str(e) else type(e).__name__}
        return row
    try:
        _votes(model, "auto", "levine_feizi")
        row["six"] = {"status": "ok", "reason": None}
    except Exception as e:  # noqa: BLE001
        row["six"] = {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    return row


def collect(only: list[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    for fam in FAMILIES:
        if only and fam.key not in only:
            continue
        t0 = time.time()
        rows.append({"key": fam.key, **certify_row(fam)})
        r = rows[-1]
        print(f"{fam.key:16s} {time.time() - t0:5.1f}s tokens={r['tokens']['mode'] or r['tokens']['status']} "
              f"6ch={r['six']['status']}", flush=True)
    return rows


def _mark(status: str) -> str:
    return {"ok": "✓", "refused": "✗", "failed": "!"}[status]


def render(rows: list[dict[str, Any]]) -> list[str]:
    """The section's lines (title first, a blank line last)."""
    lines = [TITLE, "",
             "How `certify_patch` (derandomized smoothing, [certified.md](certified.md)) feeds each family ablated "
             "images, run on 2 random images over 4 column positions. *ablated tokens*: `drop` — the tokens without a "
             "retained pixel are dropped and the ViT probe re-runs the rest (Salman et al.) —, or `zero_fill` — the "
             "model sees the image with 0 where ablated (the reason below). *6-channel input*: the family built with "
             "`in_chans=6` and certified with `encoding=levine_feizi` (Levine & Feizi's x and 1 − x channels, 0 where "
             "ablated; train it with `--model-kwargs '{\"in_chans\": 6}' --loss ablation`; its ablated tokens are zero-filled, "
             "never dropped). "
             f"Regenerate this section alone with `{COMMAND}`.", "",
             "| family | ablated tokens | 6-channel input |", "|---|---|---|"]
    for r in rows:
        t = r["tokens"]
        tok = t["mode"] if t["status"] == "ok" else "!"
        lines.append(f"| {r['key']} | {tok} | {_mark(r['six']['status'])} |")
    reasons: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r["tokens"]["reason"]:
            what = "zero_fill" if r["tokens"]["status"] == "ok" else "ablated tokens failed"
            why = re.sub(r"^ablated pixels zero-filled: \S+ ", "the network ", r["tokens"]["reason"])
            reasons.setdefault((what, _generic(why)), []).append(r["key"])
        if r["six"]["reason"]:
            what = "6-channel input refused" if r["six"]["status"] == "refused" else "6-channel input failed"
            reasons.setdefault((what, _generic(r["six"]["reason"])), []).append(r["key"])
    n = {s: sum(1 for r in rows if r["tokens"]["mode"] == s) for s in ("drop", "zero_fill")}
    six = sum(1 for r in rows if r["six"]["status"] == "ok")
    lines += ["", f"{len(rows)} families: {n['drop']} drop tokens, {n['zero_fill']} zero-fill; {six} take the "
              "6-channel input.", ""]
    lines += [f"- **{what}** — {why} — *{', '.join(keys)}*" for (what, why), keys in sorted(reasons.items())]
    return lines + [""]


def _generic(reason: str) -> str:
    """A reason without its memory addresses or long argument lists (families share one line)."""
    return re.sub(r" at 0x[0-9a-f]+", "", reason)[:300]


def replace_section(text: str, section: list[str]) -> str:
    """``text`` (docs/models.md) with the certification section replaced, or inserted before the checkpoints one."""
    body = "\n".join(section)
    if TITLE in text:
        start = text.index(TITLE)
        nxt = text.find("\n## ", start + len(TITLE))
        return text[:start] + body + ("\n" + text[nxt + 1:] if nxt >= 0 else "")
    if BEFORE in text:
        at = text.index(BEFORE)
        return text[:at] + body + "\n" + text[at:]
    return text.rstrip("\n") + "\n\n" + body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/models.md")
    ap.add_argument("--only", help="comma-separated family keys (default: all)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = collect(a.only.split(",") if a.only else None)
    out = Path(a.out)
    out.write_text(replace_section(out.read_text() if out.exists() else "", render(rows)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
