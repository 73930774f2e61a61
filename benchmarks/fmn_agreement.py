"""Does robustvit's FMN agree with adv_lib's (the PyPI implementation of Pintor et al.'s attack)?

Runs ``create_attack("fmn", …)`` and ``adv_lib.attacks.fast_minimum_norm.fmn`` (adv-lib 0.2.8) with the same
steps and schedules (α₀ = 1, α_K = α₀/100, γ₀ = 0.05, γ_K = 0.001) on the same trained model and images, in L∞,
L2 and L1, and reports per norm: the median minimum-norm distance over the correctly classified images, robust
accuracy at three ε read from each curve, the fraction of images whose distances agree within 0.1 %, and the
time of each. Criterion: robustvit's median distance at most 1 % above adv_lib's (smaller = stronger).

adv_lib 0.2.8's L2 projection rescales δ onto the ε-sphere even inside the ball (robustvit, as the authors'
code, leaves such a δ unchanged); with α₀ = 1 the step leaves the ball at almost every iteration, so both
agree in practice (the table shows it).

The model: ``benchmarks/attack_agreement.py``'s SmallCNN trained on CIFAR-10 (``--data`` the JPEG tarball; the
embedded synthshapes when absent), cached at ``--checkpoint``. adv-lib's requirement ``visdom`` (for its optional
logger) no longer builds on Python 3.11, so install adv-lib alone; this script stubs ``visdom`` before the import::

    .venv/bin/pip install --no-deps adv-lib==0.2.8
    .venv/bin/python benchmarks/fmn_agreement.py --data ../shared/data/cifar10-jpg.tar.gz --out fmn.md

``--figure DIR`` instead evaluates the same model with ``robustvit.evaluate`` on the first ``--figure-n`` test
images — ``min_norm`` (L∞, L2) beside PGD and APGD-CE at fixed ε — and writes the report to ``DIR/report`` (its
``figures/min_norm*.png`` are docs/attacks.md's figures).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from attack_agreement import DEFAULT_DATA, accuracy, get_model, load_data, write_report  # noqa: E402
from robustvit.attacks import create_attack  # noqa: E402
from robustvit.attacks.base import lp_norm  # noqa: E402
from robustvit.evaluation.suites.min_norm import accuracy_at, accuracy_curve, quantile  # noqa: E402

P = {"linf": float("inf"), "l2": 2, "l1": 1}
#: ε at which the curves are compared (CIFAR-scale budgets: ½, 1 and 2 × the usual one).
EPS = {"linf": (1 / 255, 2 / 255, 4 / 255), "l2": (0.1, 0.25, 0.5), "l1": (1.0, 3.0, 6.0)}


def reference_fmn():
    sys.modules.setdefault("visdom", types.ModuleType("visdom"))     # adv_lib's logger only; not used here
    from adv_lib.attacks.fast_minimum_norm import fmn

    return fmn


def distances_ours(model, x, y, norm, steps, bs):
    out, t0 = [], time.perf_counter()
    for i in range(0, len(y), bs):
        atk = create_attack("fmn", model, norm=norm, steps=steps)
        atk(x[i:i + bs], y[i:i + bs])
        out.append(atk.last_distance)
    return torch.cat(out), time.perf_counter() - t0


def distances_ref(fmn, model, x, y, norm, steps, bs):
    out, t0 = [], time.perf_counter()
    for i in range(0, len(y), bs):
        xb, yb = x[i:i + bs], y[i:i + bs]
        adv = fmn(model, xb, yb, norm=P[norm], steps=steps)
        with torch.no_grad():
            fooled = model(adv).argmax(1) != yb
        out.append(torch.where(fooled, lp_norm(adv - xb, norm), torch.inf))
    return torch.cat(out), time.perf_counter() - t0


def compare(model, x, y, norm, steps, bs, fmn, repeat: int = 1) -> dict:
    """Distances from the first run of each; seconds: the median of ``repeat`` runs, the two alternating."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        ours, t = distances_ours(model, x, y, norm, steps, bs)
        times[0].append(t)
        ref, t = distances_ref(fmn, model, x, y, norm, steps, bs)
        times[1].append(t)
    t_ours, t_ref = statistics.median(times[0]), statistics.median(times[1])
    correct = (ours > 0) | (ref > 0)
    o, r = ours[correct].tolist(), ref[correct].tolist()
    same = sum((a == b) or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-3 * b) for a, b in zip(o, r))
    co, cr = accuracy_curve(ours.tolist()), accuracy_curve(ref.tolist())
    med_o, med_r = quantile(o, 0.5), quantile(r, 0.5)
    return {"norm": norm, "steps": steps, "median_ours": med_o, "median_ref": med_r,
            "acc_ours": [accuracy_at(co, e) for e in EPS[norm]], "acc_ref": [accuracy_at(cr, e) for e in EPS[norm]],
            "agree": same / max(len(o), 1), "not_found": [sum(map(math.isinf, o)), sum(map(math.isinf, r))],
            "seconds": [t_ours, t_ref], "pass": med_o <= 1.01 * med_r}


