"""Report sections of the adversarial suites: accuracy-vs-ε curves (``fgsm*``/``pgd*``, one section for the
family), example perturbations of the models side by side (Bhojanapalli et al. 2021, Figure 5), AutoAttack's
per-attack table, the spatial and Patch-Fool tables and the transfer matrix; raised gradient-masking flags
are listed under each table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from robustvit.attacks.base import ATTACKS
from robustvit.plotting import place_legend
from robustvit.report.headline import protocol_notes
from robustvit.report.section import Figure, Section, key_stem, md_table, register_section

GROUP = "adversarial"

CURVE_FAMILIES = ("fgsm", "pgd")


def _family(key: str) -> str:
    return key.split(":", 1)[0]


def _flag_lines(key: str, results: list[dict[str, Any]]) -> list[str]:
    """The raised gradient-masking flags, and what the checks cost and left out (``checks_cost``)."""
    lines = []
    for r in results:
        res = r["suites"].get(key, {})
        for name, f in (res.get("flags") or {}).items():
            if f.get("flag"):
                lines.append(f"⚠ {r['model']['name']} · `{key}` · {name}: {f.get('message', '')}")
        if res.get("checks_cost"):
            lines.append(f"{r['model']['name']} · `{key}` · {checks_text(res['checks_cost'])}.")
    return lines


def checks_text(cost: dict[str, Any]) -> str:
    """One line on a suite's gradient-masking checks (results.json ``checks_cost``): images, share of the attack's
    time, and the checks ``checks=auto`` left out."""
    frac = cost.get("fraction_of_attack")
    return (f"gradient-masking checks ({cost['mode']}): {cost.get('gradient_images', cost['images'])} images"
            + (f", {100 * frac:.0f} % of the attack's time" if frac is not None else "")
            + (f"; not run: {', '.join(cost['not_run'])} ({cost['why']})" if cost.get("not_run") else ""))


def _eps_label(eps: float | None) -> str:
    """ε in grey levels (``4/255``) when it is a whole number of them or small, else as a number."""
    if eps is None:
        return "–"
    grey = eps * 255
    return f"{grey:.3g}/255" if abs(grey - round(grey)) < 1e-6 or grey < 64 else f"{eps:.4g}"


@register_section("fgsm*", order=10)
@register_section("pgd*", order=10)
def curve_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    keys = [k for k in dict.fromkeys(k for r in results for k in r["suites"]) if _family(k) in CURVE_FAMILIES]
    if key != keys[0]:
        return None                                  # the whole family is rendered once
    names = [r["model"]["name"] for r in results]
    rows, notes = [], []
    for k in keys:
        s = next(r["suites"][k] for r in results if k in r["suites"])
        rows.append([f"`{k}`", _eps_label(s.get("eps")), s.get("norm"), s.get("steps", 1)]
                    + [r["suites"].get(k, {}).get("accuracy") for r in results])
        notes += _flag_lines(k, results)
    md = md_table(["suite", "ε", "norm", "steps"] + names, rows)
    md += "\n\nRobust accuracy (correct before and after the attack). " + " ".join(notes)
    figures = [f for f in (_curve(keys, results), _examples(keys, results)) if f is not None]
    return Section("Adversarial robustness: FGSM / PGD", md, figures)


def _curve(keys: list[str], results: list[dict[str, Any]]) -> Figure:
    """Robust accuracy against the L∞ ε per model and family (ε = 0: clean)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for i, r in enumerate(results):
        for fam, style in zip(CURVE_FAMILIES, ("--", "-")):
            pts = sorted((r["suites"][k]["eps"], r["suites"][k]["accuracy"]) for k in keys
                         if _family(k) == fam and k in r["suites"] and r["suites"][k].get("norm") == "linf")
            if not pts:
                continue
            clean = r["suites"][next(k for k in keys if _family(k) == fam and k in r["suites"])]["clean_accuracy"]
            xs, ys = [0.0] + [p[0] * 255 for p in pts], [clean] + [p[1] for p in pts]
            ax.plot(xs, ys, style, marker="o", color=f"C{i}", label=f"{r['model']['name']} · {fam}")
    ax.set_xlabel("L∞ ε (grey levels, /255)"), ax.set_ylabel("robust accuracy"), ax.set_ylim(0, 1)
    ax.set_title("Accuracy under attack vs ε")
    place_legend(ax, outside=True, frameon=False, fontsize=7)
    fig.tight_layout()
    return Figure("adversarial_accuracy_vs_eps", fig, "robust accuracy against the L∞ budget (0 = clean)")


