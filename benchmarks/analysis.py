"""Analysis speed: seconds per image for every registered analysis, on CPU (and CUDA when present).

Each analysis runs on random-weight models through ``run_analyses`` (no output folder: the in-memory
unit store, no plots), with the default options except where noted, and the best of ``--repeats`` runs
per (model, analysis, device) is kept. ``pos_embed_similarity`` uses no images (its time is per call).
Default models: ``vit_cifar_tiny`` at 32 px and ``vit_small_patch16_224``; ``--models`` changes them
(e.g. ``vit_base_patch16_224`` on CUDA).

    PYTHONPATH=src .venv/bin/python benchmarks/analysis.py --device cpu --images 4
    python benchmarks/analysis.py --device cuda --images 64 --models vit_small_patch16_224,vit_base_patch16_224
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from robustvit.analysis import list_analyses, run_analyses  # noqa: E402
from robustvit.data import create_dataset  # noqa: E402
from robustvit.models import create_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="all", help="cpu, cuda or all (cpu + cuda when present)")
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--models", default="vit_cifar_tiny,vit_small_patch16_224")
    ap.add_argument("--analyses", default="", help="comma-separated specs (default: all, lesion with samples=25)")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) if a.device == "all" else [a.device]
    names = [s for s in a.analyses.split(",") if s] or list_analyses()
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads {torch.get_num_threads()}, "
          f"{a.images} images")
    print("| model | analysis | device | s / image | s total |")
    print("|---|---|---|---|---|")
    for mname in a.models.split(","):
        torch.manual_seed(0)
        model = create_model(mname, num_classes=10)
        data = create_dataset(f"synthshapes:test,count={a.images}", image_size=model.spec.image_size)
        for dev in devices:
            for spec in names:
                best = float("inf")
                for _ in range(a.repeats):
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    t = time.perf_counter()
                    run_analyses(model, data, [spec], None, limit=a.images, batch_size=a.images, device=dev)
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    best = min(best, time.perf_counter() - t)
                per = best / (1 if spec.startswith("pos_embed") else a.images)
                print(f"| {mname} | {spec} | {dev} | {per:.3f} | {best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
