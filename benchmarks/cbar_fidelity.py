"""Fidelity of robustvit's ImageNet-C̄ / CIFAR-10-C̄ corruptions against the released generation code.

The reference is ``imagenet_c_bar/corrupt.py`` of facebookresearch/augmentation-corruption (MIT), run from a
checkout given with ``--ref`` (its ``make_imagenet_c_bar.py`` applies ``build_transform(name, level,
'imagenet')`` to Resize 256 + CenterCrop 224 uint8 images; ``make_cifar10_c_bar.py`` the same at 32 px). Its
module imports scikit-image; where it is missing, its names are stubbed (none of ImageNet-C̄'s corruptions calls
them; CIFAR-10-C̄'s ``lines`` needs scikit-image, the ``bench`` extra). Its ``lines`` uses ``np.int``, which
NumPy 1.24 removed: the benchmark restores it as ``int``.

Images: matplotlib's grace_hopper photo (Resize 256 + CenterCrop 224) and CIFAR-10 test images (32 px, and
bicubically upsampled to 224) from a CIFAR-10 JPEG tarball (``--cifar``).

For every corruption, severity and preset, each of ``--repeats`` rounds seeds NumPy, lets the reference draw its
parameters (``sample_parameters``) and corrupt each image, and then:

- **replay**: the reference's draw converted to robustvit's draw (every random field the reference derives
  from its per-image ``RandomState`` seed — noise phases, ray lengths, Perlin tables, checkerboard cells — is
  recomputed from that seed) and applied by robustvit in float64; ``mad``: mean |Δ| in grey levels after
  truncating robustvit's output to uint8 as the reference does (rounding for transverse chromatic aberration,
  whose scipy ``zoom`` of uint8 channels rounds); ``p99``: the 99th percentile of |Δ|;
  ``off``: the share of values that differ by more than one grey level. This measures the implementation.
- **distribution**: the mean |corrupted − clean| (grey levels) of the reference with its own sampler and of
  robustvit with its own (``corrupt(x, name, severity, seed=round)``, float32, truncated to uint8 as the
  reference's output) on the same images; ``rel``: (ours − reference) / reference. This measures the sampling.

Usage (from the repository root; the reference from ``git clone
https://github.com/facebookresearch/augmentation-corruption``):

    python benchmarks/cbar_fidelity.py --ref PATH/augmentation-corruption/imagenet_c_bar \\
        --cifar PATH/cifar10-jpg.tar.gz --out /tmp/cbar_fidelity.json
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import time
import types
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from robustvit.corruptions import CORRUPTIONS, corrupt, list_corruptions

NAMES = list_corruptions("imagenet_c_bar") + [n for n in list_corruptions("cifar10_c_bar")
                                              if n not in list_corruptions("imagenet_c_bar")]


def load_reference(ref: Path) -> types.ModuleType:
    """Import the reference's ``corrupt`` module (stubbing scikit-image where it is missing)."""
    sys.path.insert(0, str(ref))
    try:
        import skimage  # noqa: F401
    except ImportError:
        for mod, names in (("skimage", ()), ("skimage.draw", ("line_aa",)), ("skimage.color", ("rgb2hsv", "hsv2rgb"))):
            m = types.ModuleType(mod)
            for n in names:
                setattr(m, n, lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stub")))
            sys.modules[mod] = m
        sys.modules["skimage"].draw, sys.modules["skimage"].color = sys.modules["skimage.draw"], sys.modules["skimage.color"]
    if not hasattr(np, "int"):          # the reference's ``lines`` uses np.int, gone from NumPy 1.24
        np.int = int  # type: ignore[attr-defined]
    import corrupt as ref_corrupt  # type: ignore[import-not-found]
    return ref_corrupt


def images(cifar: Path | None, n224: int, n32: int) -> dict[str, np.ndarray]:
    """uint8 (N, H, W, 3) images per preset."""
    import matplotlib.cbook as cbook
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = Image.open(f).convert("RGB")
    w, h = hopper.size
    s = 256 / min(w, h)
    hopper = hopper.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = hopper.size
    hopper = hopper.crop(((w - 224) // 2, (h - 224) // 2, (w - 224) // 2 + 224, (h - 224) // 2 + 224))
    small: list[Image.Image] = []
    if cifar is not None:
        with tarfile.open(cifar) as tar:
            members = sorted((m for m in tar.getmembers() if m.name.startswith("test/") and m.isfile()),
                             key=lambda m: m.name)[::997][:max(n32, n224)]
            small = [Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB") for m in members]
    big = [hopper] + [im.resize((224, 224), Image.BICUBIC) for im in small[:n224 - 1]]
    return {"imagenet": np.stack([np.asarray(i) for i in big]), "cifar": np.stack([np.asarray(i) for i in small[:n32]])}


def ref_levels(ref: Path) -> dict[str, dict[str, list[float]]]:
    out = {}
    for preset, csv in (("imagenet", "imagenet_c_bar.csv"), ("cifar", "cifar10_c_bar.csv")):
        rows = [line.split(",") for line in (ref / csv).read_text().split() if line]
        out[preset] = {r[0]: [float(v) for v in r[1:]] for r in rows}
    return out


def mirrored(rs: np.random.RandomState, s: int) -> np.ndarray:
    phases = rs.uniform(low=0, high=2 * np.pi, size=(s, s // 2))
    return np.concatenate((phases, phases[::-1, ::-1]), axis=1)


def to_draw(ref_corrupt: types.ModuleType, name: str, params: dict, s: int) -> dict[str, torch.Tensor]:
    """The reference's parameters of one image as robustvit's draw (N = 1)."""
    t = lambda v: torch.as_tensor(np.asarray(v, dtype=np.float64))[None]   # noqa: E731
    if name == "single_frequency_greyscale":
        return {"freq": t(params["freq"]), "phase": t(params["phase"])}
    if name == "cocentric_sine_waves":
        return {"offset": t(np.asarray(params["offset"]) / s), "freq": t(params["freq"]),
                "amplitude": t(params["amplitude"] / s), "ring_width": t(params["ring_width"] / s)}
    if name == "plasma_noise":
        return {"time": t(params["time"]), "iterations": t(params["iterations"]), "sharpness": t(params["sharpness"]),
                "scale": t(params["scale"] / s)}
    if name == "caustic_refraction":
        return {"time": t(params["time"]), "size": t(params["size"] / s)}
    if name == "ripple":
        return {"wavelengths": t(np.asarray(params["wavelengths"]) / s), "phases": t(params["phases"])}
    if name == "pinch_and_twirl":
        return {"signs": t(np.sign(params["angles"]))}
    if name == "transverse_chromatic_abberation":
        order = np.argsort(np.argsort(params["scales"]))          # each channel's rank among 1, 1 + s/2, 1 + s
        return {"order": torch.as_tensor(order, dtype=torch.long)[None]}
    if name == "circular_motion_blur":
        return {}
    if name == "lines":
        k = int(params["density"] * s)
        return {"angle": t(params["angle"]), "variation": t(params["angle_variation"]),
                "lines": t(np.random.RandomState(seed=params["seed"]).uniform(size=3 * k).reshape(k, 3))}
    rs = np.random.RandomState(seed=params["seed"]) if "seed" in params else None
    if name == "sparkles":
        lengths = np.zeros((5, 199))
        for j, rays in enumerate(params["nrays"]):
            lengths[j, :rays] = [rs.randn() for _ in range(rays)]
        return {"centers": t(np.asarray(params["centers"]) / s), "rays": t(params["nrays"]), "lengths": t(lengths)}
    if name == "inverse_sparkles":
        lengths = np.zeros(199)
        lengths[:params["rays"]] = [rs.randn() for _ in range(params["rays"])]
        return {"center": t(np.asarray(params["center"]) / s), "rays": t(params["rays"]), "lengths": t(lengths)}
    if name == "perlin_noise":
        from utils.perlin_noise import PerlinNoiseGenerator  # type: ignore[import-not-found]
        gen = PerlinNoiseGenerator(rs)
        return {"perm": torch.as_tensor(gen.p[:256].astype(np.int64))[None], "grad": t(gen.g[:256])}
    if name == "blue_noise_sample":
        return {"phases": t(mirrored(rs, s)[None])}
    if name == "brownish_noise":
        return {"phases": t(np.stack([mirrored(rs, s) for _ in range(3)]))}
    if name == "checkerboard_cutout":
        scale = params["scales"][0]
        g = int(4 * s // scale)
        cells = np.ones((int(4 * s / max(0.1 * s, 1.0)) + 1,) * 2)
        cells[:g, :g] = rs.uniform(size=(g, g))
        return {"angle": t(params["angle"]), "scale": t(scale / s), "cells": t(cells)}
    raise KeyError(name)


def to_uint8(y: torch.Tensor, rounding: bool = False) -> np.ndarray:
    """(1, 3, H, W) in [0, 1] → (H, W, 3) uint8 by truncation, as the reference's ``astype(np.uint8)`` (or by
    rounding, as scipy's ``zoom`` of a uint8 array)."""
    v = y[0].permute(1, 2, 0).double().numpy() * 255
    return (np.round(v) if rounding else np.floor(v + 1e-6)).clip(0, 255).astype(np.uint8)


def ours_distance(x: torch.Tensor, imgs: np.ndarray, name: str, severity: int, seed: int, preset: str) -> float:
    """Mean |corrupted − clean| in grey levels of robustvit's draw ``seed``, truncated to uint8 as the reference's
    output (truncation alone moves the mean by up to half a grey level)."""
    y = corrupt(x, name, severity, seed=seed, preset=preset)
    out = np.floor(y.permute(0, 2, 3, 1).double().numpy() * 255 + 1e-6).clip(0, 255)
    return float(np.abs(out - imgs.astype(np.float64)).mean())


def measure(ref_corrupt, name: str, preset: str, severity: int, level: float, imgs: np.ndarray, repeats: int) -> dict:
    s = imgs.shape[1]
    spec = CORRUPTIONS.get(name)
    p = spec.params(severity, preset, size=s)
    transform = ref_corrupt.__dict__[type_name(ref_corrupt, name)](severity=level, im_size=s)
    diffs, ref_mean, ours_mean = [], [], []
    x32 = torch.as_tensor(imgs).permute(0, 3, 1, 2).float() / 255
    for r in range(repeats):
        np.random.seed(r)
        ref_abs = []
        for img in imgs:
            params = transform.sample_parameters()
            ref = transform.transform(img.copy(), **params)
            x = torch.as_tensor(img).permute(2, 0, 1)[None].double() / 255
            ours = to_uint8(spec.apply(x, p, to_draw(ref_corrupt, name, params, s)),
                            rounding=name == "transverse_chromatic_abberation")
            diffs.append(np.abs(ours.astype(np.int16) - ref.astype(np.int16)).ravel())
            ref_abs.append(np.abs(ref.astype(np.float64) - img).mean())
        ref_mean.append(float(np.mean(ref_abs)))
        ours_mean.append(ours_distance(x32, imgs, name, severity, r, preset))
    d = np.concatenate(diffs)
    rm, om = float(np.mean(ref_mean)), float(np.mean(ours_mean))
    return {"mad": float(d.mean()), "p99": float(np.percentile(d, 99)), "off": float((d > 1).mean()),
            "ref_mean": rm, "ours_mean": om, "rel": (om - rm) / rm if rm else 0.0,
            "ref_mean_draws": [min(ref_mean), max(ref_mean)]}


def type_name(ref_corrupt, name: str) -> str:
    for k, v in vars(ref_corrupt).items():
        if isinstance(v, type) and getattr(v, "name", None) == name:
            return k
    raise KeyError(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, required=True, help="the reference's imagenet_c_bar folder")
    ap.add_argument("--cifar", type=Path, help="CIFAR-10 JPEG tarball (test/<class>/*.jpg)")
    ap.add_argument("--images", type=int, default=2, help="images at 224 px")
    ap.add_argument("--cifar-images", type=int, default=8, help="images at 32 px")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--presets", default="imagenet,cifar")
    ap.add_argument("--severities", default="1,2,3,4,5")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    ref_corrupt = load_reference(a.ref)
    levels = ref_levels(a.ref)
    imgs = images(a.cifar, a.images, a.cifar_images)
    rows = json.loads(a.out.read_text()) if a.out.exists() else {}
    for preset in a.presets.split(","):
        for name in a.names.split(","):
            level_row = levels[preset].get(name) or levels["imagenet"].get(name) or levels["cifar"][name]
            for sev in (int(v) for v in a.severities.split(",")):
                key = f"{preset}/{name}/{sev}"
                if key in rows or not len(imgs[preset]):
                    continue
                t0 = time.time()
                rows[key] = measure(ref_corrupt, name, preset, sev, level_row[sev - 1], imgs[preset], a.repeats)
                rows[key].update(images=len(imgs[preset]), repeats=a.repeats,
                                 released_level=preset == "imagenet" or name in levels["cifar"])
                a.out.write_text(json.dumps(rows, indent=1))       # written as it goes; reruns resume
                r = rows[key]
                print(f"{key:45s} mad {r['mad']:6.3f}  p99 {r['p99']:5.1f}  off {r['off']:.4f}  "
                      f"mean ours {r['ours_mean']:7.2f} ref {r['ref_mean']:7.2f} ({r['rel']:+.1%})  {time.time() - t0:.0f}s",
                      flush=True)


if __name__ == "__main__":
    main()
