"""Reproduce the adversarial-training directions on real CIFAR-10, over seeds, with robustvit's own CLI.

Trains one small CIFAR model with each method (``ce``; ``fgsm_rs``, Wong et al. arXiv:2001.03994; ``pgd_at``,
Madry et al. arXiv:1706.06083; ``trades`` at two β, Zhang et al. arXiv:1901.08573; ``afat`` at three λ, Guo et
al., arXiv:2306.07881; FGSM-RS and PGD-AT at a large ε, Wong et al.'s catastrophic overfitting) and several seeds
through ``robustvit train`` on a class-stratified training sample, then evaluates every model with
``robustvit eval`` — clean accuracy, PGD-10 and AutoAttack's APGD-CE + APGD-T at 8/255, the mean over the 15
CIFAR-10-C benchmark corruptions × 5 severities (made in memory), patch occlusion at ρ 0.1–0.5 (and FGSM / PGD-10 at the run's own ε
when it differs) — and ``robustvit analyze attention_stability`` (AFAT's attention stability), all on
class-stratified test samples.

Resumable: each (method, seed) run trains into ``OUT/runs/<method>-s<seed>/train`` (``robustvit train --resume``
continues an interrupted one), evaluates into ``…/eval`` and ``…/analyze`` and, when all are done, writes
``OUT/runs/<method>-s<seed>.json`` (metrics, commands, git commit, machine, protocol). A run with that JSON is
skipped when the script is started again. ``--jobs N`` runs N (method, seed) pairs at once (several processes
may also share one ``--out``: a pair being run is claimed by a lock file). ``--table`` writes the Markdown
tables (mean ± std over seeds).

The data: the CIFAR-10 images in torchvision's ImageFolder layout (``train/<class>/*.jpg``, ``test/<class>/*.jpg``),
e.g. the JPEG copy extracted with ``tar xzf cifar10-jpg.tar.gz -C DIR``::

    python benchmarks/reproduce.py --data-root DIR --out bench-out/reproduce
    python benchmarks/reproduce.py --out bench-out/reproduce --table

The default protocol is sized for a 2-core CPU (10 runs × 3 seeds, about 45 minutes with ``--jobs 2``); it is
*not* the papers' full protocol (see ``docs/reproduction.md``): a 2,000-image training sample, 4 epochs, a
0.6 M-parameter ViT on a convolutional stem (``vit_cifar_demo``), PGD-2 inside training, small evaluation samples.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: run name → the loss and what differs from the protocol's defaults (``eps``: training ε; ``beta``: TRADES β;
#: ``lam``: AFAT's alignment weight λ). The order is the order of the work and of the tables.
RUNS: dict[str, dict[str, Any]] = {
    "ce": {"loss": "ce"},
    "fgsm_rs": {"loss": "fgsm_rs"},
    "pgd_at": {"loss": "pgd_at"},
    "trades": {"loss": "trades"},
    "afat": {"loss": "afat"},
    "trades_b1": {"loss": "trades", "beta": 1.0},
    "fgsm_rs_e16": {"loss": "fgsm_rs", "eps": "16/255"},
    "pgd_at_e16": {"loss": "pgd_at", "eps": "16/255"},
    "afat_l05": {"loss": "afat", "lam": 0.5},
    "afat_l50": {"loss": "afat", "lam": 50.0},
}
METHODS = tuple(RUNS)
#: the main table's columns: key of a run's record → heading
METRICS = (("clean", "clean"), ("pgd", "PGD-10"), ("autoattack", "AutoAttack"),
           ("corruption", "CIFAR-10-C mean"), ("occlusion", "occlusion ρ 0.1–0.5"),
           ("attention_stability", "attention stability"))
#: the large-ε table's columns (attacks at the run's own training ε)
LARGE_EPS_METRICS = (("clean", "clean"), ("fgsm_own", "FGSM at ε"), ("pgd_own", "PGD-10 at ε"),
                     ("pgd", "PGD-10 at 8/255"))
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


def run_setting(a: argparse.Namespace, method: str) -> dict[str, Any]:
    """The run's loss, ε (None for ce/afat), TRADES β and AFAT λ (None: the loss's default)."""
    r = RUNS[method]
    adversarial = r["loss"] in ("fgsm_rs", "pgd_at", "trades")
    return {"loss": r["loss"], "eps": r.get("eps", a.eps) if adversarial else None,
            "beta": r.get("beta", a.beta) if r["loss"] == "trades" else None, "lam": r.get("lam")}


def train_cmd(a: argparse.Namespace, method: str, seed: int, data: Path, out: Path, resume: bool) -> list[str]:
    st = run_setting(a, method)
    cmd = [sys.executable, "-m", "robustvit.cli", "train", "--model", a.model, "--data", f"folder:{data}",
           "--out", str(out), "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
           "--warmup-epochs", str(a.warmup_epochs), "--label-smoothing", "0", "--loss", st["loss"],
           "--seed", str(seed), "--device", "cpu"]
    if st["eps"]:
        cmd += ["--eps", st["eps"], "--eps-schedule", "constant"]
    if st["loss"] in ("pgd_at", "trades"):
        cmd += ["--attack-steps", str(a.attack_steps)]
    if st["beta"] is not None:
        cmd += ["--loss-option", f"beta={st['beta']}"]
    if st["lam"] is not None:
        cmd += ["--loss-option", f"lam={st['lam']}"]
    return cmd + (["--resume"] if resume else [])


def eval_cmd(a: argparse.Namespace, test: Path, ckpt: Path, out: Path, own_eps: str | None = None) -> list[str]:
    suites = [
        "clean",
        f"pgd:eps={a.eps}:steps=10:checks=0:limit={a.pgd_limit}",
        f"autoattack:eps={a.eps}:attacks=apgd_ce+apgd_t:checks=0:limit={a.aa_limit}",   # white-box members
        f"corruptions:corruptions=benchmark:severities=1-5:limit={a.corruption_limit}",
        f"patch_occlusion:rhos=0.1+0.2+0.3+0.4+0.5:masks=10:limit={a.pgd_limit}",
    ]
    if own_eps and own_eps != a.eps:        # the run's own ε: FGSM (as trained) against PGD-10
        suites += [f"fgsm:eps={own_eps}:checks=0:limit={a.pgd_limit}",
                   f"pgd:eps={own_eps}:steps=10:checks=0:limit={a.pgd_limit}"]
    return [sys.executable, "-m", "robustvit.cli", "eval", "--model", str(ckpt), "--data", f"folder:{test}",
            "--suite", ",".join(suites), "--limit", str(a.eval_limit), "--seed", "0", "--device", "cpu",
            "--no-progress", "--out", str(out)]


def analyze_cmd(a: argparse.Namespace, test: Path, ckpt: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "robustvit.cli", "analyze", "--model", str(ckpt), "--data", f"folder:{test}",
            "--limit", str(a.stability_limit), "--seed", "0", "--device", "cpu", "--no-progress", "--out", str(out),
            "attention_stability"]


def read_eval(results: Path, eps: str = "8/255", own_eps: str | None = None) -> dict[str, Any]:
    """The record's metrics from ``robustvit eval``'s results.json (suites found by name and ε)."""
    s = json.loads(results.read_text())["suites"]

    def find(prefix: str, at: str | None = None) -> dict[str, Any] | None:
        for k, v in s.items():
            if k.split(":")[0] == prefix and (at is None or f"eps={at}" in k.split(":")):
                return v
        return None

    clean, pgd, cor = find("clean"), find("pgd", eps) or find("pgd"), find("corruptions")
    aa, occ = find("autoattack"), find("patch_occlusion")
    rec: dict[str, Any] = {
        "clean": clean.get("top1", clean.get("accuracy")), "pgd": pgd["accuracy"], "pgd_clean": pgd["clean_accuracy"],
        "corruption": cor["mean_accuracy"], "corruption_clean": cor["clean_accuracy"],
        "num_images": {"clean": clean.get("num_images"), "pgd": pgd.get("num_images"),
                       "corruption": cor.get("num_images")},
        "pgd_settings": {k: pgd.get(k) for k in ("eps", "steps", "step_size", "restarts")}}
    if aa is not None:
        rec.update(autoattack=aa["accuracy"], autoattack_per_attack=aa.get("per_attack"),
                   autoattack_reduced=aa.get("reduced"))
        rec["num_images"]["autoattack"] = aa.get("num_images")
    if occ is not None:
        per = {r: v["mean_accuracy"] for r, v in occ["per_rho"].items()}
        rec.update(occlusion=statistics.mean(per.values()), occlusion_per_rho=per, occlusion_clean=occ["clean_accuracy"])
        rec["num_images"]["occlusion"] = occ.get("num_images")
    if own_eps and own_eps != eps:
        fgsm, pgd_own = find("fgsm", own_eps), find("pgd", own_eps)
        rec.update(fgsm_own=fgsm["accuracy"] if fgsm else None, pgd_own=pgd_own["accuracy"] if pgd_own else None)
    return rec


def read_stability(analysis: Path) -> dict[str, Any]:
    r = json.loads(analysis.read_text())
    return {"attention_stability": r["mean"], "attention_stability_per_layer": [statistics.mean(c) for c in r["cosine"]],
            "attention_stability_settings": {"rho": r["rho"], "images": r["num_images"], "masks": r["num_masks"]}}


def _claim(lock: Path) -> bool:
    """Claim a run for this process (a lock file holding the pid); a lock whose process is gone is taken over."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            pid = int(lock.read_text() or 0)
            os.kill(pid, 0)
            return pid == os.getpid()
        except (ValueError, ProcessLookupError, FileNotFoundError):
            lock.unlink(missing_ok=True)
            return _claim(lock)
        except PermissionError:
            return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def run_one(a: argparse.Namespace, method: str, seed: int, train_data: Path, n_train: int, test: Path) -> None:
    runs = Path(a.out) / "runs"
    name = f"{method}-s{seed}"
    summary, folder = runs / f"{name}.json", runs / name
    if summary.is_file():
        print(f"{name}: done, skipped")
        return
    folder.mkdir(parents=True, exist_ok=True)
    lock = runs / f"{name}.lock"
    if not _claim(lock):
        print(f"{name}: being run by another process, skipped")
        return
    try:
        _run(a, method, seed, train_data, n_train, test, summary, folder)
    finally:
        lock.unlink(missing_ok=True)


