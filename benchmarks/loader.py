"""Images per second of the evaluation data path: today's ``get_batch`` (float, in the main process) against
``robustvit.data.loader`` (uint8 transport, workers 0 and auto), on the same images, chunks and machine.

Data (ImageFolder layout, read by ``folder:``):

* **CIFAR-10 JPEGs**: the 10,000 test images of ``../shared/data/cifar10-jpg.tar.gz`` (32 px, read as stored:
  ``Resize(32, crop_pct=1.0)``), extracted into a temporary folder; skipped when the archive is absent
  (``--cifar PATH``: the archive or an extracted root holding ``test/``).
* **generated 224-px JPEGs**: ``--images`` (2,000) smooth random images, JPEG quality 90, written to a temporary
  folder in 10 class folders, read with the preprocessing of ``--model`` (vit_base_patch16_224: timm's
  pretrained config, shorter side to 248 = 224 / 0.9, bicubic, centre crop 224).

Paths timed, each over every image in chunks of ``--batch-size``, ending with float (N, 3, H, W) on ``--device``:

* ``old get_batch``: ``ds.get_batch(ids)`` chunk after chunk (today's ``--workers 0``; files on 8 threads);
* ``old DataLoader``: today's ``--workers N`` (a DataLoader over ``ds[i]`` float items, default collate);
* ``loader w=0``: ``iter_chunks(..., workers=0)`` (uint8, one background reading thread, 2 chunks ahead);
* ``loader w=auto``: ``iter_chunks(..., workers="auto")`` (worker processes, started inside the timing);
* with ``--consumer-ms``, also ``loader w=0`` without read-ahead (``prefetch=0``: what the reading thread buys).

``--consumer-ms M`` adds a wait of M ms per batch in the consumer (``time.sleep``: it holds no core, like a
process waiting for its GPU) to show what reading ahead overlaps; 0 times reading alone. Each path runs
``--repeats`` times, interleaved (each repeat starts with the next path), in this one plain process; the table
shows the median and the ratio to ``old get_batch``. The machine line records the load average, since other
processes on a shared machine move these numbers. ``--decode gpu`` adds the nvjpeg path (needs CUDA and
``--device cuda``)::

    python benchmarks/loader.py --repeats 3
    python benchmarks/loader.py --repeats 3 --consumer-ms 100 --skip-cifar
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from robustvit.data import create_dataset
from robustvit.data.base import ImageDataset, Resize
from robustvit.data.loader import available_cores, check_decode, iter_chunks, resolve_workers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_throughput import make_folder  # noqa: E402  (the same generated JPEGs as the evaluation benchmark)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-jpg.tar.gz"


def cifar_folder(arg: Path, tmp: Path) -> Path | None:
    """The CIFAR-10 JPEG test split: ``arg/test`` of an extracted root, or extracted from the archive."""
    if arg.is_dir():
        return arg / "test" if (arg / "test").is_dir() else arg
    if not arg.is_file():
        return None
    with tarfile.open(arg) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[0] == "test" or "/test/" in f"/{m.name}"]
        tar.extractall(tmp, members=members, filter="data")
    found = next(tmp.rglob("test"), None)
    return found


def model_preprocessing(name: str) -> Resize:
    """A timm model's evaluation preprocessing from its pretrained config (no weights are built or fetched)."""
    import timm

    cfg = timm.models.get_pretrained_cfg(name)
    return Resize(int(cfg.input_size[-1]), float(cfg.crop_pct), str(cfg.interpolation))


def chunks(n: int, b: int) -> Iterator[torch.Tensor]:
    for i in range(0, n, b):
        yield torch.arange(i, min(n, i + b))


def old_get_batch(ds: ImageDataset, b: int, device: torch.device) -> Iterator[torch.Tensor]:
    for ids in chunks(len(ds), b):
        x, _ = ds.get_batch(ids)
        yield x.to(device, non_blocking=True)


def old_dataloader(ds: ImageDataset, b: int, device: torch.device, workers: int) -> Iterator[torch.Tensor]:
    loader = DataLoader(ds, batch_sampler=[t.tolist() for t in chunks(len(ds), b)], num_workers=workers)
    for x, _ in loader:
        yield x.to(device, non_blocking=True)


def new_loader(ds: ImageDataset, b: int, device: torch.device, workers: int | str, decode: str = "cpu",
               prefetch: int = 2) -> Iterator[torch.Tensor]:
    for x, _ in iter_chunks(ds, chunks(len(ds), b), workers=workers, device=device, decode=decode, prefetch=prefetch):
        yield x


