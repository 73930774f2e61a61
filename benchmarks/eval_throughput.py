"""robustvit's ``clean`` suite against a plain timm evaluation loop: images per second, side by side.

Both evaluate the same timm model (random weights with 10 classes, saved once as a robustvit checkpoint and loaded
by both; the speed does not depend on them) on the same ImageFolder
of JPEGs (generated here: smooth random images, 10 classes) with the same batch size and the same number of
data-loading worker processes (``--workers``, default 0):

* **timm loop**: ``timm.data.ImageDataset`` + ``resolve_data_config`` / ``create_transform`` (the model's
  evaluation transform) + ``timm.data.create_loader``, then ``model(x).argmax(1) == y`` under ``torch.no_grad``;
* **robustvit**: ``run_eval(EvalConfig(models=[name], data="folder:ROOT", suites=["clean"], …))`` into a fresh
  folder each time, i.e. with everything a user's ``robustvit eval`` does (model creation and self-checks,
  the unit store, results.json).

Both are timed end to end from the model's name to the accuracy. The runs alternate (timm, robustvit, timm, …)
so that load on the machine hits both alike; the script prints the median of each and their ratio and checks
that both measured the same accuracy. Run it with the threads the machine has (``torch.get_num_threads()``)::

    python benchmarks/eval_throughput.py --model deit_tiny_patch16_224 --images 96 --batch-size 32 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def make_folder(root: Path, images: int, classes: int = 10, size: int = 320, seed: int = 0) -> Path:
    """``root/class_k/img_i.JPEG``: smooth random colour images (upsampled noise), JPEG quality 90."""
    rng = np.random.default_rng(seed)
    for i in range(images):
        d = root / f"class_{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, 256, (size // 16, size // 16, 3), dtype=np.uint8)
        Image.fromarray(small).resize((size, size), Image.BILINEAR).save(d / f"img_{i:05d}.JPEG", quality=90)
    return root


def timm_loop(name: str, root: Path, batch_size: int, state: dict[str, torch.Tensor], workers: int = 0
              ) -> tuple[float, float, int]:
    """Seconds, top-1 and images of a plain timm evaluation loop (the model's weights: ``state``)."""
    import timm
    from timm.data import ImageDataset, create_loader, resolve_data_config

    t0 = time.perf_counter()
    model = timm.create_model(name, pretrained=False, num_classes=10).eval()
    model.load_state_dict(state)
    cfg = resolve_data_config({}, model=model)
    ds = ImageDataset(str(root))
    loader = create_loader(ds, input_size=cfg["input_size"], batch_size=batch_size, is_training=False,
                           use_prefetcher=False, interpolation=cfg["interpolation"], mean=cfg["mean"], std=cfg["std"],
                           num_workers=workers, crop_pct=cfg["crop_pct"], crop_mode=cfg.get("crop_mode", "center"))
    correct = n = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(1) == y).sum())
            n += len(y)
    return time.perf_counter() - t0, correct / n, n


def robustvit_clean(checkpoint: Path, root: Path, batch_size: int, out: Path, workers: int = 0
                    ) -> tuple[float, float, int]:
    """Seconds, top-1 and images of ``robustvit eval --model CHECKPOINT --suite clean`` (a fresh output folder)."""
    from robustvit.evaluation.runner import EvalConfig, run_eval

    t0 = time.perf_counter()
    res = run_eval(EvalConfig(models=[str(checkpoint)], data=f"folder:{root}", suites=["clean"], out=str(out),
                              batch_size=batch_size, device="cpu", workers=workers, progress=False))
    r = next(iter(res.values()))["suites"]["clean"]
    return time.perf_counter() - t0, r["top1"], r["num_images"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="deit_tiny_patch16_224")
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workers", type=int, default=0, help="data-loading worker processes of both (the same count)")
    p.add_argument("--json", metavar="FILE", help="also write the measurements here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_folder(Path(tmp) / "data", a.images)
        from robustvit.models import create_model, save_checkpoint

        model = create_model(a.model, num_classes=10).eval()      # the one model both evaluate (10 classes)
        ckpt = save_checkpoint(model, Path(tmp) / "checkpoint")
        state = model.model.state_dict()
        timm_loop(a.model, root, a.batch_size, state)             # warm-up: imports, file cache
        times: dict[str, list[float]] = {"timm": [], "robustvit": []}
        acc: dict[str, float] = {}
        for i in range(a.repeats):
            for which in ("timm", "robustvit"):
                if which == "timm":
                    s, top1, n = timm_loop(a.model, root, a.batch_size, state, a.workers)
                else:
                    s, top1, n = robustvit_clean(ckpt, root, a.batch_size, Path(tmp) / f"out{i}", a.workers)
                times[which].append(n / s)
                acc[which] = top1
                print(f"  {which:9s} run {i + 1}: {n / s:7.2f} images/s ({n} images, top-1 {top1:.3f})", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["robustvit"] / med["timm"]
    print(f"{a.model}, {a.images} JPEGs, batch {a.batch_size}, {a.workers} workers, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"median images/s: timm loop {med['timm']:.2f}, robustvit clean suite {med['robustvit']:.2f}; "
          f"ratio {ratio:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "images": a.images, "batch_size": a.batch_size,
                                            "workers": a.workers,
                                            "threads": torch.get_num_threads(), "images_per_s": times,
                                            "median": med, "ratio": ratio, "accuracy": acc}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
