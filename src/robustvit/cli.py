"""The ``robustvit`` command line (every command is in ``COMMANDS``). Errors caused by the input print one line
and exit with status 2; ``--debug`` shows the traceback."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import shlex
import sys
import traceback
import types
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from robustvit.errors import RobustvitError


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_frost_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--frost-dir", help="folder of the ImageNet-C frost photographs (frost1.png … frost5.jpg) for the "
                   "frost corruption; default $ROBUSTVIT_FROST_DIR, else an installed imagecorruptions package's, "
                   "else a procedural texture ('procedural' forces it)")


def add_weights_args(p: argparse.ArgumentParser) -> None:
    """``--pretrained`` / ``--weights FILE`` for commands that build a model from a timm name."""
    p.add_argument("--pretrained", action="store_true",
                   help="load timm's pretrained weights (Hugging Face hub or its cache; HF_HUB_OFFLINE is respected)")
    p.add_argument("--weights", metavar="FILE",
                   help="a .safetensors/.pth state dict for the named architecture (loaded tensors-only)")
    p.add_argument("--model-dir", metavar="DIR",
                   help="robustbench:DATASET/THREAT/NAME models: the folder of RobustBench's weights, "
                   "DIR/DATASET/THREAT/NAME.pt (default ./models); hf: models: the Hugging Face cache folder")


def add_subset_args(p: argparse.ArgumentParser, what: str = "evaluate") -> None:
    """``--limit N``, ``--subset-method``, ``--subset FILE`` and ``--subset-seed`` (``robustvit.data.subset``)."""
    p.add_argument("--limit", type=int, metavar="N", help=f"{what} N images: a seeded class-stratified sample "
                   "(the same images for every model and suite of the run); see --subset-method")
    from robustvit.data.subset import SUBSET_METHODS
    p.add_argument("--subset-method", choices=SUBSET_METHODS, default="stratified",
                   help="how --limit draws the images (and suites' own limit=): stratified (default: classes in "
                   "proportion, seeded by --subset-seed) or first (the first N images)")
    p.add_argument("--subset", metavar="FILE", help="the images to use, one a line: data-set indices or paths relative "
                   "to the data root (e.g. RobustBench's imagenet_test_image_ids.txt), or a JSON list")
    p.add_argument("--subset-seed", type=int, metavar="S", help="seed of the stratified draw (default: --seed)")


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    """``--threads N`` (``robustvit.runs.threads``), set before the command runs."""
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads of torch (intra- and inter-op); default: "
                   "the cores this process may use (CPU affinity), divided among torchrun's processes on the node")


def add_precision_args(p: argparse.ArgumentParser) -> None:
    """``--precision``, ``--compile`` and ``--deterministic`` (``eval``)."""
    from robustvit.evaluation.suites.base import PRECISION_CHOICES
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="auto",
                   help="how the model computes: fp32, tf32 (CUDA matrix products), bf16 (autocast, CUDA and CPU), or "
                   "auto (default: bf16 on CUDA for the clean, corruption and shift suites, fp32 otherwise); attacks "
                   "re-check in fp32 every point they report robust")
    p.add_argument("--compile", action="store_true", help="torch.compile the network (dynamic shapes)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms only (reproducible bit for bit on one GPU; slower)")


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="train a small ViT and ResNet on synthshapes, evaluate and report (the main job)")
    p.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    p.add_argument("--quick", action="store_true", help="a ~2-minute version (fewer images, epochs and suites' samples)")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)


def cmd_demo(a: argparse.Namespace) -> int:
    from robustvit.demo import run_demo
    run_demo(out=a.out, quick=a.quick, device=a.device, seed=a.seed)
    return 0


def _module_attr(module: str, attr: str) -> Any:
    import importlib
    return getattr(importlib.import_module(module), attr)


def _command_line(a: argparse.Namespace) -> str:
    """The command as typed, for results.json."""
    return "robustvit " + shlex.join(a.argv)


#: TrainConfig fields set through their own flags (``--loss-option KEY=VALUE``), not a generated one.
_TRAIN_OWN_FLAGS = ("loss_options",)


def _train_fields() -> list[tuple[dataclasses.Field, Any]]:
    """TrainConfig's fields with their resolved types (every field gets a ``--flag``)."""
    from robustvit.training import TrainConfig
    hints = typing.get_type_hints(TrainConfig)
    return [(f, hints.get(f.name, Any)) for f in dataclasses.fields(TrainConfig) if f.init]


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return tp


