"""Do robustvit's FAB, FAB-T and Square agree with the reference implementations, and how fast are they?

Runs, on the same trained model and the same test images:

* robustvit ``fab`` / ``fab-t`` / ``square``;
* the original AutoAttack code (``FABAttack_PT``, ``SquareAttack`` from github.com/fra31/auto-attack, checked
  out *outside* this repository, ``--autoattack-path``; rows skipped if absent);
* torchattacks ``FAB`` / ``Square`` (3.5.1's FAB crashes on recent torch — "view size is not compatible
  with input tensor's size and stride" — the row then says so).

It prints robust accuracy, the time and the time ratio reference / robustvit per attack. The attacks are
randomised differently in each implementation, so the robust accuracies agree up to noise; robustvit
being *lower* (stronger) is fine. The model (a small CNN, normalisation inside) and the data come from
``benchmarks/attack_agreement.py`` (CIFAR-10 read from a ``cifar10-jpg.tar.gz`` tarball without
extracting it, else the embedded synthshapes data; the trained model is cached in /tmp/robustvit-bench).

    .venv/bin/pip install torchattacks        # bench-only dependency
    git --git-dir=<mirror of fra31/auto-attack> worktree add /tmp/autoattack   # or git archive
    .venv/bin/python benchmarks/fab_square_agreement.py --autoattack-path /tmp/autoattack --n 100 --threads 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from robustvit.attacks import create_attack  # noqa: E402
from robustvit.utils import parse_eps  # noqa: E402

Runner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _agreement_module():
    """The model/data helpers of benchmarks/attack_agreement.py (same model, same cache)."""
    spec = importlib.util.spec_from_file_location("attack_agreement", Path(__file__).with_name("attack_agreement.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def robustvit_runners(model: nn.Module, a: argparse.Namespace) -> dict[str, Runner]:
    kw = dict(eps=a.eps, norm=a.norm, seed=a.seed)
    return {"fab": create_attack("fab", model, steps=a.steps, restarts=a.restarts, **kw),
            "fab-t": create_attack("fab-t", model, steps=a.steps, restarts=1, n_target_classes=9, **kw),
            "square": create_attack("square", model, n_queries=a.n_queries, p_init=0.8, **kw)}


def original_runners(model: nn.Module, a: argparse.Namespace, device: torch.device) -> dict[str, Runner]:
    if not a.autoattack_path or not (Path(a.autoattack_path) / "autoattack").is_dir():
        return {}
    sys.path.insert(0, str(Path(a.autoattack_path).resolve()))
    from autoattack.fab_pt import FABAttack_PT
    from autoattack.square import SquareAttack

    norm = {"linf": "Linf", "l2": "L2"}[a.norm]
    dev = str(device)
    fab = FABAttack_PT(model, norm=norm, n_restarts=a.restarts, n_iter=a.steps, eps=a.eps, seed=a.seed, device=dev)
    fab_t = FABAttack_PT(model, norm=norm, n_restarts=1, n_iter=a.steps, eps=a.eps, seed=a.seed, targeted=True,
                         n_target_classes=9, device=dev)
    square = SquareAttack(model, norm=norm, n_queries=a.n_queries, eps=a.eps, p_init=0.8, n_restarts=1, seed=a.seed,
                          device=dev, resc_schedule=True)
    return {"fab": fab.perturb, "fab-t": fab_t.perturb, "square": square.perturb}


def torchattacks_runners(model: nn.Module, a: argparse.Namespace) -> dict[str, Runner]:
    try:
        import torchattacks as ta
    except ImportError:
        return {}
    norm = {"linf": "Linf", "l2": "L2"}[a.norm]
    return {"fab": ta.FAB(model, norm=norm, eps=a.eps, steps=a.steps, n_restarts=a.restarts, seed=a.seed, n_classes=10),
            "fab-t": ta.FAB(model, norm=norm, eps=a.eps, steps=a.steps, n_restarts=1, seed=a.seed,
                            multi_targeted=True, n_classes=10),
            "square": ta.Square(model, norm=norm, eps=a.eps, n_queries=a.n_queries, n_restarts=1, p_init=0.8,
                                seed=a.seed)}


def run(fn: Runner, model: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: str, eps: float
        ) -> dict[str, float | str]:
    """Robust accuracy (counting only outputs inside the ε-ball as adversarial) and seconds, or the error."""
    t0 = time.perf_counter()
    try:
        x_adv = fn(x, y)
    except Exception as e:  # a reference implementation that crashes on this torch
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
    seconds = time.perf_counter() - t0
    d = (x_adv - x).flatten(1)
    size = d.abs().amax(1) if norm == "linf" else d.norm(dim=1)
    with torch.no_grad():
        fooled = (model(x_adv).argmax(1) != y) & (size <= eps * (1 + 1e-5) + 1e-7)
    return {"robust_acc": 1 - fooled.float().mean().item(), "seconds": seconds}


def compare(model: nn.Module, x: torch.Tensor, y: torch.Tensor, a: argparse.Namespace,
            device: torch.device) -> list[dict]:
    ours = robustvit_runners(model, a)
    refs = {"original": original_runners(model, a, device), "torchattacks": torchattacks_runners(model, a)}
    rows = []
    for name in a.attacks.split(","):
        row: dict = {"attack": name, "robustvit": run(ours[name], model, x, y, a.norm, a.eps)}
        if name == "square":
            row["robustvit"]["mean_queries"] = ours[name].last_queries.float().mean().item()
        for ref, runners in refs.items():
            row[ref] = run(runners[name], model, x, y, a.norm, a.eps) if name in runners else {"error": "not available"}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _cell(r: dict, base: dict | None = None) -> str:
    if "error" in r:
        return f"— ({r['error']})"
    s = f"{100 * r['robust_acc']:.1f}% / {r['seconds']:.1f} s"
    if base is not None and "seconds" in base:
        s += f" (×{r['seconds'] / base['seconds']:.2f})"
    return s


def to_markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"FAB / Square agreement — {meta['data']}, n={meta['n']}, clean {100 * meta['clean']:.1f}%, "
             f"{meta['norm']} ε={meta['eps']}, steps={meta['steps']}, queries={meta['n_queries']}, "
             f"torch {meta['torch']}, {meta['threads']} thread(s), {meta['device']}",
             "", "robust accuracy / time (× = reference time / robustvit time)", "",
             "| attack | robustvit | original AutoAttack | torchattacks |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['attack']} | {_cell(r['robustvit'])} | {_cell(r['original'], r['robustvit'])} | "
                     f"{_cell(r['torchattacks'], r['robustvit'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    agreement = _agreement_module()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(agreement.DEFAULT_DATA), help="cifar10-jpg.tar.gz, or 'synthetic'")
    p.add_argument("--checkpoint", default=None, help="model cache (loaded if present, else trained and saved)")
    p.add_argument("--train-n", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--n", type=int, default=100, help="test images attacked")
    p.add_argument("--norm", default="linf", choices=["linf", "l2"])
    p.add_argument("--eps", default=None, help="default 1/255 (linf) or 0.1 (l2)")
    p.add_argument("--steps", type=int, default=100, help="FAB iterations")
    p.add_argument("--restarts", type=int, default=1, help="restarts of untargeted FAB")
    p.add_argument("--n-queries", type=int, default=5000)
    p.add_argument("--attacks", default="fab-t,fab,square")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autoattack-path", default=None, help="folder holding the original 'autoattack' package")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="write a .json or .md summary")
    a = p.parse_args(argv)
    a.eps = parse_eps(a.eps or ("1/255" if a.norm == "linf" else "0.1"))
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    splits, data_name = agreement.load_data(a.data, a.train_n, max(a.n, 10), a.seed)
    model = agreement.get_model(a, splits, data_name, device)
    x = splits["test"][0][: a.n].float().div(255).to(device)
    y = splits["test"][1][: a.n].to(device)
    clean = agreement.accuracy(model, x, y)
    print(f"[model] clean accuracy {clean:.2%} on {len(y)} {data_name} test images", flush=True)
    rows = compare(model, x, y, a, device)
    meta = {"data": data_name, "n": len(y), "clean": clean, "norm": a.norm, "eps": round(a.eps, 6), "steps": a.steps,
            "n_queries": a.n_queries, "seed": a.seed, "device": str(device), "torch": torch.__version__,
            "threads": torch.get_num_threads()}
    agreement.write_report(to_markdown(meta, rows), meta, rows, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