def _examples(keys: list[str], results: list[dict[str, Any]], n: int = 4) -> Figure | None:
    """Clean image, adversarial example and perturbation per model, for the saved key with the largest ε."""
    saved = [k for k in keys if all(r["suites"].get(k, {}).get("saved") for r in results)]
    if not saved:
        return None
    key = max(saved, key=lambda k: results[0]["suites"][k].get("eps") or 0)
    from PIL import Image

    rows = []
    for r in results:
        folder = Path(r.get("_dir", ".")) / r["suites"][key]["saved"]["dir"]
        stems = sorted({p.name.rsplit("_", 1)[0] for p in folder.glob("*_adv.png")})[:n]
        rows.append((r["model"]["name"], folder, stems))
    cols = max(len(s) for _, _, s in rows)
    if cols == 0:
        return None
    fig, axes = plt.subplots(len(rows), 3 * cols, figsize=(1.3 * 3 * cols, 1.5 * len(rows)), squeeze=False)
    for i, (name, folder, stems) in enumerate(rows):
        for j in range(cols):
            for t, tag in enumerate(("clean", "adv", "delta")):
                ax = axes[i][3 * j + t]
                ax.axis("off")
                if j < len(stems):
                    ax.imshow(Image.open(folder / f"{stems[j]}_{tag}.png"))
                if i == 0:
                    ax.set_title(tag, fontsize=7)
        axes[i][0].text(-0.1, 0.5, name, transform=axes[i][0].transAxes, ha="right", va="center", fontsize=7)
    fig.suptitle(f"{key}: clean, adversarial, perturbation (δ+ε)/2ε", fontsize=8)
    fig.tight_layout()
    return Figure("adversarial_examples", fig, f"examples from {key}, models side by side")


def _per_attack(result: dict[str, Any]) -> dict[str, Any]:
    """AutoAttack's accuracy after each member, by the member's registered name (an alias read as its name)."""
    return {ATTACKS.canonical(name): v for name, v in (result.get("per_attack") or {}).items()}


@register_section("apgd*", order=20)
@register_section("autoattack*", order=20)
@register_section("spatial*", order=30)
@register_section("patch_fool*", order=30)
def attack_table_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    present = [r for r in results if key in r["suites"]]
    if not present:
        return None
    first = present[0]["suites"][key]
    rows = [["clean accuracy"] + [r["suites"][key].get("clean_accuracy") for r in present],
            ["robust accuracy"] + [r["suites"][key].get("accuracy") for r in present]]
    members = [_per_attack(r["suites"][key]) for r in present]
    rows += [[f"after {member}"] + [m.get(member) for m in members] for member in members[0]]
    if "transforms_per_s" in first:
        rows.append(["transforms_per_s"] + [r["suites"][key].get("transforms_per_s") for r in present])
    md = md_table(["metric"] + [r["model"]["name"] for r in present], rows)
    settings = {k: v for k, v in first.items() if k in ("attack", "eps", "eps_source", "norm", "steps", "version",
                                                         "attacks", "n_queries", "grid", "max_translation",
                                                         "translation_convention", "max_rotation", "num_patches",
                                                         "scoring", "overrides")}
    md += "\n\nSettings: " + ", ".join(f"{k} = {_eps_label(v) if k == 'eps' else v}" for k, v in settings.items())
    lines = protocol_notes(key, present)
    if lines:
        md += "\n\n" + " ".join(lines)
    md += "".join(f"\n\n{r['model']['name']}: skipped — {r['suites'][key]['skipped']}"
                  for r in present if r["suites"][key].get("skipped"))
    flags = _flag_lines(key, results)
    if flags:
        md += "\n\n" + " ".join(flags)
    return Section(f"Adversarial robustness: `{key}`", md)


@register_section("transfer*", order=40)
def transfer_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    present = [r for r in results if key in r["suites"]]
    if not present:
        return None
    targets = [r["model"]["name"] for r in present]
    sources = list(dict.fromkeys(s for r in present for s in r["suites"][key].get("accuracy", {})))
    sources = [t for t in targets if t in sources] + [s for s in sources if s not in targets]   # diagonal = white-box
    rows = [[f"crafted on {s}"] + [r["suites"][key]["accuracy"].get(s) for r in present] for s in sources]
    rows.append(["clean"] + [r["suites"][key].get("clean_accuracy") for r in present])
    s0 = present[0]["suites"][key]
    md = md_table(["source \\ target"] + targets, rows)
    md += (f"\n\nAccuracy of each target model (columns) on adversarial examples crafted on each source model "
           f"(rows) with {s0.get('attack')} at ε = {_eps_label(s0.get('eps'))} (Bhojanapalli et al. 2021, "
           "Tables 4–5); the diagonal is the white-box accuracy.")
    return Section(f"Transfer attacks: `{key}`", md, [_transfer_heatmap(key, sources, targets, present)])


def _transfer_heatmap(key: str, sources: list[str], targets: list[str], present: list[dict[str, Any]]) -> Figure:
    """The transfer matrix as a heat map: rows the source model, columns the target, accuracy in each cell."""
    import numpy as np

    m = np.array([[r["suites"][key]["accuracy"].get(s, np.nan) for r in present] for s in sources], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(targets), 1.2 + 0.6 * len(sources)))
    im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(sources)), sources, fontsize=8)
    ax.set_xlabel("target model"), ax.set_ylabel("source model")
    for i in range(len(sources)):
        for j in range(len(targets)):
            if not np.isnan(m[i, j]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < 0.5 else "black")
    fig.colorbar(im, ax=ax, label="accuracy", fraction=0.05)
    ax.set_title("Transfer attack accuracy", fontsize=9)
    fig.tight_layout()
    stem = key_stem(key, "transfer").replace("transfer", "transfer_matrix", 1)
    return Figure(stem, fig, "accuracy of each target model on adversarial examples crafted on each source model "
                  f"({key})")
