"""Fidelity of robustvit's corruptions against the reference package ``imagecorruptions`` 1.1.2.

Real photos: scikit-image's bundled sample photos (astronaut, coffee, chelsea, rocket, …) and matplotlib's
grace_hopper (Resize 256 + CenterCrop 224, as ImageNet-C), and CIFAR-10 test images (32 px) taken from a
CIFAR-10 JPEG tarball extracted to a temporary folder. imagecorruptions always applies its ImageNet
parameters; robustvit is therefore run with ``preset="imagenet", size_scaling=False`` here, i.e. the same
parameters at both sizes.

Rows are the reference's corruptions. ``frost`` uses the reference's own frost photographs (robustvit is pointed
at them with ``ROBUSTVIT_FROST_DIR``); ``frost@procedural`` is robustvit's procedural texture against the same
reference. ``elastic_transform`` is imagecorruptions' elastic transform, compared with robustvit's
``elastic_transform@imagecorruptions``; ``elastic_transform@imagenet-c`` is the ImageNet-C script's (the helper's
re-implementation), compared with robustvit's default ``elastic_transform``.

- deterministic corruptions: mean absolute difference (MAD) in grey levels after converting robustvit's output
  to uint8 the way the reference does (truncation; rounding for pixelate, whose reference goes through PIL).
  Target ≤ 1 grey level at 224 px.
- random corruptions: mean and standard deviation of |corrupted − clean| (grey levels) over all pixels,
  images and repeats, for both; relative differences. Target: both within 10 %. Each row also records the
  range of both statistics over the draws (``ours_mean_draws``, ``ref_mean_draws``, ``ours_std_draws``,
  ``ref_std_draws``: one draw = every image once) and ``in_ref_spread``: whether ours lie inside the
  reference's own range; ``--spread`` prints them per severity.
- ``--replay``: frost and spatter on the *same* draws (the reference's frost photo and crop position, its
  spatter liquid field, recorded by ``_ref_corruptions.py replay`` and fed to robustvit): MAD in grey levels
  and the share of values that differ — implementation differences without the draw-to-draw noise.

The reference runs in its own (old-library) environment, in a subprocess; make it outside the repository:

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy==1.26.0 scikit-image==0.20.0 "setuptools<80" imagecorruptions

Usage (from the repository root):

    python benchmarks/corruption_fidelity.py --ref-python /tmp/ref/bin/python \\
        --cifar PATH/cifar10-jpg.tar.gz --out /tmp/fidelity.json [--grid docs/img/corruptions_grid.png]
    python benchmarks/corruption_fidelity.py --ref-python /tmp/ref/bin/python --names frost,spatter \\
        --repeats 16 --replay --spread --out /tmp/fidelity_frost_spatter.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robustvit.corruptions import corrupt, is_random, list_corruptions, to_uint8

HERE = Path(__file__).resolve().parent
REF = HERE / "_ref_corruptions.py"
ROUNDED = {"pixelate"}
ELASTIC_IC = "elastic_transform@imagenet-c"
FROST_PROCEDURAL = "frost@procedural"
#: reference row → (robustvit corruption, frost source); rows not listed use the same name and the photos
OURS = {"elastic_transform": ("elastic_transform@imagecorruptions", None), ELASTIC_IC: ("elastic_transform", None),
        FROST_PROCEDURAL: ("frost", "procedural")}


def ref_call(py: str, *args: str) -> str:
    res = subprocess.run([py, str(REF), *args], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"reference helper failed: {res.stderr.strip()[-2000:]}")
    return res.stdout


def cifar_images(tarball: Path, per_class: int = 4) -> np.ndarray:
    """The first ``per_class`` test images of each class, read from the tarball (extracted to a temp dir)."""
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tarball) as tf:
        picked: dict[str, list[tarfile.TarInfo]] = {}
        for m in tf:
            parts = Path(m.name).parts
            if m.isfile() and len(parts) >= 3 and parts[-3] == "test" and m.name.endswith(".jpg"):
                lst = picked.setdefault(parts[-2], [])
                if len(lst) < per_class:
                    lst.append(m)
                    tf.extract(m, tmp)
        files = sorted(Path(tmp) / m.name for lst in picked.values() for m in lst)
        return np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])


def ours(imgs: np.ndarray, row: str, severity: int, repeats: int, seed: int, frost_dir: str) -> np.ndarray:
    name, frost = OURS.get(row, (row, None))
    os.environ["ROBUSTVIT_FROST_DIR"] = frost or frost_dir
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 255
    rounding = "round" if name in ROUNDED else "floor"
    outs = []
    for r in range(repeats):
        y = corrupt(x, name, severity, seed=seed + r, preset="imagenet", size_scaling=False)
        outs.append(to_uint8(y, rounding).permute(0, 2, 3, 1).numpy())
    return np.stack(outs)


def matplotlib_photos(size: int = 224) -> list[np.ndarray]:
    """matplotlib's sample photo grace_hopper, Resize 256 + CenterCrop 224 as the helper's photos."""
    from matplotlib import cbook
    from PIL import Image

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        pil = Image.open(f).convert("RGB")
    s = 256 * size // 224
    w, h = pil.size
    pil = pil.resize((round(w * s / min(w, h)), round(h * s / min(w, h))), Image.BILINEAR)
    w, h = pil.size
    left, top = (w - size) // 2, (h - size) // 2
    return [np.asarray(pil.crop((left, top, left + size, top + size)))]


def compare(clean: np.ndarray, mine: np.ndarray, ref: np.ndarray, random: bool) -> dict:
    """Mean and std of |Δ| over everything for both; for random corruptions also the range of each over the
    draws (one draw = every image once), and whether ours lie inside the reference's own range."""
    c = clean.astype(np.float64)[None]
    dm, dr = np.abs(mine - c), np.abs(ref - c)
    row = {"ours_mean": dm.mean(), "ref_mean": dr.mean(), "ours_std": dm.std(), "ref_std": dr.std()}
    row["rel_mean"] = row["ours_mean"] / max(row["ref_mean"], 1e-9) - 1
    row["rel_std"] = row["ours_std"] / max(row["ref_std"], 1e-9) - 1
    if not random:
        row["mad"] = np.abs(mine.astype(np.float64) - ref).mean()
        return {k: float(v) for k, v in row.items()}
    out: dict = {k: float(v) for k, v in row.items()}
    for who, d in (("ours", dm), ("ref", dr)):
        flat = d.reshape(len(d), -1)
        for stat, values in (("mean", flat.mean(1)), ("std", flat.std(1))):
            out[f"{who}_{stat}_draws"] = [float(values.min()), float(values.max())]
    out["in_ref_spread"] = bool(all(out[f"ref_{k}_draws"][0] <= out[f"ours_{k}"] <= out[f"ref_{k}_draws"][1]
                                    for k in ("mean", "std")))
    return out


