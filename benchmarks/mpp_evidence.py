"""Does masked patch prediction help? MPP pre-training on many unlabelled images, then fine-tuning on few labels,
against the same model trained from scratch on those labels, over seeds (Dosovitskiy et al., arXiv:2010.11929,
§4.6 and App. B.1.2; few-shot probe §4.1).

For every seed S, with robustvit's own CLI:

1. ``mpp``: ``robustvit train --recipe mpp`` on ``--unlabelled`` images (labels unused);
2. ``mpp_ft``: ``robustvit finetune`` of that checkpoint on ``--labelled`` images;
3. ``scratch``: ``robustvit train`` of the same architecture on the same labelled images with the same settings;
4. ``random``: the untrained network (seed S) for the few-shot probe;

then ``robustvit eval --suite clean,fewshot`` of the four on ``--test``. Each step writes its folder and is
skipped when done, so the script resumes. ``--figures`` draws ``docs/img/mpp_evidence.png`` (``--figure``: MPP
loss per epoch; validation accuracy per fine-tuning epoch, MPP-initialised vs scratch) and
``docs/img/fewshot_shots.png`` (``--shots-figure``: few-shot accuracy against shots for the four models) and
prints the Markdown table::

    python benchmarks/mpp_evidence.py --out bench-out/mpp
    python benchmarks/mpp_evidence.py --out bench-out/mpp --figures
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from reproduce import run_cmd  # noqa: E402  (benchmarks/reproduce.py: runs a command into its log)
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("random", "mpp", "scratch", "mpp_ft")
LABELS = {"random": "random initialisation", "mpp": "MPP only (no labels)", "scratch": "from scratch (labels)",
          "mpp_ft": "MPP → fine-tuned (labels)"}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robustvit.cli", *args]


def commands(a: argparse.Namespace, seed: int, d: Path) -> dict[str, list[str]]:
    sup = ["--data", a.labelled, "--epochs", str(a.ft_epochs), "--batch-size", str(a.ft_batch), "--lr", str(a.ft_lr),
           "--seed", str(seed), "--device", "cpu", "--val-data", a.val]
    return {
        "mpp": cli("train", "--recipe", "mpp", "--model", a.model, "--data", a.unlabelled, "--epochs",
                   str(a.mpp_epochs), "--batch-size", str(a.mpp_batch), "--lr", str(a.mpp_lr), "--seed", str(seed),
                   "--device", "cpu", *(["--loss-option", f"space={a.mpp_space}"] if a.mpp_space != "auto" else []),
                   "--out", str(d / "mpp")),
        "mpp_ft": cli("finetune", "--model", str(d / "mpp" / "checkpoint"), *sup, "--out", str(d / "mpp_ft")),
        "scratch": cli("train", "--model", a.model, *sup, "--out", str(d / "scratch")),
    }


def eval_cmd(a: argparse.Namespace, seed: int, ckpt: Path, out: Path) -> list[str]:
    return cli("eval", "--model", str(ckpt), "--data", a.test, "--suite",
               f"clean,fewshot:shots={a.shots}:draws={a.draws}", "--limit", str(a.test_limit), "--seed", str(seed),
               "--device", "cpu", "--no-progress", "--out", str(out))


def random_checkpoint(model: str, seed: int, num_classes: int, out: Path) -> None:
    import torch

    from robustvit.models import create_model, save_checkpoint

    torch.manual_seed(seed)                     # as `robustvit train --seed S` before it builds the model
    save_checkpoint(create_model(model, num_classes=num_classes), out)


def run_seed(a: argparse.Namespace, seed: int) -> None:
    d = Path(a.out) / f"s{seed}"
    d.mkdir(parents=True, exist_ok=True)
    log = d / "log.txt"
    cmds = commands(a, seed, d)
    for step in ("mpp", "mpp_ft", "scratch"):
        if not (d / step / "checkpoint").is_dir():
            if (d / step).exists():
                import shutil
                shutil.rmtree(d / step)
            print(f"s{seed}: {step} …", flush=True)
            run_cmd(cmds[step], log)
    if not (d / "random" / "checkpoint").is_dir():
        random_checkpoint(a.model, seed, 10, d / "random" / "checkpoint")
    for m in MODELS:
        if not (d / "eval" / m / "results.json").is_file():
            print(f"s{seed}: eval {m} …", flush=True)
            run_cmd(eval_cmd(a, seed, d / m / "checkpoint", d / "eval" / m), log)
    (d / "commands.json").write_text(json.dumps(
        {k: shlex.join(["robustvit", *v[3:]]) for k, v in cmds.items()}
        | {"eval": shlex.join(["robustvit", *eval_cmd(a, seed, Path(f"{m}/checkpoint"), Path("eval"))[3:]])},
        indent=1))


# ---- summary and figures -------------------------------------------------------------------------------
def _suites(path: Path) -> dict[str, Any]:
    """``suites`` of a results.json keyed by the suite's name without options (``fewshot:shots=…`` → fewshot)."""
    r = json.loads(path.read_text())
    r = r if "suites" in r else next(iter(r.values()))
    return {k.split(":")[0]: v for k, v in r["suites"].items()}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def collect(out: Path) -> dict[str, Any]:
    seeds = sorted(int(p.name[1:]) for p in out.glob("s*") if (p / "eval" / "mpp_ft" / "results.json").is_file())
    data: dict[str, Any] = {"seeds": seeds, "models": {}, "mpp_curves": {}, "val_curves": {}}
    for m in MODELS:
        rows = [_suites(out / f"s{s}" / "eval" / m / "results.json") for s in seeds]
        data["models"][m] = {"clean": [r["clean"]["top1"] for r in rows],
                             "fewshot": {k: [r["fewshot"]["accuracy"][k]["mean"] for r in rows]
                                         for k in rows[0]["fewshot"]["accuracy"]} if rows else {}}
    for s in seeds:
        data["mpp_curves"][s] = _jsonl(out / f"s{s}" / "mpp" / "metrics.jsonl")
        data["val_curves"][s] = {m: _jsonl(out / f"s{s}" / m / "metrics.jsonl") for m in ("scratch", "mpp_ft")}
    return data


