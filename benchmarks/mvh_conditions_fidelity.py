"""Fidelity of robustvit's generated power-equalisation, false-colour and Eidolon images against the reference code.

The reference is ``code/image_manipulation.py`` of rgeirhos/generalisation-humans-DNNs (Geirhos et al. 2018,
arXiv:1808.08750), run from a checkout's ``code/`` folder given with ``--ref``, with the tables it ships there
(``mean_power_spectrum_grey.npy``, ``x_gamma_function.npy``). Its module imports scikit-image (``rgb2gray``,
``imread``); where scikit-image is missing, ``rgb2gray`` is its documented formula (0.2125 R + 0.7154 G + 0.0721 B
on float images) and ``imread`` is not needed.

Images: matplotlib's grace_hopper photo (Resize 256 + CenterCrop 224) and ``--images`` − 1 smooth random colour
images (28 px noise, bicubically upsampled to 224), uint8 / 255 as the reference reads them. Each image goes
through the reference's ``power_equalisation`` and ``false_colour`` and through robustvit's
``apply_condition`` (float64); printed: the largest |Δ| and the share of values that differ.

Eidolon (``--eidolon``, a checkout of gestaltrevision/Eidolon): the reference's
``eidolon_partially_coherent_disarray`` (its ``wrapper.py`` on the toolbox's ``eidolon/`` package) on 256 px
greyscale images (the wrapper's picture side: no resize), at each Eidolon set's reach 1, 8 and 64. The toolbox is
Python 2; it is loaded from the checkout with the few source edits Python 3 needs (``next`` → ``__next__``, integer
``//`` in the kernel, ``list(range(…))``, ``is None``; its demo code cut). Its ``np.random.normal`` planes are
recorded and given to robustvit's :func:`~robustvit.data.mvh_conditions.eidolon` as ``draw``, so both see the same
noise; printed: the largest |Δ| and the share of pixels that differ.

Usage (``git clone https://github.com/rgeirhos/generalisation-humans-DNNs``,
``git clone https://github.com/gestaltrevision/Eidolon``):

    python benchmarks/mvh_conditions_fidelity.py --ref PATH/generalisation-humans-DNNs/code --images 4 \
        --eidolon PATH/Eidolon
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from robustvit.data.mvh_conditions import apply_condition, eidolon, load_tables


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


def load_toolbox(root: Path) -> None:
    """Register the Python 2 Eidolon toolbox (``root/eidolon/*.py``) as the package ``eidolon``, edited for
    Python 3 in memory."""
    pkg = types.ModuleType("eidolon")
    pkg.__path__ = []
    sys.modules["eidolon"] = pkg
    for name in ("scalespaces", "picture", "noise", "helpers"):
        src = (root / "eidolon" / f"{name}.py").read_text()
        src = src.split("# Program")[0]                               # the demo code (print statements)
        src = src.replace("def next(self", "def __next__(self").replace(".next()", ".__next__()")
        src = re.sub(r"range\(([^()]*)\) \+ range\(([^()]*)\)", r"list(range(\1)) + list(range(\2))", src)
        src = src.replace("h/2", "h//2").replace("w/2", "w//2").replace("== None", "is None")
        src = "from math import sqrt\n" + src
        mod = types.ModuleType(name)
        exec(compile(src, str(root / "eidolon" / f"{name}.py"), "exec"), mod.__dict__)
        sys.modules[name] = sys.modules[f"eidolon.{name}"] = mod
        setattr(pkg, name, mod)


def eidolon_fidelity(ref: types.ModuleType, grey: np.ndarray) -> None:
    """The reference and robustvit on the same images and the same recorded noise."""
    normal = np.random.normal
    for roman, coh in (("I", 1.0), ("II", 0.3), ("III", 0.0)):
        for reach in (1.0, 8.0, 64.0):
            worst, share = 0.0, []
            for im in grey:
                drawn: list[np.ndarray] = []
                np.random.normal = lambda *a, **k: drawn.append(normal(*a, **k)) or drawn[-1]   # noqa: E731
                try:
                    theirs = ref.eidolon_partially_coherent_disarray(im, reach, coh, 10.0) / 255.0
                finally:
                    np.random.normal = normal
                levels = (len(drawn)) // 4
                pairs = {("coherent", k): (drawn[k], drawn[levels + k]) for k in range(levels)}
                pairs.update({("incoherent", k): (drawn[2 * levels + 2 * k], drawn[2 * levels + 2 * k + 1])
                              for k in range(levels)})
                x = torch.from_numpy(np.asarray(im, dtype=np.float64))[None, None].expand(1, 3, -1, -1)
                ours = eidolon(x, reach, coh, 10.0, torch.Generator(),
                               draw=lambda kind, k: torch.from_numpy(np.stack(pairs[kind, k]))[None])
                d = np.abs(ours[0, 0].numpy() - theirs)
                worst, share = max(worst, float(d.max())), share + [float((d > 1e-9).mean())]
            print(f"eidolon{roman} reach {reach:g}: {len(grey)} images, largest |Δ| {worst:.2g} "
                  f"({255 * worst:.2g} grey levels), pixels differing: {np.mean(share):.4%}")


def eidolon_coherence(grey: np.ndarray, reach: float = 8.0) -> None:
    """robustvit alone: how far each coherence moves the 32-px low-pass image from the reach-0 output."""
    x = torch.from_numpy(grey)[:, None].expand(-1, 3, -1, -1)
    pool = lambda z: torch.nn.functional.avg_pool2d(z[:, :1], 32)          # noqa: E731
    base = pool(eidolon(x, 0.0, 0.0, 10.0, torch.Generator()))
    for coh in (1.0, 0.3, 0.0):
        y = pool(eidolon(x, reach, coh, 10.0, torch.Generator().manual_seed(0)))
        print(f"coherence {coh}, reach {reach:g}: mean |Δ| of the 32-px low-pass image {(y - base).abs().mean():.3f}")


def images(n: int, side: int = 224) -> np.ndarray:
    """(n, side, side, 3) float64 in [0, 1], whole grey levels."""
    import matplotlib.cbook as cbook
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = Image.open(f).convert("RGB")
    w, h = hopper.size
    s = max(256, side) / min(w, h)
    hopper = hopper.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = hopper.size
    out = [hopper.crop(((w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side))]
    rng = np.random.default_rng(0)
    out += [Image.fromarray(rng.integers(0, 256, (28, 28, 3), dtype=np.uint8)).resize((side, side), Image.BICUBIC)
            for _ in range(n - 1)]
    return np.stack([np.asarray(im) for im in out]) / 255.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, required=True, help="the code/ folder of generalisation-humans-DNNs")
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--eidolon", type=Path, help="a checkout of gestaltrevision/Eidolon: Eidolon I–III too")
    args = ap.parse_args()
    ref = load_reference(args.ref)
    if args.eidolon:
        load_toolbox(args.eidolon)
        sys.modules.setdefault("skimage.io", types.ModuleType("skimage.io")).imsave = None
        import skimage
        skimage.io = sys.modules["skimage.io"]
        grey = images(args.images, 256) @ np.array([0.2125, 0.7154, 0.0721])
        eidolon_fidelity(ref, grey)
        eidolon_coherence(grey)
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
