"""Attack speed: robustvit against torchattacks on the same model, images and settings.

Settings (L∞): PGD-10 (ε = 8/255, step 2/255, random start), APGD-CE (100 iterations, 1 restart) and
the APGD-CE + APGD-T ensemble (9 targets, 100 iterations; robustvit ``autoattack`` ``version="custom"``
vs torchattacks ``MultiAttack([APGD, APGDT])``, at ``--ens-eps``; torchattacks 3.5.1's own AutoAttack
crashes inside FAB on current torch), AutoAttack standard against the original code (fra31/auto-attack,
with ``--autoattack-path``; at ``--ens-eps``) and, from the same code, its members FAB-T (9 targets,
100 iterations) and Square (1,000 queries, the reference's schedule) alone, and robustvit's spatial grid
attack (9 × 9 × 31; no counterpart: its transforms/s are reported). Models: ``cnn`` (the SmallCNN of
attack_agreement.py, or ``--checkpoint``) and ``vit`` (robustvit's ``vit_cifar_micro`` if timm is
installed, else a small pure-torch ViT), random weights unless a checkpoint is given; labels = the
model's predictions, so every image is attacked. Both libraries run on the same model object, in the
same process, alternately, and the median of ``--repeats`` runs is reported.

    .venv/bin/python benchmarks/attacks.py --device cpu --out attacks-cpu.md
    # GPU machine (torchattacks carried as a wheel in .whl/, or --no-reference):
    python benchmarks/attacks.py --device cuda --out attacks-gpu.md

``--compile`` (torch.compile the model, for both libraries), ``--channels-last`` and ``--bf16``
(autocast; changes numerics — prints a warning) are options; fp32 is the default.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from attack_agreement import SmallCNN  # noqa: E402
from robustvit.attacks import create_attack  # noqa: E402


class MiniViT(nn.Module):
    """A small ViT for 32×32 images (4×4 patches, width 128, 4 blocks, 4 heads, mean-pooled), pure torch."""

    def __init__(self, num_classes: int = 10, dim: int = 128, depth: int = 4, heads: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, 64, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x - 0.5).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(t)).mean(1))


def build_model(name: str, device: torch.device, checkpoint: str | None, seed: int) -> tuple[nn.Module, str]:
    torch.manual_seed(seed)
    if name == "cnn":
        model = SmallCNN()
        if checkpoint:
            model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
        desc = "SmallCNN width 16" + (" (trained)" if checkpoint else " (random weights)")
    else:
        try:
            from robustvit.models import create_model

            model, desc = create_model("vit_cifar_micro"), "vit_cifar_micro (random weights)"
        except Exception:  # timm missing on a bare machine
            model, desc = MiniViT(), "MiniViT (pure torch, random weights)"
    return model.to(device).eval(), desc


class Wrapped(nn.Module):
    """Applies the speed options around a model: channels_last inputs, bf16 autocast."""

    def __init__(self, model: nn.Module, channels_last: bool, bf16: bool) -> None:
        super().__init__()
        self.model, self.channels_last, self.bf16 = model, channels_last, bf16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if self.bf16:
            with torch.autocast(x.device.type, dtype=torch.bfloat16):
                return self.model(x).float()
        return self.model(x)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[float, torch.Tensor]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


@torch.no_grad()
def acc(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return (model(x).argmax(1) == y).float().mean().item()


#: Square's budget in its own row (AutoAttack standard uses 5,000)
SQUARE_QUERIES = 1000
#: the name ``--only`` selects each row by
KEYS = {"PGD-10": "pgd-10", "APGD-CE-100": "apgd-ce-100", "APGD-CE + APGD-T (9 targets)": "apgd-ce+apgd-t",
        "AutoAttack standard": "autoattack", "FAB-T (9 targets, 100 it.)": "fab-t",
        f"Square ({SQUARE_QUERIES:,} queries)": "square-1000", "Spatial grid 9×9×31": "spatial"}


def settings(eps: float, ens_eps: float, autoattack_path: str | None,
             device: torch.device) -> list[tuple[str, dict, str, Callable | None]]:
    """(label, robustvit create_attack kwargs, reference name, reference factory: model → callable(x, y)).
    ``--only`` selects rows by :data:`KEYS`."""
    def ta_pgd(m):
        import torchattacks as ta
        return ta.PGD(m, eps=eps, alpha=eps / 4, steps=10, random_start=True)

    def ta_apgd(m):
        import torchattacks as ta
        return ta.APGD(m, norm="Linf", eps=eps, steps=100, n_restarts=1, loss="ce", seed=0)

    def ta_ens(m):
        import torchattacks as ta
        return ta.MultiAttack([ta.APGD(m, norm="Linf", eps=ens_eps, steps=100, n_restarts=1, loss="ce", seed=0),
                               ta.APGDT(m, norm="Linf", eps=ens_eps, steps=100, n_restarts=1, n_classes=10, seed=0)])

    def original_aa(m):
        if autoattack_path not in sys.path:
            sys.path.insert(0, autoattack_path)
        from autoattack import AutoAttack
        adversary = AutoAttack(m, norm="Linf", eps=ens_eps, version="standard", seed=0, device=str(device))
        adversary.logger.log = lambda *a, **k: None           # quiet
        return lambda x, y: adversary.run_standard_evaluation(x, y, bs=len(y))

    def original_member(name: str) -> Callable:
        def factory(m):
            if autoattack_path not in sys.path:
                sys.path.insert(0, autoattack_path)
            from autoattack import AutoAttack
            adversary = AutoAttack(m, norm="Linf", eps=ens_eps, version="standard", seed=0, device=str(device))
            if name == "square":
                adversary.square.n_queries = SQUARE_QUERIES
                return adversary.square.perturb
            adversary.fab.targeted, adversary.fab.n_target_classes = True, 9
            return adversary.fab.perturb
        return factory

    rows = [
        ("PGD-10", dict(name="pgd", eps=eps, steps=10, step_size=eps / 4), "torchattacks", ta_pgd),
        ("APGD-CE-100", dict(name="apgd-ce", eps=eps, steps=100), "torchattacks", ta_apgd),
        ("APGD-CE + APGD-T (9 targets)", dict(name="autoattack", eps=ens_eps, version="custom",
                                             attacks=["apgd-ce", "apgd-t"], run_checks=False), "torchattacks", ta_ens),
        # No counterpart: robustvit's throughput only (transforms/s in the row).
        ("Spatial grid 9×9×31", dict(name="spatial"), "", None),
    ]
    if autoattack_path:   # torchattacks' AutoAttack crashes on current torch: the original code instead
        rows[3:3] = [
            ("AutoAttack standard", dict(name="autoattack", eps=ens_eps, version="standard"),
             "original AutoAttack", original_aa),
            ("FAB-T (9 targets, 100 it.)", dict(name="fab-t", eps=ens_eps), "original AutoAttack",
             original_member("fab-t")),
            (f"Square ({SQUARE_QUERIES:,} queries)", dict(name="square", eps=ens_eps, n_queries=SQUARE_QUERIES,
                                                     rescale_schedule=False), "original AutoAttack",
             original_member("square")),
        ]
    return rows


def run(args: argparse.Namespace) -> dict:
    only = {o.strip().lower() for o in args.only.split(",") if o.strip()}
    if only - set(KEYS.values()):
        raise SystemExit(f"--only: unknown {', '.join(sorted(only - set(KEYS.values())))}; "
                         f"choose from {', '.join(KEYS.values())}")
    device = torch.device(args.device)
    if args.bf16:
        warnings.warn("--bf16: the model runs under bf16 autocast; robust accuracies can differ from fp32 "
                      "(gradients are less precise); report fp32 numbers for evaluations", stacklevel=1)
    have_ta = not args.no_reference
    if have_ta:
        try:
            import torchattacks  # noqa: F401
        except ImportError:
            print("[ref] torchattacks not installed: no torchattacks figures (install the wheel: "
                  "pip install --no-deps .whl/torchattacks-*.whl)", flush=True)
            have_ta = False
    eps, ens_eps = _eps(args.eps), _eps(args.ens_eps)
    rows = []
    for mname in args.models.split(","):
        base, desc = build_model(mname, device, args.checkpoint if mname == "cnn" else None, args.seed)
        if args.channels_last:
            base = base.to(memory_format=torch.channels_last)
        model = Wrapped(base, args.channels_last, args.bf16).eval()
        if args.compile:
            model = torch.compile(model)
        g = torch.Generator(device="cpu").manual_seed(args.seed)
        x = torch.rand((args.n, 3, 32, 32), generator=g).to(device)
        with torch.no_grad():
            y = model(x).argmax(1)
        for label, kw, ref_name, ref_factory in settings(eps, ens_eps, args.autoattack_path, device):
            if only and KEYS[label] not in only:
                continue
            kw = dict(kw)
            ours = create_attack(kw.pop("name"), model, seed=0, **kw)
            usable = ref_factory is not None and not args.no_reference and (have_ta or ref_name != "torchattacks")
            ref = ref_factory(model) if usable else None
            _warm(ours, ref, x, y, device, device.type == "cuda" or args.compile)
            t_ours, t_ref, a_ours, a_ref = [], [], math.nan, math.nan
            for _ in range(args.repeats):
                t, xa = timed(lambda: ours(x, y), device)
                t_ours.append(t)
                a_ours = acc(model, xa, y)
                if ref is not None:
                    t, xr = timed(lambda: ref(x, y), device)
                    t_ref.append(t)
                    a_ref = acc(model, xr, y)
            row = {"model": desc, "attack": label, "n": args.n, "reference": ref_name if t_ref else None,
                   "robustvit_s": statistics.median(t_ours),
                   "reference_s": statistics.median(t_ref) if t_ref else None,
                   "robustvit_acc": a_ours, "reference_acc": a_ref if t_ref else None}
            row["speedup"] = row["reference_s"] / row["robustvit_s"] if t_ref else None
            if hasattr(ours, "last_stats"):
                row["transforms_per_s"] = ours.last_stats["transforms_per_s"]
                row["transforms_evaluated"] = ours.last_stats["evaluated"]
            rows.append(row)
            if "transforms_per_s" in row:
                print(f"[{desc}] {label}: {row['transforms_evaluated']:.0f} (image, transform) pairs, "
                      f"{row['transforms_per_s']:.0f} transforms/s", flush=True)
            print(f"[{desc}] {label}: robustvit {row['robustvit_s']:.2f} s (acc {a_ours:.1%})"
                  + (f", {ref_name} {row['reference_s']:.2f} s (acc {a_ref:.1%}), "
                     f"ratio {row['speedup']:.2f}×" if t_ref else ""), flush=True)
    return {"meta": meta(args, device), "rows": rows}


def _warm(ours, ref, x, y, device, enabled: bool) -> None:
    """One small call each (allocator, cuDNN autotuning, torch.compile); skipped on plain CPU runs."""
    if not enabled:
        return
    for a in (ours, ref):
        if a is not None:
            a(x[:8], y[:8])
    sync(device)


def _eps(s: str) -> float:
    from robustvit.utils import parse_eps
    return parse_eps(s)


def meta(args: argparse.Namespace, device: torch.device) -> dict:
    m = {"device": str(device), "torch": torch.__version__, "python": platform.python_version(),
         "threads": torch.get_num_threads(), "n": args.n, "eps": args.eps, "ens_eps": args.ens_eps,
         "compile": args.compile, "channels_last": args.channels_last, "bf16": args.bf16,
         "repeats": args.repeats, "cpu": platform.processor() or platform.machine()}
    if device.type == "cuda":
        m["gpu"] = torch.cuda.get_device_name(device)
    try:
        import torchattacks
        m["torchattacks"] = torchattacks.__version__
    except ImportError:
        pass
    return m


def to_markdown(res: dict) -> str:
    m = res["meta"]
    head = (f"Device {m.get('gpu', m['cpu'])} ({m['device']}, {m['threads']} threads), torch {m['torch']}, "
            f"torchattacks {m.get('torchattacks', '—')}; {m['n']} images 3×32×32; ε = {m['eps']} "
            f"(ensemble {m['ens_eps']}); median of {m['repeats']}; compile={m['compile']}, "
            f"channels_last={m['channels_last']}, bf16={m['bf16']}.")
    lines = [head, "", "| model | attack | robustvit | reference | reference / robustvit | robust acc. (robustvit / ref.) |",
             "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        ta = f"{r['reference']}: {r['reference_s']:.2f} s" if r["reference_s"] else "—"
        sp = f"{r['speedup']:.2f}×" if r["speedup"] else "—"
        ra = f"{r['robustvit_acc']:.1%} / " + (f"{r['reference_acc']:.1%}" if r["reference_acc"] is not None else "—")
        label = r["attack"] + (f" ({r['transforms_per_s']:.0f} transforms/s)" if "transforms_per_s" in r else "")
        lines.append(f"| {r['model']} | {label} | {r['robustvit_s']:.2f} s | {ta} | {sp} | {ra} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--models", default="cnn,vit")
    p.add_argument("--n", type=int, default=None, help="images (default 128 on CPU, 1024 on CUDA)")
    p.add_argument("--eps", default="8/255")
    p.add_argument("--ens-eps", default="1/255", help="ε of the APGD-CE + APGD-T ensemble")
    p.add_argument("--repeats", type=int, default=None, help="runs per attack, median reported (default 3)")
    p.add_argument("--only", default="", help="comma-separated rows: " + ", ".join(KEYS.values()) + " (default: all)")
    p.add_argument("--checkpoint", default=None, help="SmallCNN weights (attack_agreement.py's cache)")
    p.add_argument("--no-reference", action="store_true", help="robustvit figures only")
    p.add_argument("--autoattack-path", default=None,
                   help="folder holding the original 'autoattack' package: adds AutoAttack standard against it")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help=".json or .md summary")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available; use --device cpu", file=sys.stderr)
        return 2
    args.n = args.n or (1024 if args.device == "cuda" else 128)
    args.repeats = args.repeats or 3
    if args.autoattack_path:
        args.autoattack_path = str(Path(args.autoattack_path).resolve())
    res = run(args)
    md = to_markdown(res)
    print("\n" + md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2) if out.suffix == ".json" else md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