def _json_dict(flag: str) -> Callable[[str], dict[str, Any]]:
    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise RobustvitError(f"{flag} is not valid JSON ({e})") from None
        if not isinstance(value, dict):
            raise RobustvitError(f"{flag} must be a JSON object, e.g. '{{\"depth\": 4}}'")
        return value
    return parse


def _add_field_flag(p: argparse.ArgumentParser, f: dataclasses.Field, tp: Any) -> None:
    """``--field-name`` for one TrainConfig field, with the field's help and choices. Values stay strings here:
    TrainConfig's parser converts and checks them against the declared types, choices and bounds (one line)."""
    flag = "--" + f.name.replace("_", "-")
    default = f.default if f.default is not dataclasses.MISSING else None
    tp = _unwrap_optional(tp)
    help_ = f.metadata.get("help", "")
    choices = [str(c) for c in typing.get_args(tp)] if typing.get_origin(tp) is Literal else []
    if choices:
        help_ += f"; one of: {', '.join(choices)}"
    if default not in (None, "") and not isinstance(default, (dict, list)):
        help_ += f" (default {default})"
    kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help_}
    if tp is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif tp is dict or typing.get_origin(tp) is dict:
        kw["type"], kw["metavar"] = _json_dict(flag), "JSON"
    elif typing.get_origin(tp) in (tuple, list):
        kw["help"], kw["type"] = help_ + " (YAML value)", _yaml_value
    elif choices:
        kw["metavar"] = "{" + ",".join(choices) + "}"
    p.add_argument(flag, **kw)


def _yaml_value(text: str) -> Any:
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _train_arguments(p: argparse.ArgumentParser) -> None:
    """The flags ``train`` and ``finetune`` share: one per TrainConfig field (generated from the dataclass, so a
    field added later gets its flag), ``--set`` for any field, ``--loss-option``, ``--config``, ``--resume`` and
    ``--print-config``."""
    p.add_argument("--config", help="YAML TrainConfig; command-line flags override it")
    for f, tp in _train_fields():
        if f.name not in _TRAIN_OWN_FLAGS:
            _add_field_flag(p, f, tp)
    p.add_argument("--loss-option", action="append", default=[], metavar="KEY=VALUE",
                   help="loss option, repeatable, e.g. --loss-option beta=6")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TrainConfig field, repeatable, e.g. --set ema_decay=0.999 --set accum_steps=2")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last epoch")
    add_threads_arg(p)
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved TrainConfig as JSON (defaults < recipe < --config < flags) and exit; "
                        "the output is a valid --config file")
    p.set_defaults(func=_cmd_training)