def ms(v: list[float]) -> str:
    if len(v) < 2:
        return f"{v[0]:.3f}" if v else "–"
    return f"{statistics.mean(v):.3f} ± {statistics.stdev(v):.3f}"


def table(data: dict[str, Any]) -> str:
    shots = list(next(iter(data["models"].values()))["fewshot"])
    lines = ["| model | clean top-1 | " + " | ".join(f"{k}-shot" for k in shots) + " |",
             "|---|---|" + "---|" * len(shots)]
    for m in MODELS:
        r = data["models"][m]
        lines.append(f"| {LABELS[m]} | {ms(r['clean'])} | " + " | ".join(ms(r["fewshot"][k]) for k in shots) + " |")
    lines.append("")
    lines.append("MPP pre-training: final loss / mpp_acc per seed: " + "; ".join(
        f"s{s}: {c[-1]['train_loss']:.3f} / {c[-1].get('mpp_acc', float('nan')):.3f}"
        for s, c in data["mpp_curves"].items()))
    diffs = [b - a for a, b in zip(data["models"]["scratch"]["clean"], data["models"]["mpp_ft"]["clean"])]
    lines.append("Fine-tuned minus scratch clean top-1 per seed: " + ", ".join(f"{d:+.3f}" for d in diffs))
    return "\n".join(lines) + "\n"