def timed(make: Callable[[], Iterator[torch.Tensor]], n: int, device: torch.device, wait: float) -> float:
    """Images per second of one pass (the consumer touches each batch; on CUDA, synchronised at the end)."""
    t0 = time.perf_counter()
    seen = 0
    for x in make():
        seen += len(x)
        if wait:
            time.sleep(wait)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    assert seen == n, (seen, n)
    return n / (time.perf_counter() - t0)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    try:
        return f"{__import__('os').getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar", type=Path, default=SHARED, help="cifar10-jpg.tar.gz or its extracted root")
    p.add_argument("--skip-cifar", action="store_true")
    p.add_argument("--images", type=int, default=2000, help="generated 224-px JPEGs")
    p.add_argument("--model", default="vit_base_patch16_224", help="whose preprocessing reads the generated JPEGs")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--decode", choices=["cpu", "gpu"], default="cpu", help="gpu: add the nvjpeg path")
    p.add_argument("--consumer-ms", type=float, default=0.0, help="wait per batch in the consumer (a GPU stand-in)")
    a = p.parse_args(argv)
    load_before = _load()
    device = torch.device(a.device)
    check_decode(a.decode, device)               # --decode gpu: refused at once without --device cuda
    auto = resolve_workers("auto")
    wait = a.consumer_ms / 1000
    rows: list[tuple[str, str, float, float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sets: list[tuple[str, ImageDataset]] = []
        if not a.skip_cifar:
            root = cifar_folder(a.cifar, Path(tmp) / "cifar")
            if root is None:
                print(f"(CIFAR-10 JPEGs skipped: {a.cifar} not found)", file=sys.stderr)
            else:
                sets.append(("CIFAR-10 test JPEGs, 32 px as stored", create_dataset(f"folder:{root}",
                                                                                    image_size=Resize(32, 1.0))))
        r = model_preprocessing(a.model)
        gen = make_folder(Path(tmp) / "gen", a.images, size=224)
        sets.append((f"{a.images} generated 224-px JPEGs, {a.model} preprocessing "
                     f"({int(r.size / r.crop_pct)}→{r.size} {r.interpolation})", create_dataset(f"folder:{gen}",
                                                                                             image_size=r)))
        for label, ds in sets:
            b, n = a.batch_size, len(ds)
            paths: dict[str, Callable[[], Iterator[torch.Tensor]]] = {
                "old get_batch (float, main process)": lambda ds=ds: old_get_batch(ds, b, device),
                f"old DataLoader (float, workers={auto})": lambda ds=ds: old_dataloader(ds, b, device, auto),
                "loader workers=0 (uint8, reading thread)": lambda ds=ds: new_loader(ds, b, device, 0),
                f"loader workers=auto={auto} (uint8)": lambda ds=ds: new_loader(ds, b, device, "auto"),
            }
            if wait:            # what the reading thread buys: the same reads without read-ahead
                paths["loader workers=0, no read-ahead (prefetch=0)"] = lambda ds=ds: new_loader(ds, b, device, 0,
                                                                                                 prefetch=0)
            if a.decode == "gpu":
                paths[f"loader workers=auto={auto}, decode gpu"] = lambda ds=ds: new_loader(ds, b, device, "auto",
                                                                                            "gpu")
            runs: dict[str, list[float]] = {k: [] for k in paths}
            names = list(paths)
            for r in range(a.repeats):                  # interleaved, each repeat starting with another path
                for k in names[r % len(names):] + names[:r % len(names)]:
                    runs[k].append(timed(paths[k], n, device, wait))
            base = statistics.median(runs[next(iter(paths))])
            for k in paths:
                med = statistics.median(runs[k])
                rows.append((label, k, med, med / base, n))
                print(f"{label} | {k}: {med:.0f} images/s ({', '.join(f'{v:.0f}' for v in runs[k])})", file=sys.stderr)
    args = argv if argv is not None else sys.argv[1:]
    cmd = "python benchmarks/loader.py " + " ".join(shlex.quote(s) for s in args)
    print(f"\nCommand: `{cmd.strip()}`  ")
    print(f"Machine: {cpu_name()}, nproc {available_cores()} (workers auto = {auto}), device {device}, "
          f"python {platform.python_version()}, torch {torch.__version__}, torch threads {torch.get_num_threads()}; "
          f"batch {a.batch_size}, consumer wait {a.consumer_ms:g} ms/batch, median of {a.repeats}; load average "
          f"{load_before} before, {_load()} after (other processes on the machine).\n")
    print("| data | path | images/s | vs old get_batch |")
    print("|---|---|---:|---:|")
    for label, k, med, ratio, _ in rows:
        print(f"| {label} | {k} | {med:,.0f} | {ratio:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