def _key_values(items: list[str], flag: str) -> dict[str, Any]:
    """``key=value`` pairs with YAML-typed values (``6`` → int, ``true`` → bool, ``4/255`` stays a string)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RobustvitError(f"{flag} takes KEY=VALUE, got {item!r}")
        out[key.strip().replace("-", "_")] = _yaml_value(value)
    return out


def _train_config(a: argparse.Namespace) -> Any:
    """The TrainConfig of a ``train``/``finetune`` command line: defaults < recipe < ``--config`` < flags."""
    from robustvit.training import TrainConfig
    overrides: dict[str, Any] = {f.name: getattr(a, f.name) for f, _ in _train_fields()
                                 if getattr(a, f.name, None) is not None}
    overrides.update(_key_values(a.set, "--set"))
    if a.loss_option:
        overrides["loss_options"] = {**overrides.get("loss_options", {}), **_key_values(a.loss_option, "--loss-option")}
    if a.config:
        return TrainConfig.load(a.config, **overrides)
    return TrainConfig.from_dict({}, "command line", overrides)


def add_train(sub: argparse._SubParsersAction) -> None:
    _train_arguments(sub.add_parser("train", help="train a model: robust losses, recipes, checkpoints, --resume, "
                                    "torchrun"))


def add_finetune(sub: argparse._SubParsersAction) -> None:
    _train_arguments(sub.add_parser("finetune", help="fine-tune a model: new zero-initialised head, new resolution / "
                                    "patch size, (adversarial) training with any loss"))


def _cmd_training(a: argparse.Namespace) -> int:
    """``train`` and ``finetune``: print the config (``--print-config``: JSON is YAML, so the output is a
    ``--config`` file too), or run it and print where the checkpoint went."""
    if a.print_config:
        print(json.dumps(_train_config(a).to_dict(), indent=1, default=str))
        return 0
    from robustvit.training import train
    from robustvit.training.finetune import finetune
    path = (finetune if a.command == "finetune" else train)(_train_config(a), resume=a.resume)
    print(f"saved {path}")
    return 0


def add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate models with suites; resumable; writes results.json")
    from robustvit.attacks.base import NORMS
    from robustvit.data.loader import DECODERS
    from robustvit.evaluation.suites import list_suites
    p.add_argument("--model", required=True, help="model name(s), checkpoint folder(s) or source specs (tv:NAME, "
                   "robustbench:DATASET/THREAT/NAME, hf:REPO_OR_DIR; docs/models.md), comma-separated")
    p.add_argument("--data", required=True, help="data spec, e.g. synthshapes:test")
    p.add_argument("--suite", action="append", help=f"comma-separated suites (name[:key=value…]; the flag may be "
                   "repeated; default: clean); available: "
                   f"{', '.join(list_suites())} (their options: `robustvit list suites --options`)")
    p.add_argument("--out", required=True, help="output folder (re-running resumes)")
    add_subset_args(p, "evaluate")
    p.add_argument("--batch-size", type=int, default=128, help="images per forward pass (attacks divide it by their "
                   "memory factor; halved by itself on CUDA out-of-memory); a run resumes with another one to "
                   "identical results")
    p.add_argument("--chunk-size", type=int, metavar="N", help="images per unit of work (what is stored, resumed and "
                   "shared between torchrun ranks; default: the folder's own when resuming, else --batch-size)")
    p.add_argument("--device", default="auto")
    add_precision_args(p)
    add_threads_arg(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", default="auto", help="data-loading worker processes: auto (default: min(8, "
                   "cores − 1)) or a number (0: read in this process, on a background thread)")
    p.add_argument("--decode", choices=DECODERS, default="cpu", help="JPEG decoding of folder data: cpu "
                   "(libjpeg-turbo in the workers, as timm; default) or gpu (nvjpeg on the CUDA device)")
    p.add_argument("--strict", action="store_true", help="fail on unreadable image files instead of counting them")
    p.add_argument("--eps", help="attack budget of every attack suite (a suite's eps= wins), e.g. 4/255; default: "
                   "the data's, 8/255 on CIFAR-sized images, 4/255 on ImageNet-sized ones (L2: 0.5 / 3.0)")
    p.add_argument("--norm", choices=NORMS, help="attack norm of every attack suite (a suite's norm= wins)")
    p.add_argument("--steps", type=int, help="iterations of every attack suite whose attack has steps (a suite's "
                   "steps= wins)")
    p.add_argument("--no-progress", action="store_true")
    add_weights_args(p)
    p.add_argument("--class-map", metavar="FILE", help="JSON: the model class index (or indices) of each data class, "
                   "as a list or keyed by class name — e.g. a 1000-class ImageNet model on a 10-class data set")
    p.add_argument("--shard", metavar="K/N", help="evaluate only the K-th of N disjoint sets of image chunks (K = 1 … N; "
                   "for job arrays, each shard with its own --out); then `robustvit merge OUT_1 … OUT_N --out OUT`")
    add_frost_arg(p)
    p.set_defaults(func=cmd_eval)


def check_pretrained_classes(models: list[str], data: str, class_map: str | None) -> None:
    """``--pretrained`` without ``--class-map``: refuse a timm model whose pretrained head has another class count
    than the data before anything is downloaded (timm's pretrained config states it)."""
    import timm

    from robustvit.data import create_dataset
    from robustvit.models import is_checkpoint_dir
    if class_map is not None:
        return
    heads = {}
    for name in models:
        cfg = None if is_checkpoint_dir(name) else timm.models.get_pretrained_cfg(name, allow_unregistered=True)
        if cfg is not None and getattr(cfg, "num_classes", None):
            heads[name] = int(cfg.num_classes)
    if not heads:
        return
    want = create_dataset(data).num_classes
    for name, have in heads.items():
        if have != want:
            raise RobustvitError(
                f"model {name}'s pretrained weights have {have} classes but {data} has {want}; give --class-map FILE "
                f"(JSON: for each data class, the model class index or indices) or fine-tune it first "
                f"(robustvit finetune --model {name} --pretrained --data ...)")


def cmd_eval(a: argparse.Namespace) -> int:
    from robustvit.evaluation.runner import EvalConfig, run_eval
    models = _csv(a.model)
    if a.pretrained:
        check_pretrained_classes(models, a.data, a.class_map)
    results = run_eval(EvalConfig(
        models=models, data=a.data, suites=_csv(",".join(a.suite or ["clean"])), out=a.out, limit=a.limit,
        batch_size=a.batch_size, chunk_size=a.chunk_size, device=a.device, precision=a.precision, compile=a.compile,
        deterministic=a.deterministic, seed=a.seed, strict=a.strict, workers=a.workers, decode=a.decode,
        options={"eps": a.eps, "norm": a.norm, "steps": a.steps}, progress=not a.no_progress,
        pretrained=a.pretrained, weights=a.weights, model_dir=a.model_dir, class_map=a.class_map,
        subset_method=a.subset_method, subset=a.subset, subset_seed=a.subset_seed, shard=a.shard,
        command=_command_line(a)))
    if a.shard is not None:
        print(f"shard {a.shard}: its units are in {a.out}; merge all shards with `robustvit merge OUT_1 … OUT_N --out OUT`")
    for name, res in results.items():
        print(f"{name}:")
        for key, r in res["suites"].items():
            print(f"  {_summary_line(key, r)}")
            if r.get("checks_cost"):
                from robustvit.report.sections.adversarial import checks_text
                print(f"    {checks_text(r['checks_cost'])}")
    return 0


def _summary_line(key: str, result: dict[str, Any], width: int = 120) -> str:
    """``key: metric=0.1234, …`` for a suite's scalar metrics; past ``width`` characters whole metrics are left
    out (``… N more in results.json``), never cut inside a number."""
    items = [f"{m}={v:.4f}" for m, v in result.items() if isinstance(v, float)]
    line = f"{key}:"
    for i, item in enumerate(items):
        rest = len(items) - i
        if i and len(line) + len(item) + 2 > width - (len(f", … {rest} more in results.json") if rest > 1 else 0):
            return line + f", … {rest} more in results.json"
        line += (", " if i else " ") + item
    return line


def add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="side-by-side Markdown + HTML report of result folders")
    p.add_argument("results", nargs="+", help="run folders (results.json, or the files); a parent folder stands "
                   "for every run below it")
    p.add_argument("--out", required=True, help="output folder for report.md / report.html")
    p.add_argument("--title", default="robustvit report")
    p.set_defaults(func=cmd_report)


