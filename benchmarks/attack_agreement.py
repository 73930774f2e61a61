"""Do robustvit's attacks agree with the reference implementations?

Runs robustvit, torchattacks and (with ``--autoattack-path``) the original AutoAttack code
(github.com/fra31/auto-attack, checked out *outside* this repository) on the same trained model and the
same images, and checks:

* FGSM: identical adversarial images;
* PGD-10 from the same (zero) start: robust accuracy within 0.2 points (random-start rows: information);
* APGD-CE, APGD-T, AutoAttack: robustvit at most 0.5 points *above* the reference (lower = stronger, fine).

``--norm l1`` compares the L1 attacks with the original's L1 code (Croce & Hein 2021, "Mind the box"): APGD-CE
(APGD-L1, 100 steps, 1 restart), APGD-T (5 targets, the 3ε → 2ε → ε schedule) and AutoAttack's L1 ``standard``
version; criteria: robust accuracy at most the reference's (Δ ≤ 0) and time at most 1.1× the reference's. The
reference is ``--autoattack-path`` (a checkout of fra31/auto-attack) or, with ``--pyautoattack``, the
``pyautoattack`` package (PyPI: the original code, packaged).

The model: a small CNN (normalisation inside) trained in this script on CIFAR-10 images read straight
from ``--data`` (a CIFAR-10 JPEG tarball ``cifar10-jpg.tar.gz``; nothing is extracted into the repository),
or on the embedded synthshapes data when that file is absent; cached at ``--checkpoint``. torchattacks
3.5.1's AutoAttack crashes inside FAB on recent torch, so the torchattacks AutoAttack row is its
``MultiAttack([APGD(loss='ce'), APGDT()])`` (a lower bound on AutoAttack's strength); the full ensemble is
compared with the original code.

    .venv/bin/pip install torchattacks        # bench-only dependency
    git --git-dir=<mirror of fra31/auto-attack> worktree add /tmp/autoattack   # or git archive
    .venv/bin/python benchmarks/attack_agreement.py --autoattack-path /tmp/autoattack --out agreement.md
    .venv/bin/pip install pyautoattack       # bench-only dependency (the L1 rows)
    .venv/bin/python benchmarks/attack_agreement.py --norm l1 --eps 1.0 --pyautoattack --out agreement-l1.md
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from robustvit.attacks import create_attack, list_attacks  # noqa: E402
from robustvit.utils import parse_eps  # noqa: E402

#: Time runs by the process's CPU time instead of the wall clock (``--cpu-time``).
CPU_TIME = False
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "cifar10-jpg.tar.gz"
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


# ---- model --------------------------------------------------------------------------------------------
class SmallCNN(nn.Module):
    """A VGG-style CNN for 32×32 images (width 16: ~80 k parameters); normalisation inside, as robustvit's contract."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        w = width

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(*block(3, w), *block(w, w), nn.MaxPool2d(2), *block(w, 2 * w),
                                      *block(2 * w, 2 * w), nn.MaxPool2d(2), *block(2 * w, 4 * w), nn.MaxPool2d(2),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4 * w, num_classes)
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((x - self.mean) / self.std))


