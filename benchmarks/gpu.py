"""One prepared GPU run: the `gpu`-marked tests and every GPU figure of docs/benchmarks.md, in one call.

Runs from a plain working tree with the machine's own Python (PyTorch and timm; no installs, no network)::

    PYTHONPATH=src python3 benchmarks/gpu.py --out OUT          # one H100: about 6 minutes
    PYTHONPATH=src python3 benchmarks/gpu.py --dry-run --out OUT  # the same code on the CPU in seconds (make test)

It measures, each step timed on its own and written as soon as it ends (a step that fails records its error and the
others go on):

* ``tests``: ``pytest -m gpu`` over ``tests/`` (skipped, and said so, where pytest is not installed);
* ``forward``: ViT-B/16 and ResNet-50 forward images/s, batch 128 at 224 px, in fp32 / TF32 / bf16 and (ResNet)
  bf16 + channels_last;
* ``corruptions``: the 19 ImageNet-C corruptions at severity 3 on batches of 128 224-px images, images/s, against the
  ViT-B/16's bf16 forward-only images/s (target ≥ 0.8×);
* ``loader``: robustvit's evaluation loader over 10,000 generated 224-px JPEGs (ImageFolder), 0 / 8 / 16 workers,
  decoding on the CPU and (8 / 16 workers) with ``--decode gpu``, against the bf16 forward (target ≥ 1.2×);
  ``--decode gpu`` against the CPU decode on 1,000 of them (pixel differences, ResNet-50 top-1 changes);
* ``pgd``: one PGD step (ViT-B/16, bf16, batch 128) against one forward + backward pass (target ≤ 1.15×);
* ``train``: FGSM-RS adversarial training of ViT-B/16 in bf16, images/s of its second epoch (the first also
  generates the images);
* ``engine``: the run engine's cost per unit (store commit, scheduler) against a unit of the clean suite (target
  ≤ 2 %);
* ``compile``: the bf16 forward with ``torch.compile`` (last, as compiling takes a minute per model).

Writes ``OUT/gpu.json`` (every figure with the card, versions and command) and ``OUT/gpu.md`` (the table for
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from robustvit.models import create_model  # noqa: E402
from robustvit.models.wrapper import inference_settings  # noqa: E402

#: Sizes of a real run and of ``--dry-run`` (CPU, seconds).
FULL = {"size": 224, "batch": 128, "iters": 10, "vit": "vit_base_patch16_224", "cnn": "resnet50", "classes": 1000,
        "jpegs": 10_000, "jpegs_w0": 1_000, "workers": (0, 8, 16), "train_images": 2_560, "units": 200}
DRY = {"size": 16, "batch": 4, "iters": 1, "vit": "vit_cifar_micro", "cnn": "resnet_cifar18", "classes": 10,
       "jpegs": 16, "jpegs_w0": 8, "workers": (0, 1), "train_images": 8, "units": 5}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn: Callable[[], Any], device: torch.device, iters: int, warmup: int = 2) -> float:
    """The median seconds of ``fn()`` over ``iters`` runs after ``warmup`` (synchronised on CUDA)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def model(name: str, cfg: dict[str, Any], device: torch.device) -> torch.nn.Module:
    kw = {"img_size": cfg["size"]} if name.startswith("vit_cifar") else {}
    return create_model(name, num_classes=cfg["classes"], **kw).to(device).eval()


# ------------------------------------------------------------------------------------------ steps
def step_tests(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        return {"skipped": "pytest is not installed on this machine"}
    if dry:
        return {"skipped": "dry run (the gpu tests need CUDA)"}
    files = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").rglob("test_*.py") if "mark.gpu" in f.read_text())
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-o", "addopts=-ra",
           "--timeout", "120", *files]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:      # keep what the tests printed before the limit
        code, text = "timeout after 240 s", "".join(b.decode() if isinstance(b, bytes) else (b or "")
                                                      for b in (e.stdout, e.stderr))
    lines = text.strip().splitlines()
    return {"returncode": code, "files": files, "summary": lines[-1] if lines else "", "log": lines[-400:]}


