"""Reproduce the adversarial-training directions on real CIFAR-10, over seeds, with robustvit's own CLI.

Trains one small CIFAR model with each method (``ce``; ``fgsm_rs``, Wong et al. arXiv:2001.03994; ``pgd_at``,
Madry et al. arXiv:1706.06083; ``trades``, Zhang et al. arXiv:1901.08573) and several seeds through
``robustvit train`` on a class-stratified training sample, then evaluates every model with ``robustvit eval``:
clean accuracy, PGD-10 at the training ε and the mean over the 15 CIFAR-10-C benchmark corruptions × 5
severities (made in memory) on class-stratified test samples.

Resumable: each (method, seed) run trains into ``OUT/runs/<method>-s<seed>/train`` (``robustvit train --resume``
continues an interrupted one), evaluates into ``…/eval`` and, when both are done, writes
``OUT/runs/<method>-s<seed>.json`` (metrics, commands, git commit, machine, protocol). A run with that JSON is
skipped when the script is started again. ``--table`` writes the Markdown table (mean ± std over seeds).

The data: the CIFAR-10 images in torchvision's ImageFolder layout (``train/<class>/*.jpg``, ``test/<class>/*.jpg``),
e.g. the JPEG copy extracted with ``tar xzf cifar10-jpg.tar.gz -C DIR``::

    python benchmarks/reproduce.py --data-root DIR --out bench-out/reproduce
    python benchmarks/reproduce.py --out bench-out/reproduce --table

The default protocol is sized for a 2-core CPU shared with other work (about an hour at a fraction of a
core); it is *not* the papers' full protocol (see ``docs/reproduction.md``): a 1,000-image training sample,
3 epochs, a 0.6 M-parameter ViT on a convolutional stem (``vit_cifar_demo``), PGD-2 inside training, small
evaluation samples.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("ce", "fgsm_rs", "pgd_at", "trades")
METRICS = (("clean", "clean accuracy"), ("pgd", "PGD-10 accuracy"), ("corruption", "CIFAR-10-C mean accuracy"))
IMG_EXT = (".jpg", ".jpeg", ".png")


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "device": "cpu"}


def stratified_sample(root: Path, per_class: int, out: Path, seed: int) -> int:
    """Copy ``per_class`` seeded random images of each class of ``root`` into ``out`` (same layout); returns
    the number of images. Skipped when ``out`` already holds the sample (marker file ``.complete``)."""
    if (out / ".complete").is_file():
        return int((out / ".complete").read_text())
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")   # built aside, then renamed: parallel runs may race
    rng = random.Random(seed)
    n = 0
    for cls in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(f for f in cls.iterdir() if f.suffix.lower() in IMG_EXT)
        if len(files) < per_class:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(f"{cls} has {len(files)} images, fewer than --train-per-class {per_class}")
        (tmp / cls.name).mkdir(parents=True)
        for f in sorted(rng.sample(files, per_class)):
            shutil.copyfile(f, tmp / cls.name / f.name)
            n += 1
    (tmp / ".complete").write_text(str(n))
    if out.exists() and not (out / ".complete").is_file():
        shutil.rmtree(out)                      # an unfinished sample of an older version
    try:
        tmp.rename(out)
    except OSError:                             # another process finished the same sample first
        shutil.rmtree(tmp)
    return n


def run_cmd(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with log.open("a") as f:
        f.write(f"\n$ {shlex.join(cmd)}\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        sys.exit(f"command failed (exit {r.returncode}); see {log}: {shlex.join(cmd)}")


def shown(cmd: list[str]) -> str:
    """The command as a user types it (``robustvit …`` instead of ``python -m robustvit.cli …``)."""
    return shlex.join(["robustvit", *cmd[3:]]) if cmd[1:3] == ["-m", "robustvit.cli"] else shlex.join(cmd)


def train_cmd(a: argparse.Namespace, method: str, seed: int, data: Path, out: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "robustvit.cli", "train", "--model", a.model, "--data", f"folder:{data}",
           "--out", str(out), "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
           "--warmup-epochs", str(a.warmup_epochs), "--label-smoothing", "0", "--loss", method, "--seed", str(seed),
           "--device", "cpu"]
    if method != "ce":
        cmd += ["--eps", a.eps, "--eps-schedule", "constant"]
    if method in ("pgd_at", "trades"):
        cmd += ["--attack-steps", str(a.attack_steps)]
    if method == "trades":
        cmd += ["--loss-option", f"beta={a.beta}"]
    return cmd + (["--resume"] if resume else [])


def eval_cmd(a: argparse.Namespace, test: Path, ckpt: Path, out: Path) -> list[str]:
    suites = ",".join([
        "clean",
        f"pgd:eps={a.eps}:steps=10:checks=0:limit={a.pgd_limit}",
        f"corruptions:corruptions=benchmark:severities=1-5:limit={a.corruption_limit}",
    ])
    return [sys.executable, "-m", "robustvit.cli", "eval", "--model", str(ckpt), "--data", f"folder:{test}",
            "--suite", suites, "--limit", str(a.eval_limit), "--seed", "0", "--device", "cpu", "--no-progress",
            "--out", str(out)]


def read_eval(results: Path) -> dict[str, Any]:
    r = json.loads(results.read_text())
    s = r["suites"]

    def find(prefix: str) -> dict[str, Any]:
        return next(v for k, v in s.items() if k.split(":")[0] == prefix)

    pgd, cor, clean = find("pgd"), find("corruptions"), find("clean")
    return {"clean": clean.get("top1", clean.get("accuracy")), "pgd": pgd["accuracy"],
            "pgd_clean": pgd["clean_accuracy"], "corruption": cor["mean_accuracy"],
            "corruption_clean": cor["clean_accuracy"], "num_images": {
                "clean": clean.get("num_images"), "pgd": pgd.get("num_images"), "corruption": cor.get("num_images")},
            "pgd_settings": {k: pgd.get(k) for k in ("eps", "steps", "step_size", "restarts")}}


def run_one(a: argparse.Namespace, method: str, seed: int, train_data: Path, n_train: int, test: Path) -> None:
    runs = Path(a.out) / "runs"
    name = f"{method}-s{seed}"
    summary, folder = runs / f"{name}.json", runs / name
    if summary.is_file():
        print(f"{name}: done, skipped")
        return
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    t0 = time.time()
    tdir = folder / "train"
    if not (tdir / "checkpoint").is_dir():
        resume = (tdir / "last" / "train_state.pt").is_file()
        if not resume and tdir.exists():
            shutil.rmtree(tdir)
        tcmd = train_cmd(a, method, seed, train_data, tdir, resume)
        print(f"{name}: training …", flush=True)
        run_cmd(tcmd, log)
    t1 = time.time()
    edir = folder / "eval"
    ecmd = eval_cmd(a, test, tdir / "checkpoint", edir)
    print(f"{name}: evaluating …", flush=True)
    run_cmd(ecmd, log)           # robustvit eval resumes its own units
    t2 = time.time()
    epochs = [json.loads(line) for line in (tdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    record = {
        "method": method, "seed": seed, "model": a.model, **read_eval(edir / "results.json"),
        "train_log": epochs[-1] if epochs else None,
        "protocol": protocol(a, n_train),
        "commands": {"train": shown(train_cmd(a, method, seed, train_data, tdir, False)),
                     "eval": shown(ecmd)},
        "seconds": {"train_this_session": round(t1 - t0, 1), "eval": round(t2 - t1, 1),
                    "train_epochs": round(sum(e.get("seconds", 0) for e in epochs), 1)},
        "git_commit": git_commit(), "machine": machine(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = summary.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(summary)
    r = record
    print(f"{name}: clean {r['clean']:.3f}  pgd {r['pgd']:.3f}  corruption {r['corruption']:.3f}  "
          f"({r['seconds']['train_epochs']:.0f} s training, {r['seconds']['eval']:.0f} s eval)", flush=True)


def protocol(a: argparse.Namespace, n_train: int) -> dict[str, Any]:
    return {"dataset": "CIFAR-10 (JPEG copy, ImageFolder layout)", "train_images": n_train,
            "train_per_class": a.train_per_class, "train_sample_seed": a.sample_seed, "epochs": a.epochs,
            "batch_size": a.batch_size, "lr": a.lr, "warmup_epochs": a.warmup_epochs, "label_smoothing": 0.0,
            "optimizer": "AdamW, cosine schedule (robustvit train defaults)", "eps": a.eps,
            "train_attack_steps": a.attack_steps, "trades_beta": a.beta, "eval_clean_images": a.eval_limit,
            "eval_pgd_images": a.pgd_limit, "eval_pgd": "PGD-10, step 2.5·ε/10, 1 random start",
            "eval_corruption_images": a.corruption_limit,
            "eval_corruptions": "15 benchmark corruptions × severities 1-5, CIFAR parameters, in memory"}


# ---- table ---------------------------------------------------------------------------------------------
def load_runs(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    m = statistics.mean(values) * 100
    s = statistics.stdev(values) * 100 if len(values) > 1 else float("nan")
    return f"{m:.1f} ± {s:.1f}" if len(values) > 1 else f"{m:.1f}"


def table(runs: list[dict[str, Any]]) -> str:
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    methods += sorted({r["method"] for r in runs} - set(methods))
    head = "| method | seeds | " + " | ".join(t for _, t in METRICS) + " |"
    lines = [head, "|" + "---|" * (2 + len(METRICS))]
    for m in methods:
        rs = [r for r in runs if r["method"] == m]
        seeds = ", ".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))
        lines.append(f"| `{m}` | {seeds} | " + " | ".join(mean_std([r[k] for r in rs]) for k, _ in METRICS) + " |")
    if runs:
        p = runs[0]["protocol"]
        lines.append("")
        lines.append(f"Accuracy in %, mean ± sample standard deviation over seeds. {runs[0]['model']}, "
                     f"{p['train_images']} training images ({p['train_per_class']} per class), {p['epochs']} epochs, "
                     f"ε = {p['eps']} (PGD-{p['train_attack_steps']} inside `pgd_at`/`trades`, TRADES β = "
                     f"{p['trades_beta']}); clean on {p['eval_clean_images']} test images, PGD-10 at ε on "
                     f"{p['eval_pgd_images']}, corruptions on {p['eval_corruption_images']} (stratified samples).")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", help="folder holding train/<class>/ and test/<class>/ (CIFAR-10 ImageFolder)")
    p.add_argument("--out", default="bench-out/reproduce", help="output folder (default: bench-out/reproduce)")
    p.add_argument("--table", action="store_true", help="write OUT/table.md from the finished runs and print it")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--model", default="vit_cifar_demo")
    p.add_argument("--train-per-class", type=int, default=100)
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the training sample (the same for every run)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-epochs", type=float, default=0.5)
    p.add_argument("--eps", default="8/255")
    p.add_argument("--attack-steps", type=int, default=2, help="PGD steps inside pgd_at and trades")
    p.add_argument("--beta", type=float, default=6.0, help="TRADES β")
    p.add_argument("--eval-limit", type=int, default=500, help="test images for clean accuracy")
    p.add_argument("--pgd-limit", type=int, default=100)
    p.add_argument("--corruption-limit", type=int, default=30)
    a = p.parse_args()
    out = Path(a.out)
    if a.table:
        runs = load_runs(out)
        if not runs:
            sys.exit(f"no finished runs in {out / 'runs'}")
        text = table(runs)
        (out / "table.md").write_text(text)
        print(text)
        return
    if not a.data_root:
        sys.exit("--data-root DIR is needed (DIR/train/<class>/*.jpg, DIR/test/<class>/*.jpg)")
    root = Path(a.data_root)
    if not (root / "train").is_dir() or not (root / "test").is_dir():
        sys.exit(f"{root} must hold train/ and test/ in ImageFolder layout (tar xzf cifar10-jpg.tar.gz -C {root})")
    out.mkdir(parents=True, exist_ok=True)
    sample = out / f"train-{a.train_per_class}pc-s{a.sample_seed}"
    n_train = stratified_sample(root / "train", a.train_per_class, sample, a.sample_seed)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    for seed in seeds:                 # seed-major: every method of a seed before the next seed
        for method in methods:
            run_one(a, method, seed, sample.resolve(), n_train, (root / "test").resolve())
    print(table(load_runs(out)))


if __name__ == "__main__":
    main()