# ---- data ---------------------------------------------------------------------------------------------
def read_cifar_tar(path: Path, n_train: int, n_test: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Decode the first ``n/10`` images per class of each split straight from the tar.gz (no extraction)."""
    import numpy as np
    from PIL import Image

    quota = {"train": n_train // 10, "test": n_test // 10}
    out: dict[str, tuple[list, list]] = {"train": ([], []), "test": ([], [])}
    count: dict[tuple[str, int], int] = {}
    with tarfile.open(path, "r:gz") as tar:
        for m in tar:
            parts = Path(m.name).parts
            if not m.isfile() or len(parts) < 3 or parts[-3] not in quota or parts[-2] not in CIFAR_CLASSES:
                continue
            split, cls = parts[-3], CIFAR_CLASSES.index(parts[-2])
            if count.get((split, cls), 0) >= quota[split]:
                continue
            count[(split, cls)] = count.get((split, cls), 0) + 1
            img = Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB")
            out[split][0].append(torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1))
            out[split][1].append(cls)
    return {s: (torch.stack(xs), torch.tensor(ys)) for s, (xs, ys) in out.items()}


def load_data(data: str, n_train: int, n_test: int, seed: int) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], str]:
    """CIFAR-10 from the tar if present (else the embedded synthshapes); uint8 images, shuffled test split."""
    path = Path(data) if data != "synthetic" else None
    if path is not None and path.exists():
        splits, name = read_cifar_tar(path, n_train, n_test), "cifar10"
    else:
        if path is not None:
            print(f"[data] {path} not found: using the embedded synthshapes data set instead", flush=True)
        from robustvit.data.synthshapes import render_synthshapes

        tr = render_synthshapes(count=n_train, size=32, seed=seed)[:2]
        te = render_synthshapes(count=n_test, size=32, seed=seed + 1)[:2]
        splits, name = {"train": tr, "test": te}, "synthshapes"
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(splits["test"][1]), generator=g)
    splits["test"] = (splits["test"][0][perm], splits["test"][1][perm])
    return splits, name


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, device: torch.device,
          seed: int = 0, bs: int = 128) -> None:
    """Plain training: SGD + one-cycle, random crop (pad 4) and flip from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = epochs * ((len(y) + bs - 1) // bs)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps, pct_start=0.25)
    model.train()
    for ep in range(epochs):
        t0, perm, total = time.time(), torch.randperm(len(y), generator=g), 0.0
        for i in range(0, len(y), bs):
            idx = perm[i:i + bs]
            xb = augment(x[idx].float() / 255, g).to(device)
            loss = F.cross_entropy(model(xb), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        print(f"[train] epoch {ep + 1}/{epochs} loss {total / len(y):.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    n, _, h, w = x.shape
    flip = torch.rand(n, generator=g) < 0.5
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
    pad = F.pad(x, (4, 4, 4, 4), mode="reflect")
    dx, dy = torch.randint(0, 9, (2,), generator=g).tolist()  # one shift per batch: cheap and enough here
    return pad[:, :, dy:dy + h, dx:dx + w]


def get_model(args: argparse.Namespace, splits: dict, data_name: str, device: torch.device) -> nn.Module:
    ckpt = Path(args.checkpoint or
                f"/tmp/robustvit-bench/smallcnn{args.width}-{data_name}-{args.train_n}-{args.epochs}.pt")
    torch.manual_seed(args.seed)
    model = SmallCNN(width=args.width).to(device)
    if ckpt.exists():
        model.load_state_dict(torch.load(ckpt, map_location=device, weights_only=True))
        print(f"[model] loaded {ckpt}", flush=True)
    else:
        train(model, *splits["train"], epochs=args.epochs, device=device, seed=args.seed)
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), ckpt)
        print(f"[model] trained and saved to {ckpt}", flush=True)
    return model.eval()


# ---- runners ------------------------------------------------------------------------------------------
def batched(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            bs: int) -> tuple[torch.Tensor, float]:
    """Run ``fn`` over batches; returns (adversarial images, seconds: wall clock, or with ``CPU_TIME`` set the
    process's CPU time, which a loaded machine does not inflate when the run uses one thread)."""
    clock = time.process_time if CPU_TIME else time.perf_counter
    t0 = clock()
    outs = [fn(x[i:i + bs], y[i:i + bs]) for i in range(0, len(y), bs)]
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    return torch.cat(outs), clock() - t0


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, bs: int = 500) -> float:
    return sum((model(x[i:i + bs]).argmax(1) == y[i:i + bs]).sum().item() for i in range(0, len(y), bs)) / len(y)


def robustvit_runners(model: nn.Module, eps: float, seed: int) -> dict[str, Callable]:
    aa_members = ["apgd-ce", "apgd-t", "fab-t", "square"]
    have_full = all(m in list_attacks() for m in aa_members)
    aa_kw = dict(version="standard") if have_full else dict(version="custom", attacks=["apgd-ce", "apgd-t"])
    return {
        "fgsm": create_attack("fgsm", model, eps=eps),
        "pgd-10 (zero start)": create_attack("pgd", model, eps=eps, steps=10, step_size=eps / 4, random_start=False),
        "pgd-10 (random start)": create_attack("pgd", model, eps=eps, steps=10, step_size=eps / 4, seed=seed),
        "apgd-ce": create_attack("apgd-ce", model, eps=eps, steps=100, restarts=1, seed=seed),
        "apgd-t": create_attack("apgd-t", model, eps=eps, steps=100, restarts=1, n_target_classes=9, seed=seed),
        "apgd-ce + apgd-t": create_attack("autoattack", model, eps=eps, version="custom",
                                          attacks=["apgd-ce", "apgd-t"], seed=seed),
        "autoattack": create_attack("autoattack", model, eps=eps, seed=seed, **aa_kw),
    }


def robustvit_l1_runners(model: nn.Module, eps: float, seed: int) -> dict[str, Callable]:
    return {
        "apgd-ce": create_attack("apgd-ce", model, norm="l1", eps=eps, steps=100, restarts=1, seed=seed),
        "apgd-t": create_attack("apgd-t", model, norm="l1", eps=eps, steps=100, restarts=1, n_target_classes=5,
                                use_largereps=True, seed=seed),
        "autoattack": create_attack("autoattack", model, norm="l1", eps=eps, version="standard", seed=seed),
    }


def reference_l1_runners(model: nn.Module, eps: float, seed: int, device: torch.device,
                         path: str | None) -> dict[str, Callable]:
    """The original code's L1 attacks: a fra31/auto-attack checkout at ``path``, else the pyautoattack package."""
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
        from autoattack import AutoAttack
        from autoattack.autopgd_base import APGDAttack, APGDAttack_targeted
    else:
        from pyautoattack import AutoAttack
        from pyautoattack.autopgd_base import APGDAttack, APGDAttack_targeted
    dev = str(device)
    apgd = APGDAttack(model, n_iter=100, norm="L1", n_restarts=1, eps=eps, seed=seed, loss="ce", device=dev)
    apgdt = APGDAttack_targeted(model, n_iter=100, norm="L1", n_restarts=1, eps=eps, seed=seed,
                                n_target_classes=5, use_largereps=True, device=dev)

    def ensemble(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if path:
            aa = AutoAttack(model, norm="L1", eps=eps, version="standard", seed=seed, device=dev, verbose=False)
            return aa.run_standard_evaluation(x, y, bs=len(y))
        aa = AutoAttack(model, norm="L1", eps=eps, version="standard", seed=seed, device=dev)
        return aa.run_standard_evaluation(x, y, batch_size=len(y))[0]     # pyautoattack: (x_adv, y_adv)

    return {"apgd-ce": lambda x, y: apgd.perturb(x, y), "apgd-t": lambda x, y: apgdt.perturb(x, y),
            "autoattack": ensemble}


def torchattacks_runners(model: nn.Module, eps: float, seed: int) -> dict[str, Callable]:
    import torchattacks as ta

    apgd = ta.APGD(model, norm="Linf", eps=eps, steps=100, n_restarts=1, loss="ce", seed=seed)
    apgdt = ta.APGDT(model, norm="Linf", eps=eps, steps=100, n_restarts=1, n_classes=10, seed=seed)
    multi = ta.MultiAttack([ta.APGD(model, norm="Linf", eps=eps, steps=100, n_restarts=1, loss="ce", seed=seed),
                            ta.APGDT(model, norm="Linf", eps=eps, steps=100, n_restarts=1, n_classes=10, seed=seed)])
    return {
        "fgsm": ta.FGSM(model, eps=eps),
        "pgd-10 (zero start)": ta.PGD(model, eps=eps, alpha=eps / 4, steps=10, random_start=False),
        "pgd-10 (random start)": _seeded(ta.PGD(model, eps=eps, alpha=eps / 4, steps=10, random_start=True), seed),
        "apgd-ce": apgd, "apgd-t": apgdt, "apgd-ce + apgd-t": multi, "autoattack": multi,
    }


def _seeded(atk: Callable, seed: int) -> Callable:
    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(seed)
        return atk(x, y)
    return run


def original_runners(model: nn.Module, eps: float, seed: int, path: str, device: torch.device) -> dict[str, Callable]:
    sys.path.insert(0, str(Path(path).resolve()))
    from autoattack import AutoAttack
    from autoattack.autopgd_base import APGDAttack, APGDAttack_targeted

    dev = str(device)
    apgd = APGDAttack(model, n_iter=100, norm="Linf", n_restarts=1, eps=eps, seed=seed, loss="ce", device=dev)
    apgdt = APGDAttack_targeted(model, n_iter=100, norm="Linf", n_restarts=1, eps=eps, seed=seed,
                                n_target_classes=9, device=dev)

    def ensemble(version: str) -> Callable:
        def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            if version == "custom":
                aa = AutoAttack(model, norm="Linf", eps=eps, version="custom", attacks_to_run=["apgd-ce", "apgd-t"],
                                seed=seed, device=dev, verbose=False)
                aa.apgd.n_restarts, aa.apgd_targeted.n_target_classes = 1, 9
            else:
                aa = AutoAttack(model, norm="Linf", eps=eps, version=version, seed=seed, device=dev, verbose=False)
            return aa.run_standard_evaluation(x, y, bs=len(y))
        return run

    return {"apgd-ce": lambda x, y: apgd.perturb(x, y), "apgd-t": lambda x, y: apgdt.perturb(x, y),
            "apgd-ce + apgd-t": ensemble("custom"), "autoattack": ensemble("standard")}


# ---- comparison ---------------------------------------------------------------------------------------
CRITERIA = {"fgsm": "identical", "pgd-10 (zero start)": "|Δ| ≤ 0.2", "pgd-10 (random start)": "information",
            "apgd-ce": "Δ ≤ +0.5", "apgd-t": "Δ ≤ +0.5", "apgd-ce + apgd-t": "Δ ≤ +0.5", "autoattack": "Δ ≤ +0.5"}


#: L1: robust accuracy no higher than the original's and time within 1.1× of it.
L1_CRITERION = "Δ ≤ 0, time ≤ 1.1×"


def passes(name: str, ours: float, ref: float, max_diff: float | None, crit: str | None = None,
           time_ratio: float | None = None) -> bool | None:
    d = 100 * (ours - ref)
    crit = crit or CRITERIA[name]
    if crit == L1_CRITERION:
        return d <= 0 and time_ratio is not None and time_ratio <= 1.1
    if crit == "identical":
        return max_diff is not None and max_diff <= 1e-6 and ours == ref
    if crit.startswith("|Δ|"):
        return abs(d) <= 0.2
    if crit.startswith("Δ ≤"):
        return d <= 0.5
    return None


def compare(model: nn.Module, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace,
            device: torch.device) -> list[dict]:
    eps = parse_eps(args.eps)
    l1 = args.norm == "l1"
    ours = robustvit_l1_runners(model, eps, args.seed) if l1 else robustvit_runners(model, eps, args.seed)
    refs: dict[str, dict[str, Callable]] = {}
    if l1:
        if args.autoattack_path or args.pyautoattack:
            ref = "original AutoAttack" if args.autoattack_path else "pyautoattack"
            refs[ref] = reference_l1_runners(model, eps, args.seed, device, args.autoattack_path)
    else:
        try:
            refs["torchattacks"] = torchattacks_runners(model, eps, args.seed)
        except ImportError:
            print("[ref] torchattacks is not installed (pip install torchattacks): skipping it", flush=True)
    if args.autoattack_path and not l1:
        refs["original AutoAttack"] = original_runners(model, eps, args.seed, args.autoattack_path, device)
    rows = []
    wanted = [a.strip() for a in args.attacks.split(",")] if args.attacks else list(ours)
    for name in ours:
        if not any(name.startswith(w) for w in wanted):
            continue
        adv, t = batched(ours[name], x, y, args.bs)
        acc = accuracy(model, adv, y)
        size = (adv - x).flatten(1).abs().sum(1).max().item() if l1 else (adv - x).abs().amax().item() * 255
        print(f"[robustvit] {name}: {acc:.2%} ({t:.1f} s, max {'‖δ‖₁' if l1 else '|δ|'} {size:.3f}"
              f"{'' if l1 else '/255'})", flush=True)
        if name == "autoattack":
            print(f"[robustvit] autoattack report: {ours[name].last_report['per_attack']}", flush=True)
        for ref_name, runners in refs.items():
            if name not in runners:
                continue
            radv, rt = batched(runners[name], x, y, args.bs)
            racc = accuracy(model, radv, y)
            max_diff = (adv - radv).abs().max().item()
            label = name
            if ref_name == "torchattacks" and name == "autoattack":
                label += " (torchattacks: MultiAttack APGD-CE + APGD-T)"
            crit = L1_CRITERION if l1 else CRITERIA[name]
            ok = passes(name, acc, racc, max_diff, crit, t / max(rt, 1e-9))
            if l1:
                rsize = (radv - x).flatten(1).abs().sum(1).max().item()
                print(f"  reference max ‖δ‖₁ {rsize:.3f}", flush=True)
            rows.append({"attack": label, "reference": ref_name, "robustvit": acc, "reference_acc": racc,
                         "diff_points": 100 * (acc - racc), "max_abs_image_diff": max_diff,
                         "criterion": crit, "pass": ok, "robustvit_s": t, "reference_s": rt,
                         "robustvit_members": ours[name].member_names() if name == "autoattack" else None})
            print(f"  vs {ref_name}: {racc:.2%} (Δ {100 * (acc - racc):+.2f} points, {rt:.1f} s) "
                  f"-> {'PASS' if ok else 'FAIL' if ok is False else 'info'}", flush=True)
    return rows


def to_markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"Model: {meta['model']}, clean accuracy {meta['clean']:.2%} on {meta['n']} {meta['data']} test images; "
             f"{meta.get('norm', 'L∞')} ε = {meta['eps']}; seed {meta['seed']}; device {meta['device']}; "
             f"torch {meta['torch']}; {meta['threads']} thread(s); times: {meta['clock']}.", "",
             "| attack | reference | robustvit | reference | Δ (points) | criterion | result | time robustvit / ref |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = {True: "pass", False: "**FAIL**", None: "—"}[r["pass"]]
        lines.append(f"| {r['attack']} | {r['reference']} | {r['robustvit']:.2%} | {r['reference_acc']:.2%} | "
                     f"{r['diff_points']:+.2f} | {r['criterion']} | {res} | {r['robustvit_s']:.1f} s / "
                     f"{r['reference_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def write_report(md: str, meta: dict, rows: list, out: str | None) -> None:
    """Print the Markdown table ``md``; with ``out``, write it there (or, for a ``.json`` path, ``meta`` and
    ``rows``). Shared by the agreement benchmarks."""
    print("\n" + md)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) if path.suffix == ".json" else md)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="cifar10-jpg.tar.gz, or 'synthetic'")
    p.add_argument("--checkpoint", default=None, help="model cache (loaded if present, else trained and saved)")
    p.add_argument("--train-n", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=16, help="SmallCNN width (16: ~80 k parameters)")
    p.add_argument("--n", type=int, default=500, help="test images attacked")
    p.add_argument("--eps", default="1/255")
    p.add_argument("--bs", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--attacks", default="", help="comma-separated subset (prefixes), e.g. fgsm,pgd,apgd-ce")
    p.add_argument("--autoattack-path", default=None, help="folder holding the original 'autoattack' package")
    p.add_argument("--pyautoattack", action="store_true", help="L1: the reference is the pyautoattack package")
    p.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time (with --threads 1: "
                                                           "robust to other work on a shared machine)")
    p.add_argument("--norm", choices=("linf", "l1"), default="linf", help="threat model compared (l1: the L1 rows)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="write a .json or .md summary")
    args = p.parse_args(argv)
    global CPU_TIME
    CPU_TIME = args.cpu_time
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    splits, data_name = load_data(args.data, args.train_n, max(args.n, 10), args.seed)
    model = get_model(args, splits, data_name, device)
    x = splits["test"][0][: args.n].float().div(255).to(device)
    y = splits["test"][1][: args.n].to(device)
    clean = accuracy(model, x, y)
    print(f"[model] clean accuracy {clean:.2%} on {len(y)} {data_name} test images", flush=True)
    rows = compare(model, x, y, args, device)
    meta = {"model": f"SmallCNN width {args.width} (benchmarks/attack_agreement.py)", "data": data_name, "n": len(y), "clean": clean,
            "eps": args.eps, "norm": {"linf": "L∞", "l1": "L1"}[args.norm], "seed": args.seed,
            "clock": "process CPU time" if args.cpu_time else "wall clock", "device": str(device), "torch": torch.__version__,
            "threads": torch.get_num_threads()}
    write_report(to_markdown(meta, rows), meta, rows, args.out)
    return 0 if all(r["pass"] is not False for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
