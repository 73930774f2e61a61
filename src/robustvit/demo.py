"""``robustvit demo``: the main job on the embedded default, end to end on a CPU: generate ``synthshapes``,
train three small models on it (``DEMO_MODELS``: a ViT, a ResNet and the ViT fine-tuned adversarially), then run
them as a study (:mod:`robustvit.study`): every registered suite as its ``demo`` attribute plans (the few-shot
linear probe ``fewshot`` included) and the analyses whose class lists the model's family in ``demo``. Writes
``OUT/<model>/train/`` (the training run), ``OUT/<model>/results.json``, ``OUT/<model>/analysis/``,
``OUT/report.{md,html}`` and ``OUT/leaderboard.{md,csv,json}``. Re-running resumes every finished unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustvit.analysis import ANALYSES
from robustvit.evaluation.suites import get_suite_class, list_suites
from robustvit.runs import RESULTS_FILE, read_results
from robustvit.study import Study, run_study
from robustvit.training import TrainConfig, train
from robustvit.utils import resolve_device


@dataclass(frozen=True)
class DemoPlan:
    train_count: int
    test_count: int
    epochs: dict[str, int]   # per demo model
    batch_size: int
    eval_limit: int | None   # None: the whole test split (so `robustvit eval ... --data synthshapes:test` reproduces it)
    analysis_limit: int


@dataclass(frozen=True)
class DemoModel:
    """One model of the demo: the architecture (or ``"@name"``: start from that demo model's checkpoint), how
    it is trained (``TrainConfig`` fields) and which analyses run on it."""

    architecture: str
    family: str
    train: dict[str, Any]
    analyses: tuple[str, ...]


def demo_analyses(family: str) -> tuple[str, ...]:
    """The analyses the demo runs on a model of ``family`` (``"vit"``, ``"cnn"``): those whose class lists it in
    ``demo``."""
    return tuple(name for name, a in ANALYSES.items() if family in a.demo)


VIT_ANALYSES, CNN_ANALYSES = demo_analyses("vit"), demo_analyses("cnn")

#: The three demo models (folder name → model): a ViT (on a convolutional stem, docs/training.md#the-demo-vit),
#: a quarter-width ResNet-18, and the ViT adversarially fine-tuned from its checkpoint (FGSM with random start
#: at ε = 4/255, Wong et al. 2020, arXiv:2001.03994), so the report shows what hardening buys.
DEMO_MODELS: dict[str, DemoModel] = {
    "vit_cifar_demo": DemoModel("vit_cifar_demo", "vit", {"lr": 1e-3}, VIT_ANALYSES),
    "resnet_cifar18": DemoModel("resnet_cifar18", "resnet", {"lr": 2e-3, "model_kwargs": {"width_mult": 0.25}},
                                CNN_ANALYSES),
    "vit_cifar_demo_fgsm_rs": DemoModel("@vit_cifar_demo", "vit", {"lr": 5e-4, "loss": "fgsm_rs", "eps": "4/255"},
                                        VIT_ANALYSES),
}

PLANS = {
    "default": DemoPlan(train_count=10_000, test_count=2_000, batch_size=64, eval_limit=None, analysis_limit=200,
                        epochs={"vit_cifar_demo": 6, "resnet_cifar18": 2, "vit_cifar_demo_fgsm_rs": 2}),
    "quick": DemoPlan(train_count=3_000, test_count=500, batch_size=64, eval_limit=200, analysis_limit=50,
                      epochs={"vit_cifar_demo": 3, "resnet_cifar18": 2, "vit_cifar_demo_fgsm_rs": 1}),
}


def demo_suites(quick: bool) -> tuple[list[str], list[str]]:
    """The suite specs the demo runs (as each suite class plans in ``demo``) and the skipped ones with their
    ``demo_skip`` reason."""
    specs, skipped = [], []
    for name in list_suites():
        if name.startswith("_"):   # private suites (e.g. registered by tests)
            continue
        cls = get_suite_class(name)
        if cls.demo_skip:
            skipped.append(f"{name}: {cls.demo_skip}")
            continue
        default, quick_specs = cls.demo or ((name,), (name,))
        specs += list(quick_specs if quick else default)
    return specs, skipped


def training_seconds(out: Path) -> float:
    """The demo models' training time: the sum of their runs' ``run.training_seconds`` (every session, so a
    resumed demo reports the time its models took, not this command's)."""
    runs = [out / name / "train" for name in DEMO_MODELS]
    return sum(float(read_results(run)["run"].get("training_seconds", 0.0)) for run in runs
               if (run / RESULTS_FILE).is_file())


def run_demo(out: str | Path = "demo-out", quick: bool = False, device: str = "auto", seed: int = 0,
             progress: bool = True) -> dict[str, dict[str, Any]]:
    plan = PLANS["quick" if quick else "default"]
    out = Path(out)
    train_spec = f"synthshapes:train,count={plan.train_count}"
    test_spec = "synthshapes:test" if plan.eval_limit is None else f"synthshapes:test,count={plan.test_count}"
    command = f"robustvit demo --out {out}" + (" --quick" if quick else "")
    suites, skipped = demo_suites(quick)
    for name, dm in DEMO_MODELS.items():
        mdir = out / name / "train"         # the training run (results.json of kind train); evaluations: out / name
        if not (mdir / "checkpoint" / "spec.json").is_file():
            print(f"[demo] training {name} on {train_spec}", flush=True)
            arch = str(out / dm.architecture[1:] / "train" / "checkpoint") if dm.architecture.startswith("@") else dm.architecture
            cfg = TrainConfig(model=arch, data=train_spec, out=str(mdir), epochs=plan.epochs[name],
                              batch_size=plan.batch_size, warmup_epochs=0.5 if quick else 1.0, val_data=test_spec,
                              val_limit=500, seed=seed, device=device, **dm.train)
            train(cfg, resume=(mdir / "last" / "train_state.pt").is_file(), progress=progress)
    notes = [f"Models trained on {train_spec} ({'quick' if quick else 'default'} plan) and evaluated on {test_spec} "
             f"({plan.eval_limit or plan.test_count} images; analyses on a class-stratified sample of "
             f"{plan.analysis_limit}); training took {training_seconds(out):.0f} s on "
             f"{'CUDA' if resolve_device(device).type == 'cuda' else 'CPU'}.",
             "vit_cifar_demo: a 4-block ViT on a convolutional stem; vit_cifar_demo_fgsm_rs: that ViT fine-tuned "
             f"adversarially for {plan.epochs['vit_cifar_demo_fgsm_rs']} epoch(s) (FGSM-RS, ε = 4/255); resnet_cifar18 "
             "with width_mult=0.25 (a quarter of the channels) so that it trains on a CPU in minutes."]
    notes += [f"Not run by the demo — {s}" for s in skipped]
    study = Study(models={name: str(out / name / "train" / "checkpoint") for name in DEMO_MODELS}, data=test_spec,
                  limit=plan.eval_limit, suites=suites, analyses={n: list(dm.analyses) for n, dm in DEMO_MODELS.items()},
                  out=str(out), analysis_limit=plan.analysis_limit, batch_size=100, seed=seed, device=device,
                  title="robustvit demo: evaluate, explain and harden on synthshapes")
    done = run_study(study, progress=progress, command=command, notes=notes)
    results = {name: {**r, "_dir": str(out / name)} for name, r in done["runs"].items()}
    for name, r in results.items():
        few = next((v for k, v in r["suites"].items() if k.startswith("fewshot")), None)
        shots = "" if few is None else ", few-shot linear " + ", ".join(
            f"{k}-shot {e['mean']:.3f}" for k, e in few["accuracy"].items())
        print(f"[demo] {name}: clean top-1 {r['suites']['clean']['top1']:.3f}{shots}")
    print(f"[demo] report: {out / 'report.md'} and {done['report']}", flush=True)
    return results
