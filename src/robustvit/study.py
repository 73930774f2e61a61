"""``robustvit study SPEC.yaml``: evaluate and analyse several models, then compare them.

The spec (YAML; a typed dataclass, one-line errors)::

    models: [vit_small_patch16_224, resnet50]     # or {name: model or checkpoint folder, …}
    data: imagenet:/data/imagenet/val
    limit: 1000                                   # images per model (a seeded class-stratified sample)
    suites: [clean, "corruptions:severities=1+3+5", "pgd:eps=4/255", transfer]
    analyses: [correlation, lesion]               # or {model name: [analyses]}
    out: study-out

Each model is evaluated (``run_eval``) into ``OUT/<name>`` and analysed (``run_analyses``) into
``OUT/<name>/analysis``, resuming when re-run; ``transfer`` suites run once on all models (``OUT/transfer``).
FLOPs per image are recorded as ``model.flops``. ``OUT/report.html`` / ``report.md`` compare the models
(robustness against parameters and FLOPs as Bhojanapalli et al. 2021, arXiv:2103.14586, Figs. 4–5) and
``OUT/leaderboard.{md,csv,json}`` list them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from robustvit.errors import RobustvitError
from robustvit.options import option, parse_options
from robustvit.runs import count_flops

TRANSFER = "transfer"


@dataclass
class Study:
    """What a study runs. ``models``: a list of timm names / checkpoint folders, or {name: source}."""
    models: list[str] | dict
    data: str
    limit: int | None = option(None, min=1, help="images per model (seeded class-stratified sample)")
    suites: list[str] = field(default_factory=lambda: ["clean"])
    analyses: list[str] | dict = field(default_factory=list)
    out: str = "study-out"
    analysis_limit: int | None = option(None, min=1, help="images for the analyses (default: limit)")
    batch_size: int = option(64, min=1)
    seed: int = 0
    device: str = "auto"
    precision: Literal["auto", "fp32", "tf32", "bf16"] = option(
        "auto", help="how the models compute (auto: bf16 on CUDA for clean, corruption and shift suites; fp32 else)")
    pretrained: bool = False
    flops: bool = True
    title: str = "robustvit study"

    def named_models(self) -> dict[str, str]:
        """{name: source}: a folder's or a timm name's last path component names it."""
        if isinstance(self.models, dict):
            return {str(k): str(v) for k, v in self.models.items()}
        names: dict[str, str] = {}
        for src in self.models:
            path = Path(src.rstrip("/"))
            name = path.parent.name if path.name in ("checkpoint", "best", "last") else path.name
            if name in names:
                raise RobustvitError(f"study: two models are both named {name!r}; give models as a mapping name: source")
            names[name] = src
        return names

    def analyses_for(self, name: str) -> list[str]:
        if isinstance(self.analyses, dict):
            got = self.analyses.get(name, [])
            return [got] if isinstance(got, str) else list(got)
        return list(self.analyses)


def parse_study(raw: dict[str, Any], **overrides: Any) -> Study:
    """A ``Study`` from a mapping (e.g. YAML); ``overrides`` that are not None replace its keys."""
    if not isinstance(raw, dict):
        raise RobustvitError("study spec must be a mapping with models, data, suites, … (see `robustvit study --help`)")
    raw = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    study = parse_options(Study, raw, what="study spec")
    if not study.models:
        raise RobustvitError("study spec: give at least one model under 'models'")
    if not study.suites:
        raise RobustvitError("study spec: give at least one suite under 'suites' (e.g. [clean])")
    if isinstance(study.analyses, dict):
        unknown = sorted(set(study.analyses) - set(study.named_models()))
        if unknown:
            raise RobustvitError(f"study spec: analyses name models that are not in 'models': {', '.join(unknown)}")
    return study


def load_study(path: str | Path, **overrides: Any) -> Study:
    """Read a YAML study spec (``yaml.safe_load``: data only, nothing executed)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise RobustvitError(f"{p} does not exist; write a YAML study spec (models, data, suites, out)")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise RobustvitError(f"{p} is not valid YAML ({str(e).splitlines()[0]})") from None
    return parse_study(raw, **overrides)


def run_study(study: Study, progress: bool = True, command: str | None = None,
              notes: list[str] | None = None) -> dict[str, Any]:
    """Run the study (resumable) and write its report and leaderboard; returns ``{"runs": {name: results},
    "report": Path, "leaderboard": [Path, …]}``."""
    from robustvit.analysis import run_analyses
    from robustvit.data import dataset_for_model
    from robustvit.evaluation.runner import EvalConfig, build_model, run_eval
    from robustvit.leaderboard import format_rows, table_rows
    from robustvit.report import load_runs, write_report
    from robustvit.utils import resolve_device

    out = Path(study.out)
    models = study.named_models()
    transfer = [s for s in study.suites if s.split(":", 1)[0] == TRANSFER]
    suites = [s for s in study.suites if s not in transfer]
    common = dict(data=study.data, limit=study.limit, batch_size=study.batch_size, device=study.device,
                  seed=study.seed, progress=progress, command=command, pretrained=study.pretrained,
                  precision=study.precision, flops=study.flops)
    results: dict[str, dict[str, Any]] = {}
    folders: list[Path] = []
    for name, source in models.items():
        if suites:
            print(f"[study] evaluating {name}: {', '.join(suites)}", flush=True)
            results.update(run_eval(EvalConfig(models={name: source}, suites=suites, out=str(out / name), **common)))
            folders.append(out / name)
        analyses = study.analyses_for(name)
        if analyses:
            print(f"[study] analysing {name}: {', '.join(analyses)}", flush=True)
            model = build_model(source, pretrained=study.pretrained).to(resolve_device(study.device)).eval()
            run_analyses(model, dataset_for_model(study.data, model.spec), analyses, out / name / "analysis",
                         limit=study.analysis_limit or study.limit, seed=study.seed, batch_size=study.batch_size,
                         device=study.device, progress=progress, model_name=name, data_spec=study.data, source=source,
                         command=command, precision=study.precision)
            del model
            if not suites:
                folders.append(out / name / "analysis")
    if transfer:
        print(f"[study] transfer between {', '.join(models)}: {', '.join(transfer)}", flush=True)
        run_eval(EvalConfig(models=dict(models), suites=transfer, out=str(out / TRANSFER), **common))
        folders += [out / TRANSFER / name for name in models] if len(models) > 1 else [out / TRANSFER]
    runs = load_runs(folders)
    _, html = write_report(runs, out, title=study.title, notes=notes)
    rows = table_rows(runs)
    boards = {fmt: out / f"leaderboard.{fmt}" for fmt in ("md", "csv", "json")}
    for fmt, path in boards.items():
        path.write_text(format_rows(rows, fmt))
    return {"runs": results, "report": html, "leaderboard": list(boards.values())}


__all__ = ["Study", "count_flops", "load_study", "parse_study", "run_study"]
