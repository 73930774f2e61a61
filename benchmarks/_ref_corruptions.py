"""Helper run inside the *reference* environment (imagecorruptions 1.1.2, numpy 1.26, scikit-image 0.19).

Never imported by robustvit. The benchmarks call it in a subprocess and exchange .npy/.json files:

    python _ref_corruptions.py images --out photos.npy            # scikit-image sample photos, 224 px
    python _ref_corruptions.py corrupt --images x.npy --names fog,snow --repeats 2 --seed 0 --out y.npz
    python _ref_corruptions.py time --images x.npy --names fog --n 2 --out t.json
    python _ref_corruptions.py replay --images x.npy --names frost,spatter --seed 0 --out r.npz  # + draws
    python _ref_corruptions.py fixtures --out tests/corruptions/fixtures/imagecorruptions_fixed_draws.npz

Make the environment outside the repository:
    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy==1.26.0 scikit-image==0.20.0 "setuptools<80" imagecorruptions
    (0.19.3 works too but builds from source on Python 3.11; 0.20 needs the small shim below)

``elastic_transform@imagenet-c`` is the elastic transform that made the released ImageNet-C (random affine +
displacement field, parameters in multiples of 244; Hendrycks & Dietterich 2019, arXiv:1903.12261),
written here from its description because imagecorruptions 1.1.2 replaced it with a different one.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _photos(size: int = 224) -> np.ndarray:
    from PIL import Image
    from skimage import data

    names = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry"]
    out = []
    for name in names:
        try:
            img = getattr(data, name)()
        except Exception:  # noqa: BLE001 - not bundled in this version: skip
            continue
        pil = Image.fromarray(img[..., :3]).convert("RGB")
        s = 256 * size // 224
        w, h = pil.size
        pil = pil.resize((round(w * s / min(w, h)), round(h * s / min(w, h))), Image.BILINEAR)
        w, h = pil.size
        left, top = (w - size) // 2, (h - size) // 2
        out.append(np.asarray(pil.crop((left, top, left + size, top + size))))
    return np.stack(out)


def _elastic_imagenet_c(img: np.ndarray, severity: int) -> np.ndarray:
    import cv2
    from scipy.ndimage import gaussian_filter, map_coordinates

    alpha, sigma, jitter = [(488, 170.8, 24.4), (488, 19.52, 48.8), (12.2, 2.44, 4.88),
                            (17.08, 2.44, 4.88), (29.28, 2.44, 4.88)][severity - 1]
    x = img.astype(np.float32) / 255.0
    h, w = x.shape[:2]
    cy, cx = h // 2, w // 2
    s = min(h, w) // 3
    src = np.float32([[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]])
    dst = (src + np.random.uniform(-jitter, jitter, size=src.shape)).astype(np.float32)
    warped = cv2.warpAffine(x, cv2.getAffineTransform(src, dst), (w, h), borderMode=cv2.BORDER_REFLECT_101)
    fields = [gaussian_filter(np.random.uniform(-1, 1, size=(h, w)), sigma, mode="reflect", truncate=3) * alpha
              for _ in range(2)]
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    out = np.stack([map_coordinates(warped[..., c], [yy + fields[1], xx + fields[0]], order=1, mode="reflect")
                    for c in range(3)], -1)
    return np.uint8(np.clip(out, 0, 1) * 255)


def _skimage_compat() -> None:
    """imagecorruptions 1.1.2 calls ``skimage.filters.gaussian(..., multichannel=True)``, removed in
    scikit-image 0.20 (which, unlike 0.19.3, has wheels for Python 3.11+). Map it to the identical
    ``channel_axis=-1`` so the reference runs unchanged on either version."""
    import skimage.filters
    from imagecorruptions import corruptions

    gaussian = skimage.filters.gaussian

    def compat(image, *args, multichannel=None, **kwargs):  # noqa: ANN001, ANN202
        if multichannel:
            kwargs.setdefault("channel_axis", -1)
        return gaussian(image, *args, **kwargs)

    corruptions.gaussian = compat


def _apply(img: np.ndarray, name: str, severity: int) -> np.ndarray:
    if name == "elastic_transform@imagenet-c":
        return _elastic_imagenet_c(img, severity)
    from imagecorruptions import corrupt

    _skimage_compat()

    return corrupt(img, corruption_name=name, severity=severity)


def cmd_corrupt(a: argparse.Namespace) -> None:
    imgs = np.load(a.images)
    np.random.seed(a.seed)
    out = {}
    for name in a.names.split(","):
        for sev in range(1, 6):
            reps = [np.stack([_apply(im, name, sev) for im in imgs]) for _ in range(a.repeats)]
            out[f"{name}/{sev}"] = np.stack(reps)          # (repeats, N, H, W, 3) uint8
    np.savez_compressed(a.out, **out)


def cmd_time(a: argparse.Namespace) -> None:
    imgs = np.load(a.images)[: a.n]
    np.random.seed(0)
    res = {}
    for name in a.names.split(","):
        _apply(imgs[0], name, 1)                            # warm caches (frost files, imports)
        t0 = time.perf_counter()
        for sev in range(1, 6):
            for im in imgs:
                _apply(im, name, sev)
        res[name] = (time.perf_counter() - t0) / (5 * len(imgs))
    with open(a.out, "w") as f:
        json.dump(res, f)


def _replay_one(img: np.ndarray, name: str, severity: int, rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """``imagecorruptions``' frost or spatter on one image with its draw taken from ``rng`` and returned:
    frost ``(photo, top, left)``, spatter the standard-normal liquid field (H, W) behind ``np.random.normal``."""
    from PIL import Image
    from imagecorruptions import corruptions

    _skimage_compat()
    if name == "spatter":
        z = rng.standard_normal(img.shape[:2])
        normal = np.random.normal
        np.random.normal = lambda size, loc, scale: z * scale + loc                      # noqa: E731
        try:
            y = corruptions.spatter(Image.fromarray(img), severity)
        finally:
            np.random.normal = normal
        return np.uint8(y), z
    if name != "frost":
        raise SystemExit(f"replay knows frost and spatter, not {name}")
    picks: list[int] = []
    randint = np.random.randint

    def record(low, high=None, size=None):  # noqa: ANN001, ANN202
        v = rng.randint(low, high) if high is not None else rng.randint(low)
        picks.append(int(v))
        return v

    np.random.randint = record
    try:
        y = corruptions.frost(img, severity)
    finally:
        np.random.randint = randint
    return np.uint8(y), np.array(picks)


def cmd_replay(a: argparse.Namespace) -> None:
    """Outputs and the draws behind them, so robustvit can be run on the very same draws."""
    imgs = np.load(a.images)
    rng = np.random.RandomState(a.seed)
    out = {}
    for name in a.names.split(","):
        for sev in range(1, 6):
            pairs = [_replay_one(im, name, sev, rng) for _ in range(a.repeats) for im in imgs]
            out[f"{name}/{sev}"] = np.stack([y for y, _ in pairs])            # (repeats·N, H, W, 3) uint8
            out[f"{name}/{sev}/draw"] = np.stack([d for _, d in pairs])
    np.savez_compressed(a.out, **out)


def _fixture_image(size: int) -> np.ndarray:
    """A smooth uint8 RGB test image with a bright disc (the one tests/corruptions/test_spatter.py rebuilds)."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([xx, yy, (xx + yy) / 2], -1) * 180 + 30
    img[(yy - .5) ** 2 + (xx - .5) ** 2 < .06] += 40
    return img.clip(0, 255).astype(np.uint8)