def cmd_report(a: argparse.Namespace) -> int:
    from robustvit.report import load_results, write_report
    md, html = write_report(load_results(a.results), Path(a.out), title=a.title)
    print(f"wrote {md} and {html}")
    return 0


def _lister(module: str, function: str) -> Callable[[str | None], list[str]]:
    return lambda pattern=None: _module_attr(module, function)(pattern)


#: ``robustvit list WHAT``: each entry lists a registry (with an optional shell-style pattern).
LISTS: dict[str, Callable[[str | None], list[str]]] = {
    "models": _lister("robustvit.models", "list_models"),
    "suites": _lister("robustvit.evaluation.suites", "list_suites"),
    "attacks": _lister("robustvit.attacks", "list_attacks"),
    "corruptions": lambda pattern=None: list(dict.fromkeys(                     # ImageNet-C's, -C̄'s, CIFAR-10-C̄'s
        n for g in (None, "imagenet_c_bar", "cifar10_c_bar") for n in _lister("robustvit.corruptions", "list_corruptions")(g)
        if pattern is None or fnmatch.fnmatch(n, pattern))),
    "data": _lister("robustvit.data", "list_sources"),
    "losses": _lister("robustvit.training", "list_losses"),
    "recipes": _lister("robustvit.training", "list_recipes"),
    "analyses": _lister("robustvit.analysis", "list_analyses"),
    "perturbations": _lister("robustvit.corruptions", "list_perturbations"),
}


