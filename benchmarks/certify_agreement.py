"""robustvit's certification against IBM's Adversarial Robustness Toolbox (ART, ``pip install robustvit[bench]``):
the same model, images and settings through

* randomized smoothing: ``robustvit.certify.certify`` vs ART's ``PyTorchRandomizedSmoothing.certify`` (Cohen et al.
  2019; both Clopper–Pearson, unclipped noise) — certified accuracies must agree within their sampling error
  (independent noise draws), and
* derandomized smoothing: ``robustvit.certify.ablation_counts`` + ``patch_certificate`` (zero-filled column
  ablations) vs ART's ``PyTorchDeRandomizedSmoothing(algorithm="salman2021")`` on the same module (ART's "CNN" mode:
  zero-filled ablations, argmax votes) — deterministic, so they must agree exactly; robustvit's token dropping
  (Salman et al.'s ViT mode, which ART offers only for its own ViT architectures at 224 px) is timed beside them;
* Levine & Feizi's setting (``--parts patch_lf`` with a model built with 6 input channels and no normalisation):
  ``encoding=levine_feizi`` and θ-threshold votes vs ART's ``algorithm="levine2020"`` (its own x and 1 − x channels,
  softmax ≥ θ) on the same network — deterministic, so the vote counts must agree exactly; the certificates differ
  only where ART applies Levine & Feizi's tie-break (a margin of exactly 2Δ certifies when the top class has the
  smaller index; robustvit's margin is strict).

    python benchmarks/certify_agreement.py --model CHECKPOINT --data folder:CIFAR10/test [--limit 20] [--n 500]

Prints a JSON summary (numbers and seconds); docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import numpy as np
import torch

from robustvit.certify.ablation import Ablation, AblatedModel, ablation_counts, patch_certificate
from robustvit.certify.smoothing import certify
from robustvit.data import dataset_for_model
from robustvit.models import create_model


def stratified(ds, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (len/limit)-th image: class folders are sorted, so classes come in proportion."""
    step = max(1, len(ds) // limit)
    items = [ds[i] for i in range(0, step * limit, step)]
    x = torch.stack([torch.as_tensor(im) for im, _ in items])
    x = x.float() / 255 if x.dtype == torch.uint8 else x
    return x, torch.tensor([int(lab) for _, lab in items])


def smoothing(model, x, y, sigma: float, n0: int, n: int, alpha: float, batch: int) -> dict:
    from art.estimators.certification.randomized_smoothing import PyTorchRandomizedSmoothing

    k = model.spec.num_classes
    t = time.perf_counter()
    ours = certify(model, x, sigma=sigma, n0=n0, n=n, alpha=alpha, num_classes=k, batch=batch,
                   generator=torch.Generator().manual_seed(0))
    t_ours = time.perf_counter() - t
    model.check_range = False          # ART adds the noise itself, unclipped, and calls the module directly
    art = PyTorchRandomizedSmoothing(model=model, loss=torch.nn.CrossEntropyLoss(), input_shape=tuple(x.shape[1:]),
                                     nb_classes=k, sample_size=n0, scale=sigma, alpha=alpha, device_type="cpu")
    np.random.seed(0)
    t = time.perf_counter()
    art_pred, art_radius = art.certify(x.numpy(), n=n, batch_size=batch)
    t_art = time.perf_counter() - t
    model.check_range = True
    yy = y.numpy()
    out = {"sigma": sigma, "n0": n0, "n": n, "alpha": alpha, "images": len(y), "radii": {}}
    for r in (0.0, 0.25, 0.5, 0.75):
        a = float(((ours.predict == yy) & (ours.radius >= r)).mean())
        b = float(((art_pred == yy) & (art_radius >= r)).mean())
        se = math.sqrt(max(a * (1 - a), b * (1 - b), 1 / len(yy)) * 2 / len(yy))   # s.e. of the difference
        out["radii"][f"{r:g}"] = {"robustvit": a, "art": b, "within_2se": abs(a - b) <= 2 * se}
    both = (ours.predict >= 0) & (art_pred >= 0)
    out["same_prediction"] = float((ours.predict == art_pred).mean())
    out["mean_abs_radius_diff"] = float(np.abs(ours.radius - art_radius)[both].mean()) if both.any() else None
    out["seconds"] = {"robustvit": round(t_ours, 2), "art": round(t_art, 2)}
    return out


def patches(model, x, y, size: int, patch: list[int], batch: int) -> dict:
    from art.estimators.certification.derandomized_smoothing import PyTorchDeRandomizedSmoothing

    k = model.spec.num_classes
    h, w = x.shape[-2:]
    band = Ablation("column", size)
    out = {"ablation": "column", "size": size, "images": len(y), "patch": {}, "seconds": {}}
    counts = {}
    for mode in ("zero_fill", "drop"):
        ablated = AblatedModel(model, mode)
        t = time.perf_counter()
        with torch.no_grad():
            counts[mode] = ablation_counts(ablated, x, band, k, batch)
        out["seconds"][f"robustvit_{mode}"] = round(time.perf_counter() - t, 2)
    art = PyTorchDeRandomizedSmoothing(model=model, loss=torch.nn.CrossEntropyLoss(), input_shape=tuple(x.shape[1:]),
                                       nb_classes=k, ablation_size=size, algorithm="salman2021",
                                       ablation_type="column", device_type="cpu", verbose=False)
    # ART 1.20's eval_and_certify ablates its NumPy batch in place through torch.from_numpy (on the CPU the tensor
    # shares the array's memory), so each position would see the previous positions' zeros; its ViT mode (which
    # concatenates a mask channel first) and CUDA (a copy) are unaffected. Give the ablator a copy, as ART's predict does.
    ablate = art.ablator.forward
    art.ablator.forward = lambda batch, **kw: ablate(np.copy(batch), **kw)
    t_art = 0.0
    for m in patch:
        t = time.perf_counter()
        acc, cert = art.eval_and_certify(x.numpy(), y.numpy(), size_to_certify=m, batch_size=batch, verbose=False)
        t_art += time.perf_counter() - t
        row = {"art": {"clean": float(acc), "certified": float(cert)}}
        for mode, c in counts.items():
            pred, ok = patch_certificate(c, band.delta(m, h, w))
            row[f"robustvit_{mode}"] = {"clean": float((pred == y).float().mean()),
                                        "certified": float((ok & (pred == y)).float().mean())}
        out["patch"][str(m)] = row
    out["seconds"]["art_per_patch_size"] = round(t_art / len(patch), 2)
    return out


def patches_lf(model, x, y, size: int, patch: list[int], threshold: float, batch: int) -> dict:
    from art.estimators.certification.derandomized_smoothing import PyTorchDeRandomizedSmoothing

    if model.in_chans != 6 or any(model.spec.mean) or any(v != 1 for v in model.spec.std):
        raise SystemExit("patch_lf needs a model built with in_chans=6 and trained with --no-normalize (ART's "
                         "levine2020 feeds the network x and 1 − x of the [0, 1] image)")
    k = model.spec.num_classes
    h, w = x.shape[-2:]
    band = Ablation("column", size)
    t = time.perf_counter()
    with torch.no_grad():
        ours = ablation_counts(AblatedModel(model, encoding="levine_feizi"), x, band, k, batch, threshold)
    t_ours = time.perf_counter() - t
    art = PyTorchDeRandomizedSmoothing(model=model.net, loss=torch.nn.CrossEntropyLoss(),
                                       input_shape=tuple(x.shape[1:]), nb_classes=k, ablation_size=size,
                                       algorithm="levine2020", ablation_type="column", threshold=threshold,
                                       logits=True, device_type="cpu", verbose=False)
    ablate = art.ablator.forward                                    # the in-place ablation of ART 1.20 (see patches)
    art.ablator.forward = lambda b, **kw: ablate(np.copy(b), **kw)
    t = time.perf_counter()
    art_counts = np.zeros((len(x), k))
    with torch.no_grad():
        for pos in range(w):
            art_counts += (torch.softmax(model.net(art.ablator.forward(x.numpy(), column_pos=pos)), 1)
                           >= threshold).numpy()
    t_art = time.perf_counter() - t
    out = {"ablation": "column", "size": size, "threshold": threshold, "images": len(y),
           "same_counts": bool((ours.numpy() == art_counts).all()), "patch": {},
           "seconds": {"robustvit": round(t_ours, 2), "art_counts": round(t_art, 2)}}
    for m in patch:
        acc, cert = art.eval_and_certify(x.numpy(), y.numpy(), size_to_certify=m, batch_size=batch, verbose=False)
        pred, ok = patch_certificate(ours, band.delta(m, h, w))
        out["patch"][str(m)] = {"art": {"clean": float(acc), "certified": float(cert)},
                                "robustvit": {"clean": float((pred == y).float().mean()),
                                              "certified": float((ok & (pred == y)).float().mean())}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a checkpoint folder or model name")
    ap.add_argument("--patch-model", default=None, help="model for the patch part (default: --model)")
    ap.add_argument("--data", required=True, help="data spec, e.g. folder:CIFAR10/test")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=0.25)
    ap.add_argument("--n0", type=int, default=100)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--patch", default="2,4,5")
    ap.add_argument("--batch", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=0.2, help="θ of patch_lf (Levine & Feizi's CIFAR-10: 0.2)")
    ap.add_argument("--parts", default="smoothing,patch", help="which comparisons to run (smoothing, patch, "
                    "patch_lf)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = create_model(args.model).eval()
    x, y = stratified(dataset_for_model(args.data, model.spec), args.limit)
    pmodel = create_model(args.patch_model).eval() if args.patch_model else model
    parts = args.parts.split(",")
    res = {"machine": f"{platform.processor() or platform.machine()}, {args.threads} thread(s)",
           "torch": torch.__version__, "art": __import__("art").__version__}
    if "smoothing" in parts:
        res["smoothing"] = smoothing(model, x, y, args.sigma, args.n0, args.n, args.alpha, args.batch)
    if "patch" in parts:
        res["patch"] = patches(pmodel, x, y, args.size, [int(p) for p in args.patch.split(",")], args.batch)
    if "patch_lf" in parts:
        res["patch_lf"] = patches_lf(pmodel, x, y, args.size, [int(p) for p in args.patch.split(",")], args.threshold,
                                     args.batch)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
