"""Certified robustness on real CIFAR-10 images (docs/certified.md): a small ViT trained with Gaussian noise
(randomized smoothing, Cohen et al. 2019) and one trained with column ablations (derandomized smoothing, Levine &
Feizi 2020; tokens dropped as Salman et al. 2022), both certified on a stratified sample of the test set.

Sized for a shared 2-core CPU (one thread per process; ``nice`` it). Every stage resumes: a finished training is
skipped, an interrupted one continues from its ``last/`` state, an interrupted evaluation continues its units.

    nice -n 10 python benchmarks/certify_evidence.py --data CIFAR10_JPG_ROOT --out bench-out/certify
        [--stage train|eval|all] [--which noise,ablation] [--per-class 500] [--epochs 8] [--limit 100] [--n 500]

``CIFAR10_JPG_ROOT`` holds ``train/<class>/*.jpg`` and ``test/<class>/*.jpg`` (ImageFolder layout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

MODEL = "vit_cifar_demo"
LOSSES = {"noise": ("gaussian_noise", {"sigma": 0.25}), "ablation": ("ablation", {"ablation": "column", "size": 4})}


def subset_folder(root: Path, out: Path, per_class: int) -> Path:
    """The first ``per_class`` training images of each class, as symbolic links (an ImageFolder tree)."""
    dst = out / f"train-{per_class}"
    if (dst / ".done").exists():
        return dst
    for cls in sorted(p.name for p in (root / "train").iterdir() if p.is_dir()):
        (dst / cls).mkdir(parents=True, exist_ok=True)
        for f in sorted((root / "train" / cls).iterdir())[:per_class]:
            link = dst / cls / f.name
            try:
                link.symlink_to(f.resolve())
            except FileExistsError:     # another process made it
                pass
    (dst / ".done").touch()
    return dst


def train_one(which: str, data: Path, out: Path, epochs: int) -> Path:
    from robustvit.facade import train

    run = out / which
    ckpt = run / "checkpoint"
    if (ckpt / "config.json").exists() or (run / "results.json").exists():
        return ckpt
    loss, opts = LOSSES[which]
    resume = (run / "last").exists()
    return train(model=MODEL, data=f"folder:{data}", out=str(run), epochs=epochs, batch_size=64, lr=1e-3,
                 warmup_epochs=1, loss=loss, loss_options=opts, seed=0, device="cpu", resume=resume, progress=False)


def evaluate_one(which: str, root: Path, out: Path, limit: int, n: int) -> dict:
    """Certify the final checkpoint, or — when the training has not finished — the weights of its last epoch
    (``last/``; the summary says how many epochs they had)."""
    from robustvit.facade import evaluate

    suites = {"noise": [f"certify:sigma=0.25:n0=100:n={n}:alpha=0.001", "clean"],
              "ablation": ["certify_patch:ablation=column:size=4:patch=2+4+5", "clean"]}[which]
    run = out / which
    weights = run / "checkpoint" if (run / "checkpoint").exists() else run / "last"
    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    epochs = json.loads(lines[-1])["epoch"] if lines else 0
    res = evaluate(str(weights), f"folder:{root / 'test'}", suites, out=str(out / f"{which}-eval-e{epochs}"),
                   limit=limit, subset_method="stratified", seed=0, device="cpu", batch_size=50)
    res["trained"] = {"weights": weights.name, "epochs": epochs, "last_epoch": json.loads(lines[-1]) if lines else None}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="CIFAR-10 ImageFolder root (train/ and test/)")
    ap.add_argument("--out", default="bench-out/certify", type=Path)
    ap.add_argument("--stage", default="all", choices=("train", "eval", "all"))
    ap.add_argument("--which", default="noise,ablation")
    ap.add_argument("--per-class", type=int, default=500, help="training images per class")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--limit", type=int, default=100, help="stratified test images certified")
    ap.add_argument("--n", type=int, default=500, help="noise draws of CERTIFY's estimation")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for which in [w.strip() for w in args.which.split(",") if w.strip()]:
        if args.stage in ("train", "all"):
            train_one(which, subset_folder(args.data, args.out, args.per_class), args.out, args.epochs)
        if args.stage in ("eval", "all"):
            res = evaluate_one(which, args.data, args.out, args.limit, args.n)
            summary[which] = {"trained": res["trained"], **{k: {kk: vv for kk, vv in v.items() if kk != "per_image"}
                                                            for k, v in res["suites"].items()}}
    if summary:
        path = args.out / "summary.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **summary}, indent=1))
        print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