def cmd_fixtures(a: argparse.Namespace) -> None:
    """Reference outputs on fixed draws, for tests that must not need the reference (kept in the repository):

    - ``frost_photo`` (uint8, 20×24×3, ``RandomState(0)``) and ``frost_resized``: ``imagecorruptions``' frost
      resize of it (×1.1, ``ceil`` sizes, ``cv2.INTER_CUBIC``);
    - ``spatter_delta{s}`` (int16): ``spatter`` output − image for the 96-px :func:`_fixture_image` at the water
      severities ``s`` = 1, 2, 3, its normal draw replaced by ``RandomState(s).standard_normal((96, 96))``
      (scaled by the table's std, shifted by its mean, as ``np.random.normal`` does).
    """
    import cv2
    from PIL import Image
    from imagecorruptions import corruptions

    _skimage_compat()
    out = {}
    photo = np.random.RandomState(0).randint(0, 256, (20, 24, 3)).astype(np.uint8)
    size = (int(np.ceil(photo.shape[1] * 1.1)), int(np.ceil(photo.shape[0] * 1.1)))
    out["frost_photo"], out["frost_resized"] = photo, cv2.resize(photo, dsize=size, interpolation=cv2.INTER_CUBIC)
    img = _fixture_image(96)
    normal = np.random.normal
    try:
        for sev in (1, 2, 3):                                                    # the water variant
            z = np.random.RandomState(sev).standard_normal(img.shape[:2])
            np.random.normal = lambda size, loc, scale, z=z: z * scale + loc          # noqa: E731
            y = np.uint8(corruptions.spatter(Image.fromarray(img), sev))
            out[f"spatter_delta{sev}"] = y.astype(np.int16) - img
    finally:
        np.random.normal = normal
    np.savez_compressed(a.out, **out)


def cmd_images(a: argparse.Namespace) -> None:
    np.save(a.out, _photos(a.size))


def cmd_versions(a: argparse.Namespace) -> None:
    import importlib.metadata as md

    out = {}
    for pkg in ("imagecorruptions", "numpy", "scikit-image", "scipy", "opencv-python", "Pillow"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    import importlib.util
    import os

    spec = importlib.util.find_spec("imagecorruptions")
    out["frost_dir"] = os.path.join(list(spec.submodule_search_locations)[0], "frost") if spec else None
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corrupt")
    c.add_argument("--images", required=True)
    c.add_argument("--names", required=True)
    c.add_argument("--repeats", type=int, default=1)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True)
    c.set_defaults(func=cmd_corrupt)
    t = sub.add_parser("time")
    t.add_argument("--images", required=True)
    t.add_argument("--names", required=True)
    t.add_argument("--n", type=int, default=2)
    t.add_argument("--out", required=True)
    t.set_defaults(func=cmd_time)
    i = sub.add_parser("images")
    i.add_argument("--size", type=int, default=224)
    i.add_argument("--out", required=True)
    i.set_defaults(func=cmd_images)
    r = sub.add_parser("replay")
    r.add_argument("--images", required=True)
    r.add_argument("--names", default="frost,spatter")
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", required=True)
    r.set_defaults(func=cmd_replay)
    f = sub.add_parser("fixtures")
    f.add_argument("--out", required=True)
    f.set_defaults(func=cmd_fixtures)
    v = sub.add_parser("versions")
    v.set_defaults(func=cmd_versions)
    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