def _first_line(text: str | None) -> str:
    """The first paragraph of a docstring or description as one line, without reST markup."""
    para = " ".join((text or "").strip().split("\n\n")[0].split()).replace("``", "").replace(":class:", "")
    if len(para) > 150:                     # a long paragraph: its first sentence, else whole words up to 150
        end = para.find(". ", 40)
        para = para[:end + 1] if 0 < end < 150 else para[:150].rsplit(" ", 1)[0] + " …"
    return para


def _component(what: str, name: str) -> Any:
    """The registered analysis, loss class or recipe ``name``."""
    if what == "analyses":
        return _module_attr("robustvit.analysis.base", "get_analysis")(name)
    if what == "losses":
        return _module_attr("robustvit.training.losses.base", "LOSSES").get(name)
    return _module_attr("robustvit.training.recipes", "get_recipe")(name)


def _description(what: str, name: str) -> str:
    """One line on a listed analysis, loss or recipe: its ``description``, else its docstring's first paragraph."""
    obj = _component(what, name)
    cls = obj if isinstance(obj, type) else type(obj)
    return _first_line(getattr(obj, "description", "") or cls.__doc__)


def _component_options(what: str, name: str) -> list[dict[str, Any]]:
    """``list analyses|losses --options``: the component's ``Options``; ``list recipes --options``: the
    TrainConfig fields the recipe sets, with its values as defaults."""
    obj = _component(what, name)
    if what == "recipes":
        return [{"name": k, "type": type(v).__name__, "default": v, "help": "set by the recipe"}
                for k, v in obj.settings.items()]
    return _module_attr("robustvit.options", "describe")(obj.Options)


#: ``robustvit list WHAT`` with a one-line description of each name.
DESCRIBED = ("analyses", "losses", "recipes")
#: ``robustvit list WHAT --options``: the options of each listed component (``robustvit.options.describe``).
OPTION_LISTS: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "suites": lambda n: _module_attr("robustvit.evaluation.suites.base", "suite_options")(n),
    "attacks": lambda n: _module_attr("robustvit.attacks.base", "attack_options")(n),
    **{what: (lambda n, what=what: _component_options(what, n)) for what in DESCRIBED},
}


def _format_options(name: str, entries: list[dict[str, Any]]) -> str:
    """One component's options, one a line: ``name``, then ``  key  type  = default  help``."""
    lines = [name]
    for e in entries:
        default = "" if e["default"] is None else f" = {e['default']}"
        lines.append(f"  {e['name']}: {e['type']}{default}" + (f"  — {e['help']}" if e.get("help") else ""))
    return "\n".join(lines)


def add_list(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help=f"list {', '.join(LISTS)}")
    p.add_argument("what", choices=list(LISTS))
    p.add_argument("pattern", nargs="?", help="shell-style filter, e.g. 'vit_*'")
    p.add_argument("--options", action="store_true",
                   help=f"{', '.join(OPTION_LISTS)} only: each one's options (name, type, default, help; "
                   "a recipe: the fields it sets)")
    p.add_argument("--capabilities", nargs="?", const="", metavar="PATTERN",
                   help="models only: which analyses, attacks and suites apply to each matching model, its probe, class "
                        "token and registers (each model is built at its default size with random weights on the CPU: "
                        "seconds per model; nothing is run but the probe's self-check; see docs/models.md)")
    p.set_defaults(func=cmd_list)


def cmd_list(a: argparse.Namespace) -> int:
    if getattr(a, "capabilities", None) is not None:
        if a.what != "models":
            raise RobustvitError("--capabilities applies to `robustvit list models`")
        from robustvit.capabilities import capability_rows, format_one, format_table
        pattern = a.capabilities or a.pattern or "*"
        rows = capability_rows(pattern)
        print(format_one(rows[0]) if len(rows) == 1 and "error" not in rows[0] else format_table(rows))
        return 0
    names = LISTS[a.what](a.pattern)
    if getattr(a, "options", False):
        if a.what not in OPTION_LISTS:
            raise RobustvitError(f"--options applies to `robustvit list {' | '.join(OPTION_LISTS)}`")
        lines = [_format_options(n, OPTION_LISTS[a.what](n)) for n in names]
    elif a.what in DESCRIBED and names:
        width = max(map(len, names))
        lines = [f"{n:<{width}}  {_description(a.what, n)}".rstrip() for n in names]
    else:
        lines = names
    print("\n".join(lines))
    return 0