def replay_ours(imgs: np.ndarray, name: str, severity: int, draws: np.ndarray, frost_dir: str) -> np.ndarray:
    """robustvit's frost/spatter on the reference's own draws (``_ref_corruptions.py replay``), uint8
    (R·N, H, W, 3)."""
    from robustvit.corruptions import CORRUPTIONS, corruption_params
    from robustvit.corruptions.frost import photo_crops

    reps = len(draws) // len(imgs)
    x = torch.from_numpy(np.concatenate([imgs] * reps)).permute(0, 3, 1, 2).float() / 255
    n, _, h, w = x.shape
    p = corruption_params(name, severity, "imagenet")
    if name == "frost":
        draw = {"texture": photo_crops(Path(frost_dir), torch.from_numpy(draws[:, 0]), torch.from_numpy(draws[:, 1:]),
                                       h, w, scale=p.crystal_size, zoom=p.photo_zoom)}
    else:
        draw = {"liquid": torch.from_numpy(draws).float()[:, None]}
    y = CORRUPTIONS.get(name).apply(x, p, draw)
    return to_uint8(y, "floor").permute(0, 2, 3, 1).numpy()


def run_replay(label: str, imgs: np.ndarray, names: list[str], py: str, repeats: int, seed: int, tmp: Path,
               frost_dir: str) -> list[dict]:
    """Same draws on both sides: the reference's frost crops / spatter liquid fields fed to robustvit."""
    np.save(tmp / f"{label}.npy", imgs)
    ref_call(py, "replay", "--images", str(tmp / f"{label}.npy"), "--names", ",".join(names), "--repeats",
             str(repeats), "--seed", str(seed), "--out", str(tmp / "replay.npz"))
    ref = np.load(tmp / "replay.npz")
    rows = []
    for name in names:
        for sev in range(1, 6):
            r = ref[f"{name}/{sev}"].astype(np.float64)
            mine = replay_ours(imgs, name, sev, ref[f"{name}/{sev}/draw"], frost_dir).astype(np.float64)
            clean = np.concatenate([imgs] * (len(r) // len(imgs))).astype(np.float64)
            diff = np.abs(mine - r)
            rows.append({"set": f"{label}-replay", "name": name, "severity": sev, "n": int(len(r)),
                         "mad": float(diff.mean()), "max_diff": float(diff.max()),
                         "frac_diff": float((diff > 0).mean()),
                         "ours_mean": float(np.abs(mine - clean).mean()), "ref_mean": float(np.abs(r - clean).mean())})
    return rows


def run_set(label: str, imgs: np.ndarray, names: list[str], py: str, repeats: int, seed: int,
            tmp: Path, frost_dir: str) -> list[dict]:
    np.save(tmp / f"{label}.npy", imgs)
    rows = []
    for name in names:
        ref_name = "frost" if name == FROST_PROCEDURAL else name
        random = is_random(OURS.get(name, (name, None))[0])
        reps = 1 if not random else (1 if name == "glass_blur" and label == "224" else repeats)
        t0 = time.perf_counter()
        ref_call(py, "corrupt", "--images", str(tmp / f"{label}.npy"), "--names", ref_name, "--repeats", str(reps),
                 "--seed", str(seed), "--out", str(tmp / "ref.npz"))
        ref = np.load(tmp / "ref.npz")
        for sev in range(1, 6):
            mine = ours(imgs, name, sev, reps, seed, frost_dir)
            row = compare(imgs, mine, ref[f"{ref_name}/{sev}"].astype(np.float64), random)
            row.update(set=label, name=name, severity=sev, random=random, n=int(len(imgs) * reps))
            rows.append(row)
        print(f"[{label}] {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    return rows


def verdict(row: dict) -> bool:
    if not row["random"]:
        return row["mad"] <= 1.0
    return abs(row["rel_mean"]) <= 0.10 and abs(row["rel_std"]) <= 0.10


def markdown(rows: list[dict], label: str) -> str:
    if label.endswith("-replay"):
        return markdown_replay(rows, label)
    lines = ["| corruption | kind | s1 | s2 | s3 | s4 | s5 | within target | within ref draws |",
             "|---|---|---|---|---|---|---|---|---|"]
    names = list(dict.fromkeys(r["name"] for r in rows if r["set"] == label))
    for name in names:
        rs = [r for r in rows if r["set"] == label and r["name"] == name]
        if rs[0]["random"]:
            cells = [f"{100 * r['rel_mean']:+.0f}% / {100 * r['rel_std']:+.0f}%" for r in rs]
            kind = "random: Δmean / Δstd"
            spread = f"{sum(r['in_ref_spread'] for r in rs)}/5"
        else:
            cells = [f"{r['mad']:.2f}" for r in rs]
            kind = "MAD (grey levels)"
            spread = "–"
        ok = sum(verdict(r) for r in rs)
        lines.append(f"| {name} | {kind} | " + " | ".join(cells) + f" | {ok}/5 | {spread} |")
    return "\n".join(lines)


def markdown_replay(rows: list[dict], label: str) -> str:
    """Same-draw table: MAD in grey levels (share of values that differ at all) per severity."""
    lines = ["| corruption (same draws) | s1 | s2 | s3 | s4 | s5 |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["name"] for r in rows if r["set"] == label):
        rs = [r for r in rows if r["set"] == label and r["name"] == name]
        lines.append(f"| {name} | " + " | ".join(f"{r['mad']:.4f} ({100 * r['frac_diff']:.2f} %)" for r in rs) + " |")
    return "\n".join(lines)


def spread_table(rows: list[dict], label: str) -> str:
    """Mean and std of |Δ| per severity, ours against the reference, each with its range over the draws."""
    lines = [r"| corruption | severity | mean \|Δ\| ours [draws] | mean \|Δ\| ref [draws] | std \|Δ\| ours [draws] | "
             r"std \|Δ\| ref [draws] |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["set"] != label or not r["random"]:
            continue
        cell = {k: f"{r[f'{k}']:.2f} [{r[f'{k}_draws'][0]:.2f}–{r[f'{k}_draws'][1]:.2f}]"
                for k in ("ours_mean", "ref_mean", "ours_std", "ref_std")}
        lines.append(f"| {r['name']} | {r['severity']} | {cell['ours_mean']} | {cell['ref_mean']} | "
                     f"{cell['ours_std']} | {cell['ref_std']} |")
    return "\n".join(lines)


def grid(path: Path, size: int = 112) -> None:
    """A picture of every corruption (rows) at severities 1–5 (columns) on one photo-like image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    base = _grid_image(size)
    x = torch.from_numpy(base).permute(2, 0, 1)[None].float() / 255
    names = list_corruptions()
    fig, axes = plt.subplots(len(names), 6, figsize=(6 * 1.3, len(names) * 1.3))
    for i, name in enumerate(names):
        for j in range(6):
            ax = axes[i, j]
            img = x if j == 0 else corrupt(x, name, j, seed=0, preset="imagenet")
            ax.imshow(img[0].permute(1, 2, 0).numpy())
            ax.set_xticks([]), ax.set_yticks([])
            if i == 0:
                ax.set_title("clean" if j == 0 else f"severity {j}", fontsize=8)
            if j == 0:
                ax.set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    Image.open(path).convert("RGB").save(path, optimize=True)


def _grid_image(size: int) -> np.ndarray:
    """A synthetic scene (sky, sun, hills, a house) so the grid needs no data files."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.zeros((size, size, 3))
    img[:] = np.stack([0.45 + 0.3 * yy, 0.65 + 0.2 * yy, 0.95 - 0.1 * yy], -1)
    hill = yy > 0.62 + 0.08 * np.sin(6 * xx)
    img[hill] = np.stack([0.25 + 0.1 * xx, 0.55 - 0.1 * yy, 0.2 + 0 * xx], -1)[hill]
    sun = (yy - 0.22) ** 2 + (xx - 0.75) ** 2 < 0.01
    img[sun] = (1.0, 0.85, 0.3)
    house = (xx > 0.2) & (xx < 0.45) & (yy > 0.5) & (yy < 0.75)
    img[house] = (0.75, 0.3, 0.25)
    roof = (yy < 0.5) & (yy > 0.35) & (np.abs(xx - 0.325) < (yy - 0.35) * 1.0)
    img[roof] = (0.35, 0.2, 0.15)
    door = (xx > 0.3) & (xx < 0.36) & (yy > 0.62) & (yy < 0.75)
    img[door] = (0.2, 0.12, 0.08)
    rng = np.random.default_rng(0)
    img += rng.normal(0, 0.015, img.shape)
    return (img.clip(0, 1) * 255).astype(np.uint8)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref-python", help="python of the reference env (imagecorruptions 1.1.2)")
    p.add_argument("--cifar", type=Path, help="cifar10-jpg.tar.gz (optional: adds the 32-px table)")
    p.add_argument("--names", default=",".join(list_corruptions() + [FROST_PROCEDURAL, ELASTIC_IC]))
    p.add_argument("--repeats", type=int, default=4, help="draws per image for random corruptions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("corruption_fidelity.json"))
    p.add_argument("--grid", type=Path, help="also draw the corruption × severity grid to this PNG")
    p.add_argument("--replay", action="store_true",
                   help="also run frost and spatter on the reference's own draws (same-draw MAD table)")
    p.add_argument("--spread", action="store_true",
                   help="also print mean/std of |Δ| per severity with their ranges over the draws")
    a = p.parse_args()
    torch.set_num_threads(2)
    if a.grid:
        grid(a.grid)
        print(f"grid written to {a.grid}", file=sys.stderr)
    if not a.ref_python:
        return
    names = a.names.split(",")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        versions = json.loads(ref_call(a.ref_python, "versions"))
        ref_call(a.ref_python, "images", "--out", str(tmp / "photos.npy"))
        photos = np.concatenate([np.load(tmp / "photos.npy"), np.stack(matplotlib_photos())])
        frost_dir = versions.pop("frost_dir")
        rows += run_set("224", photos, names, a.ref_python, a.repeats, a.seed, tmp, frost_dir)
        replay = [n for n in ("frost", "spatter") if n in names] if a.replay else []
        if replay:
            rows += run_replay("224", photos, replay, a.ref_python, a.repeats, a.seed, tmp, frost_dir)
        if a.cifar:
            cifar = cifar_images(a.cifar)
            rows += run_set("32", cifar, names, a.ref_python, a.repeats, a.seed, tmp, frost_dir)
            if replay:
                rows += run_replay("32", cifar, replay, a.ref_python, a.repeats, a.seed, tmp, frost_dir)
    md = []
    for label in dict.fromkeys(r["set"] for r in rows):
        n_img = {"224": len(photos)}.get(label.split("-")[0], 40)
        size = label.split("-")[0]
        title = f"### {size} px ({n_img} images{', same draws' if label.endswith('-replay') else ''})"
        md.append(f"{title}\n\n" + markdown(rows, label))
        if a.spread and not label.endswith("-replay"):
            md.append(f"#### {size} px: |Δ| per severity and its range over the {a.repeats} draws\n\n"
                      + spread_table(rows, label))
    text = "\n\n".join(md)
    print(text)
    a.out.write_text(json.dumps({"reference": versions, "torch": torch.__version__, "rows": rows}, indent=1))
    a.out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