def step_forward(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    x = torch.rand(cfg["batch"], 3, cfg["size"], cfg["size"], device=device)
    for name in (cfg["vit"], cfg["cnn"]):
        m = model(name, cfg, device)
        rows: dict[str, float] = {}
        for precision in ("fp32", "tf32", "bf16"):
            with torch.no_grad(), inference_settings(m, precision=precision):
                rows[precision] = cfg["batch"] / seconds(lambda: m(x), device, cfg["iters"])
        if name == cfg["cnn"]:
            m.to(memory_format=torch.channels_last)
            xc = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad(), inference_settings(m, precision="bf16"):
                rows["bf16+channels_last"] = cfg["batch"] / seconds(lambda: m(xc), device, cfg["iters"])
        out[name] = {k: round(v, 1) for k, v in rows.items()}
    return out


def step_compile(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    """bf16 forward images/s with ``torch.compile`` (last: compiling takes a minute per model on a GPU)."""
    if dry:
        return {"skipped": "dry run (compiling takes minutes on a CPU)"}
    x = torch.rand(cfg["batch"], 3, cfg["size"], cfg["size"], device=device)
    out: dict[str, Any] = {}
    for name in (cfg["vit"], cfg["cnn"]):
        m = model(name, cfg, device)
        m.model.compile(dynamic=True)
        with torch.no_grad(), inference_settings(m, precision="bf16"):
            out[name] = round(cfg["batch"] / seconds(lambda: m(x), device, cfg["iters"], warmup=3), 1)
    return out


def step_corruptions(cfg: dict[str, Any], device: torch.device, dry: bool, forward: float | None) -> dict[str, Any]:
    from robustvit.corruptions import corrupt
    from robustvit.corruptions.params import BENCHMARK_CORRUPTIONS, EXTRA_CORRUPTIONS

    x = torch.rand(cfg["batch"], 3, cfg["size"], cfg["size"], device=device)
    per: dict[str, float] = {}
    for name in (*BENCHMARK_CORRUPTIONS, *EXTRA_CORRUPTIONS):       # the 15 of ImageNet-C and its 4 extra
        per[name] = round(cfg["batch"] / seconds(lambda: corrupt(x, name, 3, seed=0), device, max(1, cfg["iters"] // 3),
                                                 warmup=1), 1)
    # the sweep: every corruption once per batch; images/s of one (corruption, image) pair, as a sweep counts them
    sweep = len(per) / sum(1 / v for v in per.values())
    res: dict[str, Any] = {"per_corruption": per, "sweep_images_per_s": round(sweep, 1)}
    if forward:
        res["vs_bf16_forward"] = round(sweep / forward, 3)
    return res


def make_jpegs(root: Path, n: int, size: int) -> Path:
    """``root/class_k/i.JPEG``: ``n`` smooth random images of ``size`` px (JPEG quality 90), 10 classes."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    base = [Image.fromarray(rng.integers(0, 256, (size // 16, size // 16, 3), dtype=np.uint8)).resize(
        (size + 32, size + 32), Image.BILINEAR) for _ in range(16)]
    for i in range(n):
        d = root / f"class_{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        base[i % 16].save(d / f"{i:05d}.JPEG", quality=90)
    return root


def step_loader(cfg: dict[str, Any], device: torch.device, dry: bool, forward: float | None) -> dict[str, Any]:
    from robustvit.data import dataset_for_model
    from robustvit.data import loader as rl

    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = make_jpegs(Path(tmp), cfg["jpegs"], cfg["size"])
        spec = model(cfg["vit"], cfg, torch.device("cpu")).spec
        ds = dataset_for_model(f"folder:{root}", spec)
        t0 = time.perf_counter()
        for i in range(min(256, len(ds))):        # one image at a time on one core: what a worker can reach
            ds[i]
        res["one_core_images_per_s"] = round(min(256, len(ds)) / (time.perf_counter() - t0), 1)
        decodes = ("cpu", "gpu") if device.type == "cuda" else ("cpu",)
        for decode in decodes:
            for workers in cfg["workers"]:
                if decode == "gpu" and workers == 0:
                    continue
                n = cfg["jpegs_w0"] if workers == 0 else len(ds)
                chunks = (torch.arange(i, min(n, i + cfg["batch"])) for i in range(0, n, cfg["batch"]))
                t0, c0 = time.perf_counter(), time.process_time()
                count = 0
                for x, _ in rl.iter_chunks(ds, chunks, workers=workers, device=device, decode=decode):
                    count += len(x)
                sync(device)
                wall = time.perf_counter() - t0
                ips = count / wall
                key = f"workers_{workers}" + ("_decode_gpu" if decode == "gpu" else "")
                res[key] = round(ips, 1)
                res[f"{key}_main_process_cores"] = round((time.process_time() - c0) / wall, 2)
                if forward:
                    res[f"{key}_vs_bf16_forward"] = round(ips / forward, 3)
        res["decode_gpu"] = decode_difference(ds, cfg, device) if device.type == "cuda" else "skipped (needs CUDA)"
    return res


def decode_difference(ds: Any, cfg: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """``--decode gpu`` (nvjpeg, resize on the device) against the CPU decode (libjpeg-turbo, PIL resize) on the same
    1,000 files: pixel differences, and how often ResNet-50's top-1 differs (timm's pretrained weights where the
    machine has them cached, else random weights, said so)."""
    from robustvit.data import loader as rl

    n = min(1000, len(ds))
    batches = {}
    for decode in ("cpu", "gpu"):
        chunks = (torch.arange(i, min(n, i + cfg["batch"])) for i in range(0, n, cfg["batch"]))
        batches[decode] = torch.cat([x for x, _ in rl.iter_chunks(ds, chunks, workers=8, device=device,
                                                                   decode=decode)])
    diff = (batches["gpu"] - batches["cpu"]).abs() * 255
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        m, weights = create_model("resnet50", pretrained=True).to(device).eval(), "timm pretrained"
    except Exception:   # no cached weights on a machine without network
        m, weights = create_model("resnet50").to(device).eval(), "random (no cached pretrained weights)"
    with torch.no_grad(), inference_settings(m, precision="fp32"):
        top = {k: torch.cat([m(v[i:i + 128]).argmax(1) for i in range(0, n, 128)]) for k, v in batches.items()}
    return {"images": n, "mean_abs_grey_levels": round(float(diff.mean()), 4),
            "max_abs_grey_levels": round(float(diff.max()), 2),
            "top1_changed": round(float((top["gpu"] != top["cpu"]).float().mean()), 4), "weights": weights}


def step_pgd(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    import torch.nn.functional as F

    from robustvit.attacks import create_attack

    m = model(cfg["vit"], cfg, device)
    x = torch.rand(cfg["batch"], 3, cfg["size"], cfg["size"], device=device)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), device=device)
    with inference_settings(m, precision="bf16"):
        def fwd_bwd() -> None:
            xa = x.clone().requires_grad_(True)
            torch.autograd.grad(F.cross_entropy(m(xa), y), xa)
        one = seconds(fwd_bwd, device, cfg["iters"])
        atk = create_attack("pgd", m, eps="4/255", steps=10)
        step = seconds(lambda: atk(x, y), device, max(1, cfg["iters"] // 3), warmup=1) / 10
    return {"forward_backward_s": round(one, 5), "pgd_step_s": round(step, 5), "ratio": round(step / one, 3)}


def step_train(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    from robustvit.training import TrainConfig, train

    n = cfg["train_images"]
    with tempfile.TemporaryDirectory() as tmp:
        tc = TrainConfig(model=cfg["vit"], data=f"synthshapes:train,count={n},size={cfg['size']}", out=tmp,
                         epochs=2, batch_size=cfg["batch"], loss="fgsm_rs", device=str(device), amp=True)
        if cfg["vit"].startswith("vit_cifar"):
            tc.model_kwargs = {"img_size": cfg["size"]}
        t0 = time.perf_counter()
        train(tc, progress=False)
        total = time.perf_counter() - t0
        lines = [json.loads(s) for s in (Path(tmp) / "metrics.jsonl").read_text().splitlines() if s.strip()]
    epoch = float(lines[-1]["seconds"])    # the second epoch: the first also generates the images
    return {"images": n, "epoch_s": round(epoch, 2), "images_per_s": round(n / epoch, 1),
            "first_epoch_s": round(float(lines[0]["seconds"]), 2), "with_setup_s": round(total, 2)}


def step_engine(cfg: dict[str, Any], device: torch.device, dry: bool) -> dict[str, Any]:
    from robustvit.runs import UnitStore
    from robustvit.runs.scheduler import run_units

    m = model(cfg["vit"], cfg, device)
    x = torch.rand(cfg["batch"], 3, cfg["size"], cfg["size"], device=device)
    y = torch.zeros(cfg["batch"], dtype=torch.long, device=device)

    def unit() -> dict[str, Any]:
        with torch.no_grad(), inference_settings(m, precision="bf16"):
            return {"n": cfg["batch"], "top1": (m(x).argmax(1) == y).sum()}
    bare = seconds(unit, device, cfg["iters"])
    n = cfg["units"]
    with tempfile.TemporaryDirectory() as tmp, UnitStore(tmp) as store:
        def work(data: Any, c: int, pending: list[tuple[str, str]]):  # noqa: ANN202
            for u in pending:
                yield u, unit()
        t0 = time.perf_counter()
        run_units(store, n, lambda c: [("clean", "all")], work, device=device)
        sync(device)
        engine = (time.perf_counter() - t0) / n
    return {"unit_s": round(bare, 5), "engine_unit_s": round(engine, 5),
            "overhead": round(engine / bare - 1, 4)}


# ------------------------------------------------------------------------------------------ driver
def table(res: dict[str, Any]) -> str:
    """The Markdown table for docs/benchmarks.md."""
    rows = ["| measure | value | target |", "|---|---|---|"]
    fw = res.get("forward", {})
    for name, r in fw.items() if isinstance(fw, dict) else []:
        if isinstance(r, dict):
            rows.append(f"| {name} forward images/s ({', '.join(r)}) | {' / '.join(str(v) for v in r.values())} | |")
    for name, v in (res.get("compile") or {}).items():
        if isinstance(v, (int, float)) and name != "seconds":
            rows.append(f"| {name} forward images/s (bf16 + torch.compile) | {v} | |")
    c = res.get("corruptions", {})
    if "sweep_images_per_s" in c:
        rows.append(f"| corruption sweep images/s (19 × severity 3) | {c['sweep_images_per_s']} "
                    f"({c.get('vs_bf16_forward', '–')}× bf16 forward) | ≥ 0.8× |")
    for k, v in (res.get("loader") or {}).items():
        if not k.startswith("workers_") or k.endswith(("forward", "cores")):
            continue
        ratio = res["loader"].get(f"{k}_vs_bf16_forward", "–")
        what = k.replace("_decode_gpu", ", --decode gpu").replace("_", " ")
        rows.append(f"| loader images/s, {what} | {v} ({ratio}× bf16 forward) | ≥ 1.2× |")
    dec = (res.get("loader") or {}).get("decode_gpu")
    if isinstance(dec, dict):
        rows.append(f"| `--decode gpu` vs CPU decode, {dec['images']} files: mean / max pixel difference (grey levels), "
                    f"top-1 changed ({dec['weights']}) | {dec['mean_abs_grey_levels']} / {dec['max_abs_grey_levels']}, "
                    f"{100 * dec['top1_changed']:.1f} % | |")
    p = res.get("pgd", {})
    if "ratio" in p:
        rows.append(f"| PGD step / (forward + backward) | {p['ratio']} | ≤ 1.15 |")
    t = res.get("train", {})
    if "images_per_s" in t:
        rows.append(f"| FGSM-RS training images/s (bf16) | {t['images_per_s']} | |")
    e = res.get("engine", {})
    if "overhead" in e:
        rows.append(f"| engine overhead per unit | {100 * e['overhead']:.2f} % | ≤ 2 % |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="gpu-out")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (seconds): checks the script runs")
    p.add_argument("--steps", default="tests,forward,corruptions,loader,pgd,train,engine,compile")
    a = p.parse_args(argv)
    dry = a.dry_run
    cfg = DRY if dry else FULL
    device = torch.device("cpu" if dry or not torch.cuda.is_available() else "cuda")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                           "torch": torch.__version__, "python": platform.python_version(), "dry_run": dry,
                           "command": "python3 benchmarks/gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
                           "sizes": cfg}
    steps = [s.strip() for s in a.steps.split(",") if s.strip()]
    forward = None
    for name in steps:
        t0 = time.perf_counter()
        try:
            if name == "corruptions":
                got = step_corruptions(cfg, device, dry, forward)
            elif name == "loader":
                got = step_loader(cfg, device, dry, forward)
            else:
                got = globals()[f"step_{name}"](cfg, device, dry)
        except Exception as e:      # one failed step must not lose the others' figures
            got = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc().splitlines()[-6:]}
        got["seconds"] = round(time.perf_counter() - t0, 1)
        res[name] = got
        if name == "forward" and isinstance(got.get(cfg["vit"]), dict):
            forward = got[cfg["vit"]].get("bf16")
        print(f"[gpu.py] {name}: {json.dumps(got)[:300]}", flush=True)
        (out / "gpu.json").write_text(json.dumps(res, indent=1))
    (out / "gpu.md").write_text(f"Card: {res['device']}, torch {res['torch']}. Command: `{res['command']}`\n\n"
                                + table(res))
    print(table(res))
    failed = [n for n in steps if "error" in res.get(n, {})]
    return 1 if failed and dry else 0


if __name__ == "__main__":
    sys.exit(main())