def add_corrupt(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("corrupt", help="write a corrupted copy of a data set in the ImageNet-C or CIFAR-10-C layout (resumable)")
    from robustvit.corruptions.params import PRESET_SIZES
    from robustvit.data.corrupted import LAYOUTS
    from robustvit.data.export import IMAGE_FORMATS
    p.add_argument("--data", required=True, help="data spec, e.g. imagenet:/val or cifar10:test or synthshapes:test")
    p.add_argument("--out", required=True, help="output folder (re-running skips finished corruption × severity units)")
    p.add_argument("--format", dest="layout", choices=LAYOUTS, default="imagenet-c",
                   help="imagenet-c: OUT/<corruption>/<severity>/<class>/<name>.JPEG; cifar-c: OUT/<corruption>.npy + labels.npy")
    p.add_argument("--corruptions", default="all", help="a group (all, benchmark, noise, blur, weather, digital, extra, "
                   "imagenet_c_bar, cifar10_c_bar) or names joined by , or + (default all 19)")
    p.add_argument("--severities", default="1-5", help="e.g. 1-5, 3 or 1,3,5 (cifar-c needs all 5)")
    p.add_argument("--preset", choices=tuple(PRESET_SIZES), help="parameter table (default: by image size)")
    p.add_argument("--image-format", choices=tuple(IMAGE_FORMATS), default="jpeg",
                   help="imagenet-c files: JPEG quality 85 like the released ones (default), or lossless PNG")
    p.add_argument("--image-size", type=int, help="resize file-based images to this size (default 224: Resize 256 + CenterCrop 224)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    add_subset_args(p, "corrupt")
    p.add_argument("--no-progress", action="store_true")
    add_frost_arg(p)
    p.set_defaults(func=cmd_corrupt)


def cmd_corrupt(a: argparse.Namespace) -> int:
    from robustvit.data.export import ExportConfig, export_corrupted
    r = export_corrupted(ExportConfig(data=a.data, out=a.out, layout=a.layout, corruptions=a.corruptions,
                                      severities=a.severities, preset=a.preset, seed=a.seed, batch_size=a.batch_size,
                                      device=a.device, limit=a.limit, image_format=a.image_format,
                                      image_size=a.image_size, progress=not a.no_progress,
                                      subset_method=a.subset_method, subset=a.subset, subset_seed=a.subset_seed))
    print(f"wrote {r['units_written']} corruption × severity units ({r['units_skipped']} already done) of "
          f"{r['num_images']} images to {r['out']} ({r['layout']}, preset {r['preset']})")
    return 0


def add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="explain a model: layer correlation, lesion, restricted attention, attention "
                       "distance/maps, grouping, stability, perturbation semantics (resumable)")
    from robustvit.models.wrapper import PRECISIONS
    p.add_argument("analyses", help="comma-separated analyses, each name[:key=value…] (see `robustvit list analyses`)")
    p.add_argument("--model", required=True, help="model name or checkpoint folder")
    p.add_argument("--data", required=True, help="data spec, e.g. synthshapes:test")
    add_weights_args(p)
    p.add_argument("--out", required=True, help="output folder (re-running resumes)")
    add_subset_args(p, "analyse")
    p.add_argument("--class-map", metavar="FILE", help="JSON: the model class index (or indices) of each data class, "
                   "as a list or keyed by class name — e.g. a 1000-class ImageNet model on a 10-class data set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="how the model's forward computes (the probe's self-check stays fp32)")
    add_threads_arg(p)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_analyze)


def cmd_analyze(a: argparse.Namespace) -> int:
    from robustvit.analysis import run_analyses
    from robustvit.data import dataset_for_model
    from robustvit.evaluation.runner import build_model, model_dir_name
    from robustvit.models.factory import warn_if_random
    if a.pretrained:
        check_pretrained_classes([a.model], a.data, a.class_map)
    model = build_model(a.model, pretrained=a.pretrained, weights=a.weights, data=a.data, model_dir=a.model_dir)
    warn_if_random(a.model, model)
    dataset = dataset_for_model(a.data, model.spec)
    name = model_dir_name(a.model, model)
    res = run_analyses(model, dataset, _csv(a.analyses), a.out, limit=a.limit, seed=a.seed, batch_size=a.batch_size,
                       device=a.device, precision=a.precision, progress=not a.no_progress, model_name=name,
                       data_spec=a.data, source=a.model,
                       subset_method=a.subset_method, subset=a.subset, subset_seed=a.subset_seed, class_map=a.class_map,
                       command=_command_line(a))
    for key, r in res.items():
        print(f"{key}: wrote {Path(a.out) / (key + '.json')}" + (f" and {', '.join(r.get('figures', []))}" if r.get("figures") else ""))
    return 0