def _run(a: argparse.Namespace, method: str, seed: int, train_data: Path, n_train: int, test: Path,
         summary: Path, folder: Path) -> None:
    name, st = folder.name, run_setting(a, method)
    log = folder / "log.txt"
    t0 = time.time()
    tdir = folder / "train"
    if not (tdir / "checkpoint").is_dir():
        resume = (tdir / "last" / "train_state.pt").is_file()
        if not resume and tdir.exists():
            shutil.rmtree(tdir)
        print(f"{name}: training …", flush=True)
        run_cmd(train_cmd(a, method, seed, train_data, tdir, resume), log)
    t1 = time.time()
    edir, adir = folder / "eval", folder / "analyze"
    ecmd = eval_cmd(a, test, tdir / "checkpoint", edir, st["eps"])
    acmd = analyze_cmd(a, test, tdir / "checkpoint", adir)
    print(f"{name}: evaluating …", flush=True)
    run_cmd(ecmd, log)           # robustvit eval and analyze resume their own units
    run_cmd(acmd, log)
    t2 = time.time()
    epochs = [json.loads(line) for line in (tdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    record = {
        "method": method, "loss": st["loss"], "train_eps": st["eps"], "trades_beta": st["beta"],
        "afat_lam": st["lam"], "seed": seed,
        "model": a.model, **read_eval(edir / "results.json", a.eps, st["eps"]),
        **read_stability(adir / "attention_stability.json"),
        "train_log": epochs[-1] if epochs else None,
        "protocol": protocol(a, n_train),
        "commands": {"train": shown(train_cmd(a, method, seed, train_data, tdir, False)),
                     "eval": shown(ecmd), "analyze": shown(acmd)},
        "seconds": {"train_this_session": round(t1 - t0, 1), "eval": round(t2 - t1, 1),
                    "train_epochs": round(sum(e.get("seconds", 0) for e in epochs), 1)},
        "git_commit": git_commit(), "machine": machine(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = summary.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(summary)
    r = record
    print(f"{name}: clean {r['clean']:.3f}  pgd {r['pgd']:.3f}  autoattack {r.get('autoattack', float('nan')):.3f}  "
          f"corruption {r['corruption']:.3f}  occlusion {r.get('occlusion', float('nan')):.3f}  "
          f"({r['seconds']['train_epochs']:.0f} s training, {r['seconds']['eval']:.0f} s eval)", flush=True)


def protocol(a: argparse.Namespace, n_train: int) -> dict[str, Any]:
    return {"dataset": "CIFAR-10 (JPEG copy, ImageFolder layout)", "train_images": n_train,
            "train_per_class": a.train_per_class, "train_sample_seed": a.sample_seed, "epochs": a.epochs,
            "batch_size": a.batch_size, "lr": a.lr, "warmup_epochs": a.warmup_epochs, "label_smoothing": 0.0,
            "optimizer": "AdamW, cosine schedule (robustvit train defaults)", "eps": a.eps,
            "train_attack_steps": a.attack_steps, "trades_beta": a.beta, "eval_clean_images": a.eval_limit,
            "eval_pgd_images": a.pgd_limit, "eval_pgd": "PGD-10, step 2.5·ε/10, 1 random start",
            "eval_autoattack_images": a.aa_limit,
            "eval_autoattack": "APGD-CE + APGD-T, 100 iterations (AutoAttack's white-box members; no FAB-T, Square)",
            "eval_corruption_images": a.corruption_limit,
            "eval_corruptions": "15 benchmark corruptions × severities 1-5, CIFAR parameters, in memory",
            "eval_occlusion_images": a.pgd_limit, "eval_occlusion": "ρ 0.1-0.5 of the 4-px patches, noise, 10 masks",
            "eval_stability_images": a.stability_limit,
            "eval_stability": "attention_stability defaults: ρ 0.1, cosine of clean and occluded attention"}


# ---- table ---------------------------------------------------------------------------------------------
def load_runs(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def mean_std(values: list[float], scale: float = 100, digits: int = 1) -> str:
    if not values:
        return "–"
    m = statistics.mean(values) * scale
    if len(values) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(values) * scale:.{digits}f}"


def _rows(runs: list[dict[str, Any]], methods: list[str], metrics: tuple[tuple[str, str], ...]) -> list[str]:
    lines = ["| run | loss | seeds | " + " | ".join(t for _, t in metrics) + " |", "|" + "---|" * (3 + len(metrics))]
    for m in methods:
        rs = sorted((r for r in runs if r["method"] == m), key=lambda r: r["seed"])
        setting = [f"ε {rs[0]['train_eps']}"] if rs[0].get("train_eps") else []
        setting += [f"β {rs[0]['trades_beta']:g}"] if rs[0].get("trades_beta") is not None else []
        setting += [f"λ {rs[0]['afat_lam']:g}"] if rs[0].get("afat_lam") is not None else []
        loss = f"`{rs[0].get('loss', m)}`" + (f" ({', '.join(setting)})" if setting else "")
        cells = [mean_std([r[k] for r in rs if r.get(k) is not None], *((1, 3) if k == "attention_stability" else ()))
                 for k, _ in metrics]
        lines.append(f"| `{m}` | {loss} | {', '.join(str(r['seed']) for r in rs)} | " + " | ".join(cells) + " |")
    return lines


def table(runs: list[dict[str, Any]]) -> str:
    """The Markdown tables: every run at 8/255, then the runs trained at another ε at their own ε."""
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    methods += sorted({r["method"] for r in runs} - set(methods))
    p = runs[0]["protocol"]
    lines = _rows(runs, methods, METRICS)
    lines += ["", f"Accuracy in %, mean ± sample standard deviation over seeds (attention stability: mean cosine "
              f"similarity of clean and occluded attention maps). {runs[0]['model']}, {p['train_images']} training images ({p['train_per_class']} "
              f"per class), {p['epochs']} epochs, PGD-{p['train_attack_steps']} inside `pgd_at`/`trades`; attacks at "
              f"ε = {p['eps']}: clean on {p['eval_clean_images']} test images, PGD-10 on {p['eval_pgd_images']}, "
              f"AutoAttack on {p.get('eval_autoattack_images', '–')}, corruptions on {p['eval_corruption_images']}, "
              f"occlusion on {p.get('eval_occlusion_images', '–')}, attention stability on "
              f"{p.get('eval_stability_images', '–')} (class-stratified samples)."]
    large = [m for m in methods if any(r["method"] == m and r.get("pgd_own") is not None for r in runs)]
    if large:
        lines += ["", *_rows(runs, large, LARGE_EPS_METRICS), "",
                  "FGSM and PGD-10 at the run's own training ε, on the PGD images."]
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
    p.add_argument("--train-per-class", type=int, default=200)
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the training sample (the same for every run)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-epochs", type=float, default=0.5)
    p.add_argument("--eps", default="8/255")
    p.add_argument("--attack-steps", type=int, default=2, help="PGD steps inside pgd_at and trades")
    p.add_argument("--beta", type=float, default=6.0, help="TRADES β")
    p.add_argument("--eval-limit", type=int, default=500, help="test images for clean accuracy")
    p.add_argument("--pgd-limit", type=int, default=200, help="test images for PGD-10, FGSM and patch occlusion")
    p.add_argument("--aa-limit", type=int, default=100, help="test images for AutoAttack")
    p.add_argument("--corruption-limit", type=int, default=100)
    p.add_argument("--stability-limit", type=int, default=100, help="test images for attention stability")
    p.add_argument("--jobs", type=int, default=1, help="(method, seed) pairs run at once")
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
    unknown = sorted(set(methods) - set(RUNS))
    if unknown:
        sys.exit(f"unknown --methods {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    pairs = [(m, s) for m in methods for s in seeds]        # method-major: the main table fills first
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for f in [pool.submit(run_one, a, m, s, sample.resolve(), n_train, (root / "test").resolve())
                  for m, s in pairs]:
            f.result()
    print(table(load_runs(out)))


if __name__ == "__main__":
    main()
