"""Speed of robustvit's batched corruptions against ``imagecorruptions`` 1.1.2 (per image), side by side.

For every corruption, robustvit corrupts a batch at each severity 1–5 on ``--device``; then the reference
corrupts ``--ref-images`` images at each severity, one by one, in its own environment (a subprocess), on the
same images, right after — so both see the same machine load. This alternation is repeated ``--rounds``
times and each side reports the **median** of its rounds, in a plain Python process (``--thp on`` runs with
``THP_MEM_ALLOC_ENABLE=1`` instead, for a second column). Prints ms per image and the ratio; with ``--no-reference``
(e.g. on a GPU machine without imagecorruptions) prints robustvit's throughput only.
Finally times the full sweep, 19 corruptions × 5 severities, and reports images per second.

Needs only torch, torchvision, numpy and robustvit (plus the reference env when comparing):

    python benchmarks/corruptions.py --device cpu --batch-size 64 --size 224 \\
        --ref-python /tmp/ref/bin/python --out /tmp/corruptions_cpu.json
    python benchmarks/corruptions.py --device cuda --batch-size 256 --size 224 --no-reference \\
        --out /tmp/corruptions_gpu.json

The reference env: python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy==1.26.0 scikit-image==0.20.0
"setuptools<80" imagecorruptions
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robustvit.corruptions import corrupt, list_corruptions

REF = Path(__file__).resolve().parent / "_ref_corruptions.py"


def synthetic_images(n: int, size: int, seed: int = 0) -> np.ndarray:
    """Photo-like uint8 images (N, H, W, 3): smooth colour fields, edges and fine texture (seeded)."""
    rng = np.random.default_rng(seed)
    t = torch.from_numpy(rng.random((n, 3, max(2, size // 16), max(2, size // 16)))).float()
    img = torch.nn.functional.interpolate(t, size=(size, size), mode="bicubic", align_corners=False)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    for i in range(n):
        cy, cx, r = rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), rng.uniform(0.2, 0.5)
        img[i] += 0.35 * (((yy - cy) ** 2 + (xx - cx) ** 2) < r * r).float() * torch.from_numpy(
            rng.uniform(-1, 1, (3, 1, 1))).float()
    img += 0.03 * torch.from_numpy(rng.standard_normal((n, 3, size, size))).float()
    return (img.clamp(0, 1) * 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ours(x: torch.Tensor, name: str) -> float:
    """Seconds per image, averaged over severities 1–5 (after one warm-up call)."""
    corrupt(x, name, 3, seed=0)
    _sync(x.device)
    t0 = time.perf_counter()
    for s in range(1, 6):
        corrupt(x, name, s, seed=s)
    _sync(x.device)
    return (time.perf_counter() - t0) / (5 * x.shape[0])


def time_ref(py: str, imgs_path: Path, name: str, n: int, tmp: Path) -> float:
    out = tmp / "t.json"
    res = subprocess.run([py, str(REF), "time", "--images", str(imgs_path), "--names", name, "--n", str(n),
                          "--out", str(out)], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"reference helper failed: {res.stderr.strip()[-2000:]}")
    return json.loads(out.read_text())[name]


def sweep(x: torch.Tensor) -> float:
    """Images per second over the full sweep: every corruption × severity on the batch."""
    names = list_corruptions()
    _sync(x.device)
    t0 = time.perf_counter()
    for name in names:
        for s in range(1, 6):
            corrupt(x, name, s, seed=s)
    _sync(x.device)
    return len(names) * 5 * x.shape[0] / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per corruption; each side reports the median")
    p.add_argument("--ref-python", default="/tmp/ref/bin/python")
    p.add_argument("--ref-images", type=int, default=4, help="images per severity for the reference")
    p.add_argument("--no-reference", action="store_true")
    p.add_argument("--names", default=",".join(list_corruptions()))
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--thp", choices=["on", "off"], default="off",
                   help="THP_MEM_ALLOC_ENABLE for this process (off: a plain process, as users run robustvit)")
    p.add_argument("--out", type=Path, default=Path("bench-out/corruptions_bench.json"))
    a = p.parse_args()
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1" if a.thp == "on" else "0"   # read at torch's first large allocation
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    imgs = synthetic_images(a.batch_size, a.size)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div(255).contiguous().to(device)   # NCHW, as ToTensor
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        np.save(tmp / "imgs.npy", imgs[: a.ref_images])
        print(f"{'corruption':18s} {'robustvit ms/img':>16s} {'reference ms/img':>16s} {'speed-up':>9s}", flush=True)
        for name in a.names.split(","):
            ours_t, ref_t = [], []
            for _ in range(a.rounds):
                ours_t.append(time_ours(x, name))
                if not a.no_reference:
                    ref_t.append(time_ref(a.ref_python, tmp / "imgs.npy", name, a.ref_images, tmp))
            ours, ref = float(np.median(ours_t)), (float(np.median(ref_t)) if ref_t else None)
            row = {"name": name, "ours_ms": 1e3 * ours, "ref_ms": None if ref is None else 1e3 * ref,
                   "speedup": None if ref is None else ref / ours}
            rows.append(row)
            print(f"{name:18s} {row['ours_ms']:16.2f} "
                  + (f"{row['ref_ms']:16.2f} {row['speedup']:8.1f}x" if ref is not None else f"{'-':>16s}"),
                  flush=True)
    ips = sweep(x)
    summary = {"device": str(device), "batch_size": a.batch_size, "rounds": a.rounds, "thp": a.thp, "size": a.size, "torch": torch.__version__,
               "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
               "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "sweep_images_per_s": ips, "rows": rows}
    if not a.no_reference:
        sp = [r["speedup"] for r in rows]
        summary["mean_speedup"] = float(np.mean(sp))
        summary["min_speedup"] = float(np.min(sp))
    print(f"full sweep ({len(list_corruptions())} corruptions x 5 severities, batch {a.batch_size}, "
          f"{a.size} px, {device}): {ips:.1f} images/s")
    if "mean_speedup" in summary:
        print(f"mean speed-up {summary['mean_speedup']:.1f}x, slowest {summary['min_speedup']:.2f}x")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=1))
    md = ["| corruption | robustvit ms/img | imagecorruptions ms/img | speed-up |", "|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['name']} | {r['ours_ms']:.2f} | "
                  + (f"{r['ref_ms']:.2f} | {r['speedup']:.1f}× |" if r["ref_ms"] is not None else "– | – |"))
    if "mean_speedup" in summary:
        md.append(f"| **mean** | {np.mean([r['ours_ms'] for r in rows]):.2f} | "
                  f"{np.mean([r['ref_ms'] for r in rows]):.1f} | **{summary['mean_speedup']:.1f}×** |")
    md.append(f"\nFull sweep 19 × 5 at {a.size} px, batch {a.batch_size}, {device}, THP {a.thp}: **{ips:.0f} images/s**.")
    a.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {a.out} and {a.out.with_suffix('.md')}", file=sys.stderr)


if __name__ == "__main__":
    main()