def add_merge(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="merge the folders of `robustvit eval --shard K/N` runs into one results.json")
    p.add_argument("shards", nargs="+", metavar="OUT_K", help="the shards' --out folders (all N of them, any order)")
    p.add_argument("--out", required=True, help="output folder of the merged run (results.json, units.sqlite)")
    p.add_argument("--no-progress", action="store_true",
                   help="accepted for symmetry with eval (a merge evaluates nothing)")
    p.set_defaults(func=cmd_merge)


def cmd_merge(a: argparse.Namespace) -> int:
    from robustvit.evaluation.runner import merge_shards
    results = merge_shards(a.shards, a.out, command=_command_line(a))
    print(f"merged {len(a.shards)} shards of {', '.join(results)} into {a.out}")
    return 0


def add_leaderboard(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("leaderboard", help="one table of many runs: a row per model × data × threat model "
                       "(clean, corruptions, PGD, AutoAttack, … and comparability labels)")
    from robustvit.leaderboard import FORMATS, TABLE_COLUMNS
    p.add_argument("runs", nargs="*", help="run folders (results.json; a parent folder: every run below it); with "
                   "--db they are added to the database")
    p.add_argument("--db", metavar="FILE", help="SQLite database: add the runs, then show every run it holds")
    p.add_argument("--format", dest="fmt", choices=list(FORMATS), default="md",
                   help="md (default), csv (raw fractions), latex, html, json (robustvit's entries, RobustBench's "
                   "field names) or robustbench (RobustBench's model_info files in --out DIR, comparable numbers only)")
    p.add_argument("--out", metavar="FILE", help="write the table here (default: print it); a folder for robustbench")
    p.add_argument("--sort", metavar="COL", help=f"sort by a column, best first: {', '.join(TABLE_COLUMNS)}")
    p.set_defaults(func=cmd_leaderboard)


def cmd_leaderboard(a: argparse.Namespace) -> int:
    from robustvit.leaderboard import format_rows, leaderboard
    rows = leaderboard(a.runs, db=a.db, fmt=a.fmt, out=a.out, sort=a.sort)
    if a.out:
        print(f"wrote {len(rows)} rows to {a.out}")
    else:
        print(format_rows(rows, a.fmt), end="")
    return 0


def add_study(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="evaluate and analyse several models from a YAML spec (resumable), then "
                       "write OUT/report.html and OUT/leaderboard.*")
    from robustvit.evaluation.suites.base import PRECISION_CHOICES
    p.add_argument("spec", help="YAML file with models, data, limit, suites, analyses, out")
    p.add_argument("--out", help="output folder (overrides the spec's out)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=PRECISION_CHOICES,
                   help="how the models compute (overrides the spec's precision; default auto)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_study)


def cmd_study(a: argparse.Namespace) -> int:
    from robustvit.study import load_study, run_study
    study = load_study(a.spec, out=a.out, device=a.device, precision=a.precision)
    res = run_study(study, progress=not a.no_progress,
                    command=_command_line(a))
    print(f"study of {len(res['runs'])} models: {res['report']} and {', '.join(map(str, res['leaderboard']))}")
    return 0


#: Every sub-command, in the order ``--help`` lists them: a function adding its parser (with ``func`` set).
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_demo, add_train, add_eval, add_report, add_list, add_corrupt, add_finetune, add_analyze, add_merge,
    add_leaderboard, add_study]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robustvit", description="Evaluate, explain and harden the robustness of "
                                "Vision Transformers (and CNN baselines).")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # with argv, only the command it names gets its options (they import torch); the others their name and help
    chosen = None if argv is None else next((t for t in argv if not t.startswith("-")), "")
    for add in COMMANDS:
        try:
            add(_Commands(sub, chosen))
        except _Listed:
            pass
    return p


class _Listed(Exception):
    """Raised by :class:`_Commands` once a command that is not run has its name and help."""