def eps_text(norm: str, e: float) -> str:
    return f"{e * 255:g}/255" if norm == "linf" else f"{e:g}"


def to_markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"{meta['model']} on {meta['n']} {meta['data']} test images (clean {meta['clean']:.1%}); FMN "
             f"{meta['steps']} steps; seconds: median of {meta['repeat']} alternating runs; torch {meta['torch']}, {meta['threads']} threads, {meta['device']}.", "",
             "| norm | median distance robustvit | adv_lib 0.2.8 | robust accuracy at ε (robustvit / adv_lib) | "
             "distances within 0.1 % | not found | seconds robustvit / adv_lib | pass |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        accs = ", ".join(f"{eps_text(r['norm'], e)}: {a:.1%} / {b:.1%}"
                         for e, a, b in zip(EPS[r["norm"]], r["acc_ours"], r["acc_ref"]))
        lines.append(f"| {r['norm']} | {r['median_ours']:.4g} | {r['median_ref']:.4g} | {accs} | {r['agree']:.1%} | "
                     f"{r['not_found'][0]} / {r['not_found'][1]} | {r['seconds'][0]:.1f} / {r['seconds'][1]:.1f} | "
                     f"{'yes' if r['pass'] else 'NO'} |")
    return "\n".join(lines) + "\n"


FIGURE_SUITES = ("min_norm", "min_norm:norm=l2", *(f"pgd:eps={e}/255:checks=0" for e in (1, 2, 4)),
                 "apgd:eps=2/255:checks=0", *(f"pgd:norm=l2:eps={e}:checks=0" for e in (0.1, 0.25, 0.5)))


def figure(model, x, y, out: Path, device: torch.device) -> Path:
    """The report of ``min_norm`` and fixed-ε suites on (x, y): the docs' figure."""
    import numpy as np

    import robustvit
    from robustvit.report.builder import load_results, write_report

    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "data.npz", x=(x * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy(), y=y.cpu().numpy(),
             classes=np.arange(10).astype(str))
    robustvit.evaluate(model, data=f"npz:{out / 'data.npz'}", suites=list(FIGURE_SUITES), out=out / "run",
                       mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), name="SmallCNN", input_size=32, num_classes=10,
                       device=str(device), progress=True)
    write_report(load_results([out / "run"]), out / "report")
    return out / "report"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="cifar10-jpg.tar.gz, or 'synthetic'")
    p.add_argument("--checkpoint", default=None, help="model cache (loaded if present, else trained and saved)")
    p.add_argument("--train-n", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--n", type=int, default=500, help="test images attacked")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="runs of each (alternating); the median time is reported")
    p.add_argument("--norms", default="linf,l2,l1")
    p.add_argument("--bs", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="write a .json or .md summary")
    p.add_argument("--figure", default=None, help="instead: the min_norm report of the model in this folder")
    p.add_argument("--figure-n", type=int, default=200, help="test images of --figure")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    splits, data_name = load_data(args.data, args.train_n, max(args.n, args.figure_n, 10), args.seed)
    if args.figure:
        model = get_model(args, splits, data_name, device)
        n = args.figure_n
        print(figure(model, splits["test"][0][:n].float().div(255), splits["test"][1][:n], Path(args.figure), device))
        return 0
    fmn = reference_fmn()
    model = get_model(args, splits, data_name, device)
    x = splits["test"][0][: args.n].float().div(255).to(device)
    y = splits["test"][1][: args.n].to(device)
    clean = accuracy(model, x, y)
    rows = []
    for norm in args.norms.split(","):
        rows.append(compare(model, x, y, norm, args.steps, args.bs, fmn, args.repeat))
        print(json.dumps(rows[-1]), flush=True)
    meta = {"model": f"SmallCNN width {args.width} (benchmarks/attack_agreement.py)", "data": data_name, "n": len(y),
            "clean": clean, "steps": args.steps, "repeat": args.repeat, "device": str(device), "torch": torch.__version__,
            "threads": torch.get_num_threads()}
    write_report(to_markdown(meta, rows), meta, rows, args.out)
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
