"""Fidelity of robustvit's generated power-equalisation and false-colour images against the reference code.

The reference is ``code/image_manipulation.py`` of rgeirhos/generalisation-humans-DNNs (Geirhos et al. 2018,
arXiv:1808.08750), run from a checkout's ``code/`` folder given with ``--ref``, with the tables it ships there
(``mean_power_spectrum_grey.npy``, ``x_gamma_function.npy``). Its module imports scikit-image (``rgb2gray``,
``imread``); where scikit-image is missing, ``rgb2gray`` is its documented formula (0.2125 R + 0.7154 G + 0.0721 B
on float images) and ``imread`` is not needed.

Images: matplotlib's grace_hopper photo (Resize 256 + CenterCrop 224) and ``--images`` − 1 smooth random colour
images (28 px noise, bicubically upsampled to 224), uint8 / 255 as the reference reads them. Each image goes
through the reference's ``power_equalisation`` and ``false_colour`` and through robustvit's
``apply_condition`` (float64); printed: the largest |Δ| and the share of values that differ.

Usage (``git clone https://github.com/rgeirhos/generalisation-humans-DNNs``):

    python benchmarks/mvh_conditions_fidelity.py --ref PATH/generalisation-humans-DNNs/code --images 4
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from robustvit.data.mvh_conditions import apply_condition, load_tables


def load_reference(ref: Path) -> types.ModuleType:
    """Import the reference's ``image_manipulation`` module (scikit-image stubbed where missing)."""
    sys.path.insert(0, str(ref))
    try:
        import skimage.color  # noqa: F401
    except ImportError:
        color, io = types.ModuleType("skimage.color"), types.ModuleType("skimage.io")
        color.rgb2gray = lambda im: im[..., :3] @ np.array([0.2125, 0.7154, 0.0721])
        io.imread = None
        sk = types.ModuleType("skimage")
        sk.color, sk.io = color, io
        sys.modules.update({"skimage": sk, "skimage.color": color, "skimage.io": io})
    import image_manipulation  # type: ignore[import-not-found]
    return image_manipulation


def images(n: int) -> np.ndarray:
    """(n, 224, 224, 3) float64 in [0, 1], whole grey levels."""
    import matplotlib.cbook as cbook
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = Image.open(f).convert("RGB")
    w, h = hopper.size
    s = 256 / min(w, h)
    hopper = hopper.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = hopper.size
    out = [hopper.crop(((w - 224) // 2, (h - 224) // 2, (w - 224) // 2 + 224, (h - 224) // 2 + 224))]
    rng = np.random.default_rng(0)
    out += [Image.fromarray(rng.integers(0, 256, (28, 28, 3), dtype=np.uint8)).resize((224, 224), Image.BICUBIC)
            for _ in range(n - 1)]
    return np.stack([np.asarray(im) for im in out]) / 255.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, required=True, help="the code/ folder of generalisation-humans-DNNs")
    ap.add_argument("--images", type=int, default=4)
    args = ap.parse_args()
    ref = load_reference(args.ref)
    tables = load_tables(args.ref)
    spectrum = np.load(args.ref / "mean_power_spectrum_grey.npy")
    gamma = np.load(args.ref / "x_gamma_function.npy")
    imgs = images(args.images)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2)
    for name, cond, fn in (("power-equalisation", "pow", lambda im: ref.power_equalisation(im, spectrum)),
                           ("false-colour", "False", lambda im: ref.false_colour(im.copy(), gamma))):
        ours = apply_condition(x, name, cond, tables=tables).permute(0, 2, 3, 1).numpy()
        theirs = np.stack([fn(im) for im in imgs])
        d = np.abs(ours - theirs)
        print(f"{name}: {len(imgs)} images, largest |Δ| {d.max():.1e} ({255 * d.max():.2g} grey levels), "
              f"values differing by more than 1e-9: {(d > 1e-9).mean():.4%}")


if __name__ == "__main__":
    main()