class _Commands:
    """The sub-parsers as the ``add_*`` functions see them: the chosen command (every one when None) gets its
    parser; any other is listed by name and help, and its ``add_*`` function stops there (so ``robustvit --help``
    and ``--version`` answer without importing torch)."""

    def __init__(self, sub: argparse._SubParsersAction, chosen: str | None) -> None:
        self.sub, self.chosen = sub, chosen

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if self.chosen is None or name == self.chosen:
            return self.sub.add_parser(name, **kwargs)
        self.sub.add_parser(name, help=kwargs.get("help"))
        raise _Listed


def _version() -> str:
    import robustvit
    return f"robustvit {robustvit.__version__}"


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Warnings on the command line: one line each, like the errors."""
    print(f"robustvit: warning: {message}", file=sys.stderr, flush=True)


#: Substrings by which torch, safetensors and SQLite report a full file system (their errors carry no errno).
DISK_FULL_TEXT = ("database or disk is full", "no space left on device", "disk quota exceeded", "file write failed",
                  "storagefull", "os error 28")


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and the exceptions it was raised from or during (``__cause__`` / ``__context__``)."""
    out: list[BaseException] = []
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _nearly_full(out: str | None, margin: int = 1 << 20) -> bool:
    """Whether the file system holding ``out`` (or its nearest existing parent) has less than ``margin`` bytes free."""
    import shutil
    p = Path(out) if out else None
    while p is not None and not p.exists() and p != p.parent:
        p = p.parent
    try:
        return p is not None and shutil.disk_usage(p).free < margin
    except OSError:
        return False


def environment_error(e: BaseException, out: str | None = None) -> str | None:
    """The one-line message for a fault of the machine rather than of robustvit — a full disk (``ENOSPC``,
    ``EDQUOT``, SQLite's or torch's or safetensors' words for it), a file it may not write, Pillow's
    decompression-bomb refusal — or None. Finished work is kept, so the remedy is: fix it, re-run the command."""
    import errno
    where = f" (the file system of {out})" if out else ""
    for x in _chain(e):
        text = str(x).lower()
        code = getattr(x, "errno", None) if isinstance(x, OSError) else None
        full = code in (errno.ENOSPC, errno.EDQUOT) or any(t in text for t in DISK_FULL_TEXT)
        if full or ("disk i/o error" in text and _nearly_full(out)):   # SQLite's word for a WAL it cannot grow
            return (f"the disk is full{where}: free space there (or pass another --out) and re-run the same "
                    "command; finished work is kept and resumed, partial files are not trusted")
        if "disk i/o error" in text:
            return (f"a disk I/O error{where} ({x}); check that file system (space, quota, hardware) and re-run the "
                    "same command; finished work is kept and resumed")
        if code in (errno.EACCES, errno.EPERM, errno.EROFS):
            name = getattr(x, "filename", None) or out or "a file"
            return f"cannot write or read {name} ({x.strerror}); check its permissions or choose another --out"
        if type(x).__name__ == "DecompressionBombError":
            return (f"{str(x).splitlines()[0]}; the image exceeds Pillow's pixel limit (a possible decompression "
                    "bomb): remove it, or raise PIL.Image.MAX_IMAGE_PIXELS if you trust the file")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    args: argparse.Namespace | None = None
    try:
        args = build_parser(argv).parse_args(argv)
        args.argv = argv
        if "threads" in vars(args) and not getattr(args, "print_config", False):
            from robustvit.runs.threads import set_threads
            set_threads(args.threads)
        if getattr(args, "frost_dir", None):
            os.environ["ROBUSTVIT_FROST_DIR"] = args.frost_dir      # read by robustvit.corruptions.frost
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        again = "re-run it with --resume" if getattr(args, "func", None) is _cmd_training else \
            "re-run the same command"
        print(f"robustvit: interrupted; {again} to resume", file=sys.stderr)
        return 130
    except Exception as e:  # an input or environment fault that has a one-line remedy (full disk, permissions)
        message = str(e) if isinstance(e, RobustvitError) else environment_error(e, getattr(args, "out", None))
        if message is None:
            if debug:
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            print(f"robustvit: error: {type(e).__name__}: {first} (run with --debug for the traceback)", file=sys.stderr)
            return 1
        if debug:
            traceback.print_exc()
        print(f"robustvit: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