def figures(data: dict[str, Any], img: Path, name: str = "mpp_evidence.png",
            shots_name: str = "fewshot_shots.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    colours = {"random": "0.6", "mpp": "tab:purple", "scratch": "tab:blue", "mpp_ft": "tab:orange"}
    fig, ax = plt.subplots(1, 2, figsize=(8.4, 3.2), dpi=90)
    for s, c in data["mpp_curves"].items():
        ax[0].plot([e["epoch"] for e in c], [e["train_loss"] for e in c], "o-", color="tab:purple",
                   alpha=0.5 + 0.5 / (1 + s), label=f"MPP loss, seed {s}")
    ax[0].axhline(math.log(512), color="0.5", ls=":", label="ln 512 (uniform)")
    ax[0].set_xticks(sorted({e["epoch"] for c in data["mpp_curves"].values() for e in c}))
    ax[0].set_xlabel("MPP epoch")
    ax[0].set_ylabel("cross-entropy (nats)")
    ax[0].set_title("MPP pre-training loss")
    ax[0].legend(fontsize=7)
    for s, curves in data["val_curves"].items():
        for m in ("scratch", "mpp_ft"):
            c = curves[m]
            first = s == data["seeds"][0]
            ax[1].plot([e["epoch"] for e in c], [e.get("val_acc") for e in c], "o-", ms=3, color=colours[m],
                       alpha=0.9 if first else 0.55, label=LABELS[m] if first else None)
    ax[1].set_xlabel("supervised epoch")
    ax[1].set_ylabel("validation top-1")
    ax[1].set_title(f"fine-tuning vs scratch ({len(data['seeds'])} seeds)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(img / name)
    plt.close(fig)
    if not shots_name:
        return

    fig, ax = plt.subplots(figsize=(4.8, 3.3), dpi=90)
    for m in MODELS:
        fs = data["models"][m]["fewshot"]
        ks = [int(k) for k in fs]
        mean = [statistics.mean(v) for v in fs.values()]
        sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in fs.values()]
        ax.errorbar(ks, mean, yerr=sd, marker="o", ms=4, capsize=3, color=colours[m], label=LABELS[m])
    ax.axhline(0.1, color="0.5", ls=":", label="chance")
    ax.set_xscale("log")
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("examples per class (shots)")
    ax.set_ylabel("few-shot top-1")
    ax.set_title("few-shot linear probe, vit_cifar_demo")
    ax.set_ylim(top=max(ax.get_ylim()[1], 0.45) + 0.12)
    ax.legend(fontsize=6.5, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(img / shots_name)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="bench-out/mpp")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--model", default="vit_cifar_demo")
    p.add_argument("--unlabelled", default="synthshapes:train,count=3000")
    p.add_argument("--labelled", default="synthshapes:train,count=1000")
    p.add_argument("--val", default="synthshapes:test,count=200", help="validation data during supervised training")
    p.add_argument("--test", default="synthshapes:test")
    p.add_argument("--test-limit", type=int, default=300)
    p.add_argument("--mpp-epochs", type=int, default=3)
    p.add_argument("--mpp-batch", type=int, default=64)
    p.add_argument("--mpp-lr", type=float, default=2e-4)
    p.add_argument("--mpp-space", default="auto", choices=("auto", "embedding", "pixels"),
                   help="where MPP corrupts (the loss's `space` option)")
    p.add_argument("--ft-epochs", type=int, default=10)
    p.add_argument("--ft-batch", type=int, default=32)
    p.add_argument("--ft-lr", type=float, default=5e-4)
    p.add_argument("--shots", default="1+5+10+25")
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--figures", action="store_true", help="summarise finished seeds: table + PNGs, no training")
    p.add_argument("--img", default=str(ROOT / "docs" / "img"))
    p.add_argument("--figure", default="mpp_evidence.png", help="file name of the loss / validation figure")
    p.add_argument("--shots-figure", default="fewshot_shots.png", help="file name of the few-shot figure ('': none)")
    a = p.parse_args()
    out = Path(a.out)
    if a.figures:
        data = collect(out)
        if not data["seeds"]:
            sys.exit(f"no finished seed in {out}")
        (out / "summary.json").write_text(json.dumps(data, indent=1))
        figures(data, Path(a.img), a.figure, a.shots_figure)
        text = table(data)
        (out / "table.md").write_text(text)
        print(text)
        return
    for s in (int(x) for x in a.seeds.split(",") if x.strip()):
        run_seed(a, s)
    print(table(collect(out)))


if __name__ == "__main__":
    main()
