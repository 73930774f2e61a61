"""Adversarial evaluation suites: every registered attack by its name with its own options (``pgd``,
``pgd:eps=1/255:steps=20``, ``square:n_queries=1000``, …; a newly registered attack is a suite with no other edit)
and the suites whose protocol differs: ``apgd``, ``autoattack``, ``spatial``, ``patch_fool`` and ``transfer`` (the
settings of Bhojanapalli et al. 2021, arXiv:2103.14586, and Croce & Hein 2020, arXiv:2003.01690). See docs/attacks.md.

**Options**: the attack's own, plus ``save``, ``checks`` (and ``check_queries``), resolved once by
:func:`attack_kwargs`. The default budget follows the data (RobustBench): L∞ 8/255 (L2 0.5) on CIFAR-10/100 and
images of at most 32×32 px, 4/255 (L2 3.0) otherwise; ``eps_source`` records where ε came from.

**Robust accuracy** is RobustBench's (:func:`robustvit.metrics.accuracy.robust_correct`): correct before *and*
after the attack, so ``accuracy <= clean_accuracy``; only correctly classified images are attacked; NaN or infinite
logits are never correct (``num_nonfinite``). A targeted attack aims at a random wrong class per image. Each chunk's
attack is seeded from (run seed, suite key, chunk): results replay and every model of a run sees the same starts.

``flags`` holds the gradient-masking checks of :mod:`robustvit.attacks.checks` that apply to the attack, run on the
attacked images of some chunks (:meth:`AttackSuite.check_plan`); ``checks_cost`` records what they cost. ``save=N``
writes the first N clean / adversarial / perturbation ((δ + ε) / 2ε) PNGs under ``OUT/adversarial/<suite key>/``;
``save=all`` every adversarial example into one safetensors file.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import time
import types
import typing
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import torch
from torch import nn

from robustvit.attacks import checks, create_attack
from robustvit.attacks.autoattack import AutoAttack
from robustvit.attacks.base import ATTACKS, NORMS, Attack, canonical_norm, list_attacks
from robustvit.attacks.apgd import APGDT
from robustvit.attacks.patch_fool import PatchFool
from robustvit.attacks.spatial import Spatial, translation_convention
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import (CIFAR_SOURCES, SUITES, Batch, EvalContext, Suite, SuiteOptions,
                                            nonfinite_result, register_suite)
from robustvit.metrics.accuracy import correct, nonfinite_rows
from robustvit.models.factory import build_named_model, has_random_weights
from robustvit.models.wrapper import inference_settings
from robustvit.models.probe import is_probeable
from robustvit.options import Eps, option, option_names, parse_options
from robustvit.runs import write_bytes
from robustvit.utils import derive_seed, parse_eps

#: Default budgets by data convention (RobustBench: CIFAR-10/100 L∞ 8/255, L2 0.5; ImageNet L∞ 4/255, L2 3.0;
#: AutoAttack's L1 protocol, Croce & Hein 2021: CIFAR-10 L1 12).
DEFAULT_EPS = {("cifar", "linf"): "8/255", ("cifar", "l2"): "0.5", ("imagenet", "linf"): "4/255", ("imagenet", "l2"): "3.0",
               ("cifar", "l1"): "12"}
#: Data whose images are at most this many pixels on a side follow the CIFAR convention.
CIFAR_SIDE = 32
#: The run-level options (``robustvit eval --eps/--norm/--steps``) an attack suite takes when its attack does.
RUN_OPTIONS = ("eps", "norm", "steps")
#: The APGD attacks the ``apgd`` suite chooses among (``attack=``).
APGD_ATTACKS = ("apgd_ce", "apgd_dlr", "apgd_t")


@dataclass
class ExampleOptions(SuiteOptions):
    """Options of every attack suite: saved examples and gradient-masking checks."""

    save: int | Literal["all"] = option(0, min=0, help="write the first N clean / adversarial / perturbation images "
                                                       "as PNGs; all: every adversarial example (float32) and its "
                                                       "image index into one safetensors file")
    save_dtype: Literal["float32", "uint8"] = option("float32", help="save=all: float32 (the examples as attacked) "
                                                                      "or uint8 (round(x·255), the values a PNG holds)")
    checks: int | Literal["auto", "all"] = option("auto", min=0, help="gradient-masking checks: auto (a sample "
                                                  "costing about a quarter of the attack), all (every attacked "
                                                  "image), N (the first N images) or 0 (none)")


@dataclass
class BlackboxCheckOptions(ExampleOptions):
    """Options of the attack suites that run the black-box check."""

    check_queries: int = option(100, min=1, help="queries of the black-box (Square) check")


# ---- the data's default budget and the one resolution of an attack's options ------------------------------
def data_side(ctx: EvalContext) -> int | None:
    """The larger side of the data's own images (the first file's header for file data, else the first image),
    else the model's input side; None when neither is known."""
    ds = ctx.dataset
    try:
        samples = getattr(ds, "samples", None)
        if samples:
            from PIL import Image

            with Image.open(samples[0][0]) as im:
                return max(im.size)
        if ds is not None and len(ds):
            return int(max(ds[0][0].shape[-2:]))
    except Exception:   # noqa: BLE001  an unreadable first image: fall back to the model's input side
        pass
    return ctx.image_size


def data_convention(ctx: EvalContext) -> tuple[str, str]:
    """(budget convention, why): ``cifar`` for CIFAR-10/100 (``cifar``) and for images of at most 32 px
    (``cifar-sized``), else ``imagenet``."""
    if ctx.data_source in CIFAR_SOURCES:
        return "cifar", "cifar"
    side = data_side(ctx)
    if side is not None and side <= CIFAR_SIDE:
        return "cifar", "cifar-sized"
    return "imagenet", "imagenet"


def _default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return f.default if f.default is not dataclasses.MISSING else None


def budgeted(attack: type[Attack]) -> bool:
    """Whether the attack is bounded by ε by default (so the run's ``--eps/--norm`` and the data's ε apply)."""
    return attack.bounded and "eps" in option_names(attack.Options) and _default(attack.Options, "eps") is not None


def attack_kwargs(attack: type[Attack], given: Mapping[str, Any], run: Mapping[str, Any],
                  convention: tuple[str, str]) -> tuple[dict[str, Any], str | None]:
    """The keywords an attack suite passes to ``attack``, and where its ε came from (``option``, ``run``,
    ``default:<why>``; None for an attack unbounded by default and no ε given). Per option: the suite's (``given``,
    typed) > the run's (``run``: ``--eps/--norm/--steps``, raw) for an attack that takes it > for the ε of a budgeted
    attack, :data:`DEFAULT_EPS` by norm and ``convention`` (convention, why) > the attack's own default (not passed)."""
    names = set(option_names(attack.Options))
    kw = {k: v for k, v in given.items() if k in names}
    has_budget = budgeted(attack)
    for k in RUN_OPTIONS:
        if k in kw or k not in names or run.get(k) is None or (k != "steps" and not has_budget):
            continue
        kw[k] = getattr(parse_options(attack.Options, {k: run[k]}, what=f"--{k} (attack {attack.name!r})"), k)
    if "eps" in given:
        return kw, "option" if given["eps"] is not None else None
    if not has_budget:
        return kw, None
    if "eps" in kw:
        return kw, "run"
    norm = canonical_norm(kw.get("norm", _default(attack.Options, "norm")))
    if (convention[0], norm) not in DEFAULT_EPS:
        raise RobustvitError(f"attack {attack.name!r}: no default ε for norm {norm!r}; give eps=… or use "
                             f"{' or '.join(NORMS)}")
    kw["eps"] = parse_eps(DEFAULT_EPS[(convention[0], norm)])
    return kw, f"default:{convention[1]}"


def _spec_type(tp: Any) -> Any:
    """``tp | None`` for an option a spec can give; None for Python-only ones (callables, mappings)."""
    if tp is Any or tp is dict or typing.get_origin(tp) is dict:
        return None
    if typing.get_origin(tp) in (Union, types.UnionType):
        core = [a for a in typing.get_args(tp) if a is not type(None)]
        if any(_spec_type(a) is None for a in core):
            return None
        return tp if type(None) in typing.get_args(tp) else tp | None
    return tp | None


def attack_suite_options(attack: type[Attack], base: type | None = None, drop: Iterable[str] = ()) -> type:
    """The options dataclass of the suite running ``attack``: ``base``'s (``save``, ``checks``, and
    ``check_queries`` when the black-box check applies) and each of the attack's options that a spec can give,
    as ``X | None`` = None — None meaning the run's option, the data's default or the attack's own; the help
    line is the attack's, with where its default comes from. ``seed`` is the suite's (per chunk)."""
    base = base or (BlackboxCheckOptions if "blackbox" in attack.masking_checks else ExampleOptions)
    hints = typing.get_type_hints(attack.Options)
    has_budget = budgeted(attack)
    skip = {"seed", *drop, *(() if attack.bounded else ("eps", "norm"))}
    fields = []
    for f in dataclasses.fields(attack.Options):
        tp = _spec_type(hints[f.name])
        if f.name in skip or tp is None:
            continue
        default = _default(attack.Options, f.name)
        run = f"--{f.name}, else " if f.name in RUN_OPTIONS and (has_budget or f.name == "steps") else ""
        if f.name == "eps" and has_budget:
            where = f"{run}the data's: 8/255 CIFAR-sized, 4/255 ImageNet; L2 0.5 / 3.0"
        else:
            where = run + ("" if default is None else str(default))
        text = f.metadata.get("help", "") + (f" (default: {where.removesuffix(', else ')})" if where else "")
        fields.append((f.name, tp, option(None, min=f.metadata.get("min"), max=f.metadata.get("max"), help=text)))
    return dataclasses.make_dataclass(f"{attack.__name__}SuiteOptions", fields, bases=(base,))


def chunk_seed(batch: Batch) -> int:
    """An attack seed drawn from the unit's generator: replayable, the same for every model of a run."""
    g = batch.generator
    return int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device).item())


def recheck_fp32(model: nn.Module, robust: torch.Tensor, x: torch.Tensor | None, x_adv: torch.Tensor,
                 y: torch.Tensor) -> torch.Tensor:
    """``robust`` re-checked in float32 when the model computes in lower precision (``--precision``): bfloat16
    rounding can mask the gradient, so a robust point stays robust only if the fp32 model also classifies its
    adversarial image (and its clean image ``x``, unless None) correctly."""
    if getattr(model, "precision", "fp32") == "fp32":
        return robust
    idx = robust.nonzero().squeeze(1)
    if not idx.numel():
        return robust
    with torch.no_grad(), inference_settings(model, precision="fp32"):
        ok = correct(model(x_adv[idx]), y[idx])
        if x is not None:
            ok &= correct(model(x[idx]), y[idx])
    out = robust.clone()
    out[idx] = ok
    return out


def attack_memory(model: nn.Module, atk: Attack, num_classes: int) -> AbstractContextManager:
    """Within the block the model's forward micro-batch (``--batch-size``) is divided by the attack's memory factor
    (batched restarts, FAB's per-class gradients), so an attack fits where a forward and backward pass does."""
    mb = getattr(model, "micro_batch", None)
    factor = atk.memory_factor(num_classes)
    if mb is None or factor <= 1:
        return nullcontext()
    return inference_settings(model, micro_batch=max(1, mb // factor))


def chunk_outcome(model: nn.Module, x: torch.Tensor, x_adv: torch.Tensor, y: torch.Tensor,
                  clean_logits: torch.Tensor, clean_too: bool = True) -> dict[str, int]:
    """A chunk's counts ``n``, ``clean``, ``robust`` (correct on ``x_adv``, and on ``x`` unless not ``clean_too``;
    :func:`recheck_fp32`) and ``nonfinite`` (NaN or infinite clean or adversarial logits)."""
    clean_ok = correct(clean_logits, y)
    with torch.no_grad():
        adv_logits = model(x_adv)
    adv_ok = correct(adv_logits, y)
    if clean_too:
        robust = recheck_fp32(model, clean_ok & adv_ok, x, x_adv, y)
    else:
        robust = recheck_fp32(model, adv_ok, None, x_adv, y)
    return {"n": int(y.numel()), "clean": int(clean_ok.sum()), "robust": int(robust.sum()),
            "nonfinite": int((nonfinite_rows(clean_logits) | nonfinite_rows(adv_logits)).sum())}


def save_examples(folder: Path, index: torch.Tensor, x: torch.Tensor, x_adv: torch.Tensor, scale: float) -> int:
    """Write ``<index>_clean.png``, ``_adv.png`` and ``_delta.png`` ((δ + scale) / 2·scale) per image."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    delta = ((x_adv - x) + scale) / (2 * scale)
    for i, img, adv, d in zip(index.tolist(), x, x_adv, delta):
        for tag, t in (("clean", img), ("adv", adv), ("delta", d)):
            arr = (t.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).cpu().numpy()
            Image.fromarray(arr).save(folder / f"{i:05d}_{tag}.png")
    return int(index.numel())


def as_saved(x_adv: torch.Tensor, dtype: str) -> torch.Tensor:
    """The examples as ``save=all`` writes them: float32, or uint8 round(x·255) (exactly what a PNG holds; divided
    by 255 it is the image a PNG of it loads as)."""
    x = x_adv.detach()
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8) if dtype == "uint8" else x.float()
    return x.cpu().contiguous()


class AttackSuite(Suite):
    """Runs the registered attack ``attack_name`` with its own options on the images it classifies correctly;
    a generated subclass per attack (:func:`attack_suite`), explicit ones where the protocol differs."""

    attack_name: ClassVar[str] = ""
    Options: ClassVar[type] = ExampleOptions
    #: Attack keywords the suite sets itself (not options).
    fixed: ClassVar[dict[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._convention: dict[tuple[str, int, int | None], tuple[str, str]] = {}
        if "save_dtype" in self.options and self.opts.save != "all":
            raise RobustvitError(f"suite {self.name!r}: save_dtype= applies to save=all (every example in one file); "
                                 "add save=all or drop save_dtype")
        norm, norms = self.options.get("norm"), ATTACKS.get(self.attack_name).norms
        if norm is not None and canonical_norm(norm) not in norms:
            raise RobustvitError(f"suite {self.name!r}: norm={norm!r} is not valid (expected one of {', '.join(norms)})")

    @property
    def attack_cls(self) -> type[Attack]:
        return ATTACKS.get(self.attack_name)

    @property
    def check_kinds(self) -> tuple[str, ...]:
        """The gradient-masking checks the suite runs: the attack's ``masking_checks``."""
        return self.attack_cls.masking_checks

    # ---- configuration ------------------------------------------------------------------------
    def resolved(self, ctx: EvalContext) -> tuple[dict[str, Any], str | None]:
        """The attack's keywords and the source of its ε (:func:`attack_kwargs`; the data's convention read once)."""
        key = (ctx.data_spec, id(ctx.dataset), ctx.image_size)
        if key not in self._convention:
            self._convention[key] = data_convention(ctx)
        return attack_kwargs(self.attack_cls, self.options, ctx.options, self._convention[key])

    def attack_for(self, ctx: EvalContext, model: nn.Module, seed: int, **override: Any) -> Attack:
        kw = {**self.resolved(ctx)[0], **override}
        if "n_target_classes" in option_names(self.attack_cls.Options):   # the targets the attack can use
            n = kw.get("n_target_classes", _default(self.attack_cls.Options, "n_target_classes"))
            kw["n_target_classes"] = max(1, min(int(n), ctx.num_classes - 1))
        return create_attack(self.attack_name, model, seed=seed, **kw, **self.fixed)

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["all", "checks"] if self.opts.checks != 0 and self.check_kinds else ["all"]

    # ---- one chunk ----------------------------------------------------------------------------
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        if part == "checks":
            return self.run_checks(ctx, batch)
        t0 = time.perf_counter()
        x, y = batch.x, batch.y
        with torch.no_grad():
            clean_logits = ctx.model(x)
        clean_ok = correct(clean_logits, y)
        atk = self.attack_for(ctx, ctx.model, chunk_seed(batch))
        aim = random_targets(y, ctx.num_classes, batch.generator) if atk.targeted else y
        x_adv = x.clone()
        idx = clean_ok.nonzero().squeeze(1)
        extra: dict[str, Any] = {}
        if idx.numel():
            with attack_memory(ctx.model, atk, ctx.num_classes):
                x_adv[idx] = atk(x[idx], aim[idx])
            extra = self.attack_stats(atk, int(idx.numel()))
        stats = {**chunk_outcome(ctx.model, x, x_adv, y, clean_logits), **extra,
                 "attack_seconds": time.perf_counter() - t0}
        stats["saved"] = self.maybe_save(ctx, batch, x, x_adv, clean_ok, aim)
        self.save_chunk(ctx, batch, x_adv)
        return stats

    def attack_stats(self, atk: Attack, n_attacked: int) -> dict[str, Any]:
        """Extra additive statistics from the attack object (e.g. AutoAttack's per-member counts)."""
        return {}

    def maybe_save(self, ctx: EvalContext, batch: Batch, x: torch.Tensor, x_adv: torch.Tensor,
                   clean_ok: torch.Tensor, aim: torch.Tensor | None = None) -> int:
        """Save the suite's first ``save`` images (files named by their data-set index); those misclassified
        before the attack (not attacked for the statistics) are attacked separately, for the picture only.
        ``aim``: the labels the attack was given (targets for a targeted attack; default the true labels)."""
        n_save = self.opts.save if isinstance(self.opts.save, int) else 0
        sel = (batch.index < n_save).to(x.device)
        if n_save <= 0 or ctx.out_dir is None or not bool(sel.any()):
            return 0
        atk = self.attack_for(ctx, ctx.model, chunk_seed(batch) + 1)
        aim = batch.y if aim is None else aim
        extra = (sel & ~clean_ok).nonzero().squeeze(1)
        x_adv = x_adv.clone()
        if extra.numel():
            x_adv[extra] = atk(x[extra], aim[extra])
        linf = getattr(atk, "bounded", False) and atk.norm == "linf" and atk.eps > 0
        scale = atk.eps if linf else max(float((x_adv[sel] - x[sel]).abs().max()), 1e-12)
        return save_examples(self.save_dir(ctx), batch.ids[sel.cpu()], x[sel], x_adv[sel], scale)

    def save_dir(self, ctx: EvalContext) -> Path:
        assert ctx.out_dir is not None
        return Path(ctx.out_dir) / "adversarial" / re.sub(r"[^A-Za-z0-9_.=+-]+", "_", self.key)

    def save_chunk(self, ctx: EvalContext, batch: Batch, x_adv: torch.Tensor) -> None:
        """``save=all``: the chunk's adversarial examples (the clean image where none was attacked) and their
        data-set indices, written atomically as the unit's own file, so that a resumed run keeps them."""
        if self.opts.save != "all" or ctx.out_dir is None:
            return
        from safetensors.torch import save

        tensors = {"x_adv": as_saved(x_adv, self.opts.save_dtype), "indices": batch.ids.long().cpu().contiguous()}
        write_bytes(self.save_dir(ctx) / "chunks" / f"{int(batch.index.min()):09d}.safetensors", save(tensors))

    def merge_chunks(self, ctx: EvalContext) -> dict[str, Any] | None:
        """``save=all``: every chunk's file merged, in data-set order, into ``x_adv.safetensors`` (tensors ``x_adv``
        (N, 3, H, W), float32 or uint8 by ``save_dtype``, and ``indices`` (N,)); what results.json records of it
        (None when nothing saved)."""
        if self.opts.save != "all" or ctx.out_dir is None:
            return None
        from safetensors.torch import load_file, save

        parts = [load_file(str(p)) for p in sorted((self.save_dir(ctx) / "chunks").glob("*.safetensors"))]
        if not parts:
            return None
        idx = torch.cat([p["indices"] for p in parts])
        order = idx.argsort()
        x_adv = torch.cat([p["x_adv"] for p in parts])[order].contiguous()
        path = self.save_dir(ctx) / "x_adv.safetensors"
        write_bytes(path, save({"x_adv": x_adv, "indices": idx[order].contiguous()}))
        return {"file": str(path.relative_to(ctx.out_dir)), "count": int(idx.numel()), "dtype": str(self.opts.save_dtype)}

    # ---- gradient-masking checks --------------------------------------------------------------
    def attack_checks(self, ctx: EvalContext) -> set[str]:
        """The checks that run attacks (``more_steps``, ``blackbox``) this suite's attack gets: none for a targeted
        attack, no ``blackbox`` without a bounded ε."""
        white = self.attack_for(ctx, ctx.model, 0)
        if white.targeted:
            return set()
        kinds = {"more_steps", "blackbox"} & set(self.check_kinds)
        if not (white.bounded and white.eps > 0):
            kinds.discard("blackbox")
        return kinds

    def check_period(self, ctx: EvalContext) -> int | None:
        """``checks=auto``: the attack-running checks run on one chunk in m, so that they cost at most a quarter of
        the attack, counted in passes over a batch (a small sample's time is set by the passes, not its images): the
        attack costs s·r per chunk (steps × restarts), a checked chunk s·r + 2·s·r (``more_steps``) + q (``blackbox``:
        q Square queries); m = ⌈4 × checks / attack⌉. None when the attack gets no such check."""
        kinds = self.attack_checks(ctx)
        if not kinds:
            return None
        white = self.attack_for(ctx, ctx.model, 0)
        cost = int(getattr(white.opts, "steps", 1) or 1) * int(getattr(white.opts, "restarts", 1) or 1)
        check = cost + 2 * cost * ("more_steps" in kinds) + self.opts.check_queries * ("blackbox" in kinds)
        return max(1, math.ceil(4 * check / cost))

    def check_plan(self, ctx: EvalContext, batch: Batch) -> tuple[bool, bool]:
        """(whether the chunk's attacked images are checked at all, whether the attack-running checks run on them).
        ``all``: every chunk, fully; ``N``: the chunks holding the first N images, fully; ``auto``: the model and
        zero-gradient checks on the first chunk, and every check on chunks m − 1, 2m − 1, … (:meth:`check_period`;
        none when the suite has fewer than m chunks)."""
        if self.opts.checks == "all":
            return True, True
        if isinstance(self.opts.checks, int):
            return int(batch.index.min()) < self.opts.checks, True
        m = self.check_period(ctx)
        full = m is not None and batch.chunks >= m and batch.chunk % m == m - 1
        return full or batch.chunk == 0, full

    def run_checks(self, ctx: EvalContext, batch: Batch) -> dict[str, Any]:
        """The checks on the chunk's attacked images (:meth:`check_plan`), as counts added over chunks; the model
        checks (randomised and softmax output) once, on the first chunk. The flags are made in :meth:`check_flags`."""
        t0 = time.perf_counter()
        checked, full = self.check_plan(ctx, batch)
        if not checked:
            return {"images": 0, "gradient_images": 0, "chunks": 0, "seconds": 0.0}
        with torch.no_grad():
            sel = correct(ctx.model(batch.x), batch.y)
        if isinstance(self.opts.checks, int):
            sel &= (batch.index < self.opts.checks).to(sel.device)
        xs, ys = batch.x[sel], batch.y[sel]
        out: dict[str, Any] = {"images": int(ys.numel()) if full else 0, "gradient_images": int(ys.numel()),
                               "chunks": int(full)}
        if batch.chunk == 0 and "model" in self.check_kinds:
            xm = xs if len(xs) else batch.x[:1]
            out["model"] = {"randomized": checks.check_randomized(ctx.model, xm),
                            "softmax_output": checks.check_softmax_output(ctx.model, xm)}
        if len(ys) and "model" in self.check_kinds:
            frac = checks.check_zero_gradients(ctx.model, xs, ys)["detail"]["fraction"]
            out["zero_gradients"] = int(round(frac * len(ys)))
        kinds = self.attack_checks(ctx) if full else set()
        if len(ys) and kinds:                                       # true labels only
            white = self.attack_for(ctx, ctx.model, 0)
            out["robust"] = self._robust_count(ctx.model, white, xs, ys)
            if "more_steps" in kinds:
                out["robust_more_steps"] = self._robust_count(
                    ctx.model, self.attack_for(ctx, ctx.model, 0, steps=2 * int(white.opts.steps)), xs, ys)
            if "blackbox" in kinds:
                square = create_attack("square", ctx.model, eps=white.eps, norm=white.norm, seed=0,
                                       n_queries=self.opts.check_queries)
                out["robust_square"] = self._robust_count(ctx.model, square, xs, ys)
        out["seconds"] = time.perf_counter() - t0
        return out

    def check_flags(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, checks.CheckResult]:
        """The flags from the checks' counts summed over chunks (``s``); the attack-running checks' only where they
        ran on some image."""
        flags: dict[str, checks.CheckResult] = dict(s.get("model", {}))
        if "model" in self.check_kinds:
            g = s.get("gradient_images", 0)
            flags["zero_gradients"] = checks.zero_gradients_result(s.get("zero_gradients", 0) / max(g, 1), images=g)
        n = s.get("images", 0)
        kinds = self.attack_checks(ctx)
        if not n or not kinds:
            return flags
        white = self.attack_for(ctx, ctx.model, 0)
        acc = s.get("robust", 0) / n
        if "more_steps" in kinds:
            steps = int(white.opts.steps)
            flags["more_steps"] = checks.more_steps_result(self.attack_name, (steps, 2 * steps),
                                                           (acc, s.get("robust_more_steps", 0) / n), images=n)
        if "blackbox" in kinds:
            flags["blackbox_stronger"] = checks.check_blackbox_stronger(
                {self.attack_name: acc, "square": s.get("robust_square", 0) / n})
            flags["blackbox_stronger"]["detail"]["images"] = n
        return flags

    def checks_cost(self, ctx: EvalContext, s: dict[str, Any], attack_seconds: float) -> dict[str, Any]:
        """What the checks cost beside the attack (results.json ``checks_cost``), and the checks ``auto`` left out."""
        mode = self.opts.checks if isinstance(self.opts.checks, str) else f"first {self.opts.checks}"
        seconds = s.get("seconds", 0.0)
        out = {"mode": mode, "images": s.get("images", 0), "gradient_images": s.get("gradient_images", 0),
               "chunks": s.get("chunks", 0), "seconds": round(seconds, 3), "attack_seconds": round(attack_seconds, 3),
               "fraction_of_attack": round(seconds / attack_seconds, 3) if attack_seconds > 0 else None}
        m = self.check_period(ctx) if self.opts.checks == "auto" else None
        if m is not None:
            out["every"] = m
            if not s.get("images", 0):
                names = sorted("blackbox_stronger" if k == "blackbox" else k for k in self.attack_checks(ctx))
                out["not_run"] = names
                out["why"] = (f"{', '.join(names)} run on one chunk in {m} to cost at most a quarter of the attack, "
                              f"and this suite has fewer chunks; checks=all runs them")
        return out

    @staticmethod
    def _robust_count(model: nn.Module, atk: Attack, x: torch.Tensor, y: torch.Tensor) -> int:
        """How many of ``x`` (all classified correctly) ``atk`` leaves classified correctly."""
        xa = atk(x, y)
        with torch.no_grad():
            return int(correct(model(xa), y).sum())

    # ---- result ---------------------------------------------------------------------------------
    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        """The attack's name, budget (``eps``, ``norm``, ``eps_source``, for budgeted attacks) and every other
        option as it applied (``atk.settings()``: defaults resolved)."""
        atk = self.attack_for(ctx, ctx.model, 0)
        out: dict[str, Any] = {"attack": atk.name}
        if budgeted(type(atk)):
            out.update(eps=atk.eps, norm=atk.norm, eps_source=self.resolved(ctx)[1])
        for k, v in atk.settings().items():
            if k not in ("eps", "norm", "seed", *self.fixed) and isinstance(v, (bool, int, float, str)):
                out[k] = v
        if atk.targeted:
            out["targets"] = "random"
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats.get("all", {})
        n, clean, robust = s.get("n", 0), s.get("clean", 0), s.get("robust", 0)
        res: dict[str, Any] = {**self.settings(ctx),
                               "accuracy": robust / max(n, 1), "clean_accuracy": clean / max(n, 1),
                               "attack_success_rate": (clean - robust) / max(clean, 1), "num_images": n}
        res.update(self.extra_results(ctx, s))
        res.update(nonfinite_result(self.key, s.get("nonfinite", 0)))
        res["flags"] = self.check_flags(ctx, stats["checks"]) if "checks" in stats else {}
        res["flags"].update(self.extra_flags(ctx, res))
        if "checks" in stats:
            res["checks_cost"] = self.checks_cost(ctx, stats["checks"], s.get("attack_seconds", 0.0))
        if s.get("saved"):
            res["saved"] = {"dir": str(self.save_dir(ctx).relative_to(ctx.out_dir)), "count": int(s["saved"])}
        merged = self.merge_chunks(ctx)
        if merged:
            res["saved"] = merged
        return res

    def extra_results(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, Any]:
        return {}

    def extra_flags(self, ctx: EvalContext, res: dict[str, Any]) -> dict[str, checks.CheckResult]:
        return {}


def random_targets(y: torch.Tensor, num_classes: int, gen: torch.Generator) -> torch.Tensor:
    """A uniformly drawn wrong class per image (the targets of a targeted attack), from the unit's generator."""
    shift = torch.randint(1, max(num_classes, 2), y.shape, generator=gen, device=gen.device).to(y.device)
    return (y + shift) % max(num_classes, 2)


def attack_suite(name: str) -> type[AttackSuite]:
    """The generic suite of the registered attack ``name``: its name, aliases and options, its docstring's first
    line as the description."""
    cls = ATTACKS.get(name)
    doc = (cls.__doc__ or cls.name).strip().splitlines()[0]
    demo = vars(cls).get("demo")           # the attack's own plan for the demo (not inherited)
    skip = "" if demo else (f"one attack on its own; the demo runs pgd, fgsm and autoattack "
                            f"(run `robustvit eval --suite {cls.name}`)")
    return type(f"{cls.__name__}AttackSuite", (AttackSuite,), {
        "name": cls.name, "attack_name": cls.name, "aliases": tuple(cls.aliases), "description": doc,
        "Options": attack_suite_options(cls), "smoke": {**cls.smoke, "checks": 0}, "demo": demo,
        "demo_skip": skip, "__module__": __name__, "__doc__": f"Robust accuracy under {doc}"})


def register_attack_suites() -> list[str]:
    """Register the generic suite of every registered attack that has no suite of that name yet (called when
    this module is imported; call it again after registering an attack later). Returns the names added."""
    added = [n for n in list_attacks() if n not in SUITES]
    for n in added:
        register_suite(attack_suite(n))
    return added


@register_suite
class APGDSuite(AttackSuite):
    name = "apgd"
    smoke = {"steps": 2, "checks": 0}
    demo_skip = "the demo's autoattack run includes APGD-CE and APGD-T"
    description = "APGD robust accuracy (Croce & Hein 2020); option attack=apgd_ce|apgd_dlr|apgd_t"

    @dataclass
    class Options(attack_suite_options(APGDT)):   # type: ignore[misc]
        attack: str = option("apgd_ce", help=f"{' | '.join(APGD_ATTACKS)} (hyphenated spellings accepted)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        name = ATTACKS.canonical(self.opts.attack)
        if name not in APGD_ATTACKS:
            raise RobustvitError(f"suite apgd: attack={self.opts.attack!r} is not valid; use one of "
                                 f"{', '.join(APGD_ATTACKS)}")
        self.opts.attack = name

    @property
    def attack_name(self) -> str:  # type: ignore[override]
        return str(self.opts.attack)


@dataclass
class CascadeState:
    """One chunk of an AutoAttack cascade after its members 0 … k: what member k + 1 starts from."""

    clean: torch.Tensor           # bool (n,): classified correctly by the suite's forward
    nonfinite: torch.Tensor       # bool (n,): NaN or infinite clean logits
    attacked: torch.Tensor        # long (m,): the chunk's positions given to the cascade (the clean-correct ones)
    robust: torch.Tensor          # bool (m,): still robust
    x_adv: torch.Tensor | None    # (m, 3, H, W): the examples so far, kept when the suite saves them
    ids: torch.Tensor | None = None   # long (n,): the chunk's image indices (a file read back must match them)

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"clean": self.clean, "nonfinite": self.nonfinite, "attacked": self.attacked, "robust": self.robust}
        if self.ids is not None:
            out["ids"] = self.ids
        out = {k: v.to(torch.uint8) if v.dtype == torch.bool else v for k, v in out.items()}
        if self.x_adv is not None:
            out["x_adv"] = self.x_adv
        return {k: v.detach().cpu().contiguous() for k, v in out.items()}

    @classmethod
    def of(cls, t: dict[str, torch.Tensor], device: torch.device) -> "CascadeState":
        b = {k: t[k].to(device).bool() for k in ("clean", "nonfinite", "robust")}
        x_adv = t.get("x_adv")
        return cls(b["clean"], b["nonfinite"], t["attacked"].to(device), b["robust"],
                   None if x_adv is None else x_adv.to(device), t.get("ids"))


@register_suite
class AutoAttackSuite(AttackSuite):
    """AutoAttack as one unit per (member, chunk): member k attacks the chunk's points still robust after members
    0 … k − 1, from the state the previous unit left (in memory and under ``OUT/adversarial/<key>/cascade/`` for a
    resumed run; replayed when missing), so a kill loses at most one member on one chunk. The outcome equals
    :class:`~robustvit.attacks.autoattack.AutoAttack` run in one go with the chunk's seed. ``individual=1`` adds
    one unit per member alone."""

    name = "autoattack"
    smoke = {"steps": 2, "n_queries": 3, "checks": 0}
    demo = (("autoattack:eps=4/255:limit=50:steps=20:n_queries=200:n_target_classes=3",),
            ("autoattack:eps=4/255:limit=20:steps=10:n_queries=100:n_target_classes=3",))
    description = "AutoAttack (Croce & Hein 2020): apgd_ce, apgd_t, fab_t, square; per-attack accuracy"
    attack_name = "autoattack"
    fixed = {"run_checks": False}   # the suite runs the checks itself

    @dataclass
    class Options(attack_suite_options(AutoAttack, drop=("run_checks",))):   # type: ignore[misc]
        attacks: list[str] | None = option(None, help="members joined by + (sets version=custom), e.g. "
                                                      "apgd_ce+square")
    # A reduced AutoAttack on a subset (the report says so): the full budget costs ~10 s per image on 2 CPU cores.

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._states: dict[int, tuple[int, CascadeState]] = {}   # chunk start → (member, state after it)

    def attack_for(self, ctx: EvalContext, model: nn.Module, seed: int) -> Attack:
        kw = self.resolved(ctx)[0]
        if self.opts.attacks:
            kw["version"] = "custom"
        return create_attack("autoattack", model, seed=seed, **kw, **self.fixed)

    # ---- units: one per (member, chunk), and per (member alone, chunk) with individual=1 ----------------------
    def members(self, ctx: EvalContext) -> list[str]:
        """The members that run on the data's classes, in cascade order (AutoAttack's own list)."""
        return [name for name, _ in self.attack_for(ctx, ctx.model, 0).schedule(ctx.num_classes)]  # type: ignore[attr-defined]

    def parts(self, ctx: EvalContext) -> list[str]:
        names = self.members(ctx)
        cascade = [f"{k}:{n}" for k, n in enumerate(names)] or ["0:none"]
        alone = [f"individual:{n}" for n in names] if self.opts.individual else []
        return cascade + alone + (["checks"] if self.opts.checks and self.check_kinds else [])

    def cascade_seed(self, ctx: EvalContext, batch: Batch) -> int:
        """The chunk's AutoAttack seed, the same for all its member units: from (run seed, suite key, chunk)."""
        return derive_seed(ctx.seed, self.key, "cascade", int(batch.index.min())) % (2**31 - 1)

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        if part == "checks":
            return super().run(ctx, part, batch)
        t0 = time.perf_counter()
        aa = self.attack_for(ctx, ctx.model, self.cascade_seed(ctx, batch))
        names = self.members(ctx)
        if part.startswith("individual:"):
            return self._alone(ctx, batch, aa, names.index(part.split(":", 1)[1]), t0)
        k = int(part.split(":", 1)[0]) if names else -1
        st = self.state(ctx, batch, aa, k)
        robust = torch.zeros_like(st.clean)
        robust[st.attacked] = st.robust
        out: dict[str, Any] = {"n": int(st.clean.numel()), "clean": int(st.clean.sum()),
                               "nonfinite": int(st.nonfinite.sum())}
        if k == len(names) - 1 or not names:    # the last member: the chunk's result
            self._states.pop(int(batch.index.min()), None)
            robust = recheck_fp32(ctx.model, robust, batch.x, batch.x, batch.y)   # robust points keep x_adv = x
            x_adv = batch.x.clone()
            if st.x_adv is not None:
                x_adv[st.attacked] = st.x_adv
            out["saved"] = self.maybe_save(ctx, batch, batch.x, x_adv, st.clean)
            self.save_chunk(ctx, batch, x_adv)
        out["robust"] = int(robust.sum())
        out["seconds"] = time.perf_counter() - t0
        return out

    def keeps_examples(self, batch: Batch) -> bool:
        """Whether the chunk's examples are kept between members: ``save=all``, or ``save=N`` reaching it."""
        save = self.opts.save
        return save == "all" or (isinstance(save, int) and int(batch.index.min()) < save)

    def state(self, ctx: EvalContext, batch: Batch, aa: Attack, k: int) -> CascadeState:
        """The chunk's cascade after member ``k`` (−1: before any): from memory, else from the unit's file, else
        computed from the state after member k − 1 (and stored in both)."""
        start = int(batch.index.min())
        held = self._states.get(start)
        if held is not None and held[0] == k:
            return held[1]
        if k < 0:
            with torch.no_grad():
                logits = ctx.model(batch.x)
            clean = correct(logits, batch.y)
            attacked = clean.nonzero().squeeze(1)
            xs = batch.x[attacked]
            robust = aa.correct_mask(xs, batch.y[attacked])   # type: ignore[attr-defined]
            return CascadeState(clean, nonfinite_rows(logits), attacked, robust,
                                xs.clone() if self.keeps_examples(batch) else None, batch.ids.long().cpu())
        path = self.cascade_file(ctx, start, k)
        st = self.read_state(path, batch)
        if st is None:
            prev = self.state(ctx, batch, aa, k - 1)
            xs, ys = batch.x[prev.attacked], batch.y[prev.attacked]
            x_adv = prev.x_adv.clone() if prev.x_adv is not None else xs.clone()
            robust = self._run_member(ctx, aa, k, xs, ys, prev.robust, x_adv)[1]
            st = dataclasses.replace(prev, robust=robust, x_adv=x_adv if prev.x_adv is not None else None)
            if path is not None:
                from safetensors.torch import save

                write_bytes(path, save(st.tensors()), durable=False)
        self._states[start] = (k, st)
        return st

    @staticmethod
    def _run_member(ctx: EvalContext, aa: Attack, k: int, x: torch.Tensor, y: torch.Tensor, robust: torch.Tensor,
                    x_adv: torch.Tensor) -> tuple[str, torch.Tensor]:
        """Member ``k``'s name and the points of ``x`` still robust after it (``x_adv`` updated in place)."""
        name, member = aa.schedule(ctx.num_classes)[k]   # type: ignore[attr-defined]
        atk = aa.member_attack(member, ctx.num_classes)  # type: ignore[attr-defined]
        with attack_memory(ctx.model, atk, ctx.num_classes):
            return name, aa.run_member(atk, x, y, robust, x_adv)   # type: ignore[attr-defined]

    @staticmethod
    def read_state(path: Path | None, batch: Batch) -> CascadeState | None:
        """The state a unit left in ``path``, when it holds this chunk's images (else None)."""
        if path is None or not path.is_file():
            return None
        from safetensors.torch import load_file

        st = CascadeState.of(load_file(str(path)), batch.x.device)
        return st if st.ids is not None and torch.equal(st.ids, batch.ids.long().cpu()) else None

    def cascade_file(self, ctx: EvalContext, start: int, k: int) -> Path | None:
        """Where the chunk's state after member ``k`` is kept for a resumed run (None: no output folder)."""
        return None if ctx.out_dir is None else self.save_dir(ctx) / "cascade" / f"{start:09d}-{k}.safetensors"

    def _alone(self, ctx: EvalContext, batch: Batch, aa: Attack, k: int, t0: float) -> dict[str, Any]:
        """``individual``: member ``k`` alone on every point the cascade starts from (same seed)."""
        base = self.state(ctx, batch, aa, -1)
        xs = batch.x[base.attacked]
        name, robust = self._run_member(ctx, aa, k, xs, batch.y[base.attacked], base.robust, xs.clone())
        return {"individual": {name: int(robust.sum())}, "seconds_individual": time.perf_counter() - t0}

    # ---- result ---------------------------------------------------------------------------------
    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        out = super().settings(ctx)
        atk = self.attack_for(ctx, ctx.model, 0)
        out["attacks"] = atk.member_names()   # type: ignore[attr-defined]
        overrides = dict(atk.overrides)   # type: ignore[attr-defined]
        out["reduced"] = bool(overrides) and out.get("version") != "custom"
        if overrides:
            out["overrides"] = overrides
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The member units summed into the cascade's statistics (``per_attack``: robust after each member)."""
        cascade = [p for p in stats if p[:1].isdigit()]
        cascade.sort(key=lambda p: int(p.split(":", 1)[0]))
        first, last = (stats[cascade[0]], stats[cascade[-1]]) if cascade else ({}, {})
        s = {k: first.get(k, 0) for k in ("n", "clean", "nonfinite")}
        s.update(robust=last.get("robust", 0), saved=last.get("saved", 0),
                 attack_seconds=sum(stats[p].get("seconds", 0.0) for p in cascade),
                 per_attack={p.split(":", 1)[1]: stats[p].get("robust", 0) for p in cascade if not p.endswith(":none")},
                 member_seconds={p.split(":", 1)[1]: round(stats[p].get("seconds", 0.0), 3) for p in cascade})
        alone = [p for p in stats if p.startswith("individual:")]
        if alone:
            s["individual"] = {p.split(":", 1)[1]: stats[p]["individual"][p.split(":", 1)[1]] for p in alone}
        res = super().finalize(ctx, {"all": s, **({"checks": stats["checks"]} if "checks" in stats else {})})
        skipped: dict[str, str] = {}
        self.attack_for(ctx, ctx.model, 0).schedule(ctx.num_classes, skipped)   # type: ignore[attr-defined]
        if skipped:
            res["skipped_members"] = skipped
        if ctx.out_dir is not None:   # every unit is stored: the states kept for a resume are not needed any more
            shutil.rmtree(self.save_dir(ctx) / "cascade", ignore_errors=True)
        return res

    def extra_results(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, Any]:
        n = max(s.get("n", 0), 1)
        out = {"per_attack": {k: v / n for k, v in s.get("per_attack", {}).items()},
               "clean_misclassified": s.get("n", 0) - s.get("clean", 0), "member_seconds": s.get("member_seconds", {})}
        if "individual" in s:   # each member alone on every clean-correct point, beside the cascade
            out["individual"] = {k: v / n for k, v in s["individual"].items()}
        return out

    def extra_flags(self, ctx: EvalContext, res: dict[str, Any]) -> dict[str, checks.CheckResult]:
        return {"blackbox_stronger": checks.check_blackbox_stronger(res["per_attack"]),
                "n_classes": checks.check_n_classes(ctx.num_classes, int(res.get("n_target_classes", 9)))}


@register_suite
class SpatialSuite(AttackSuite):
    name = "spatial"
    smoke = {"translations": 2, "rotations": 2, "checks": 0}
    demo = ("spatial:limit=200:translations=5:rotations=7:save=8",), ("spatial:limit=100:translations=3:rotations=5",)
    description = "worst case over 9 × 9 translations (the papers' range at the image size) × 31 rotations (±30°)"
    attack_name = "spatial"
    Options = attack_suite_options(Spatial)

    def attack_stats(self, atk: Attack, n_attacked: int) -> dict[str, Any]:
        st = atk.last_stats   # type: ignore[attr-defined]
        return {"evaluated": st.get("evaluated", 0.0), "search_seconds": st.get("seconds", 0.0)}

    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        out = super().settings(ctx)
        atk = self.attack_for(ctx, ctx.model, 0)
        size = ctx.image_size or 224
        out["max_translation"] = float(atk.grid(size, size)[:, 0].abs().max())   # type: ignore[attr-defined]
        out["translation_convention"] = ("option" if self.options.get("max_translation") is not None
                                         else translation_convention(size, size)[0])
        out["transforms"] = atk.num_transforms   # type: ignore[attr-defined]
        out["grid"] = f"{atk.translations}x{atk.translations}x{atk.rotations}"   # type: ignore[attr-defined]
        out["reduced_grid"] = out["transforms"] < 9 * 9 * 31
        return out

    def extra_results(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, Any]:
        return {"transforms_evaluated": int(s.get("evaluated", 0)),
                "transforms_per_s": s.get("evaluated", 0) / max(s.get("search_seconds", 0.0), 1e-9)}


@register_suite
class PatchFoolSuite(AttackSuite):
    name = "patch_fool"
    smoke = {"steps": 2, "checks": 0}
    requires_probe = True
    demo = ("patch_fool:limit=100:steps=50:save=8",), ("patch_fool:limit=50:steps=20",)
    description = "Patch-Fool (Fu et al. 2022): one attention-chosen patch replaced and optimised; ViTs only"
    attack_name = "patch_fool"
    Options = attack_suite_options(PatchFool)

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        """``scoring=final`` (default) scores the final iterate on every image, as the reference; ``best``
        keeps any fooling iterate and counts misclassified images as broken (RobustBench's convention)."""
        if part == "checks" or self.options.get("scoring") == "best":
            return super().run(ctx, part, batch)
        x, y = batch.x, batch.y
        with torch.no_grad():
            clean_logits = ctx.model(x)
        with inference_settings(ctx.model, micro_batch=None):     # the attack's probe hooks read whole batches
            x_adv = self.attack_for(ctx, ctx.model, chunk_seed(batch))(x, y)
        out = chunk_outcome(ctx.model, x, x_adv, y, clean_logits, clean_too=False)
        self.save_chunk(ctx, batch, x_adv)
        return {**out, "saved": self.maybe_save(ctx, batch, x, x_adv, torch.ones_like(y, dtype=torch.bool))}

    def parts(self, ctx: EvalContext) -> list[str]:
        return super().parts(ctx) if is_probeable(ctx.model) else []

    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        out = super().settings(ctx)
        out["eps"] = self.options.get("eps")
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        if not is_probeable(ctx.model):
            return {"skipped": f"Patch-Fool needs a ViT's attention maps; {ctx.model_name} is not a supported ViT",
                    "accuracy": None, "clean_accuracy": None}
        return super().finalize(ctx, stats)


@register_suite
class TransferSuite(AttackSuite):
    """Examples crafted on every model of the run (``--model A,B,…``) and on the extra sources of ``sources=``
    (checkpoint folders, or names with ``source_pretrained=1`` / ``source_weights=FILE``; random weights only with
    ``allow_random=1``), evaluated on the model under test: its column of the source → target accuracy matrix
    (Bhojanapalli et al. Tables 4–5; ``robustvit report`` assembles it). A source's examples are the same for every
    target (same seeds) and cached across targets (up to ``cache_gb``). ``sources`` and ``random_sources`` in the
    result record the weights (:mod:`robustvit.protocols` labels the matrix from them)."""

    name = "transfer"
    smoke = {"steps": 1, "checks": 0}
    demo_skip = "the demo evaluates its models one at a time; run `robustvit eval --model A,B --suite transfer`"
    description = "transfer matrix: adversarial examples crafted on each model of the run, evaluated on this one"
    #: The options passed to the crafting attack (when given; the others are the suite's).
    attack_keys: ClassVar[tuple[str, ...]] = ("eps", "norm", "steps", "step_size", "restarts", "random_start")
    across_models = True

    @dataclass
    class Options(SuiteOptions):
        eps: Eps | None = option(None, min=0, help="budget (default: --eps, else the data's: 8/255 CIFAR-sized, "
                                                   "4/255 ImageNet; L2 0.5 / 3.0)")
        norm: Literal[NORMS] | None = option(None, help="threat model (default: --norm, else the attack's)")
        attack: str = option("pgd", help="the attack crafting the examples on each source (`robustvit list attacks`)")
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else the attack's)")
        step_size: Eps | None = option(None, min=0, help="step (default the attack's rule)")
        restarts: int | None = option(None, min=1, help="restarts (default 1)")
        random_start: bool | None = option(None, help="random start (default the attack's)")
        cache_gb: float = option(2.0, min=0, help="memory for examples kept across targets")
        sources: list[str] = option(default_factory=list, help="extra source models joined by +: checkpoint "
                                                               "folders or model names")
        source_pretrained: bool = option(False, help="build named sources with published weights")
        source_weights: str | None = option(None, help="a state-dict file for the one named source")
        allow_random: bool = option(False, help="accept named sources with random weights")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        ATTACKS.get(self.opts.attack)      # an unknown attack fails now, with close matches
        self.opts.attack = ATTACKS.canonical(self.opts.attack)
        taken = set(option_names(self.attack_cls.Options))
        extra = [k for k in self.options if k in self.attack_keys and k not in taken]
        if extra:
            raise RobustvitError(f"suite transfer: attack {self.opts.attack!r} takes no option {extra[0]!r}; "
                                 f"its options: {', '.join(sorted(taken - {'seed'}))}")
        self._cache: dict[tuple[str, int, int], torch.Tensor] = {}
        self._cache_bytes = 0
        self._extra: dict[str, nn.Module] | None = None

    @property
    def attack_name(self) -> str:  # type: ignore[override]
        return str(self.opts.attack)

    def extra_sources(self, ctx: EvalContext) -> dict[str, nn.Module]:
        """The models named by ``sources=``, built once (on the run's device) with ``build_named_model``."""
        if self._extra is None:
            names = [n.strip() for n in self.opts.sources if n.strip()]
            weights = self.opts.source_weights
            if weights is not None and len(names) != 1:
                raise RobustvitError("transfer: source_weights=FILE applies to one source; give exactly one in sources=")
            extra: dict[str, nn.Module] = {}
            for n in names:
                if n in ctx.models or n in extra:
                    raise RobustvitError(f"transfer: source {n!r} is listed twice (models of the run are sources already)")
                m = build_named_model(n, pretrained=self.opts.source_pretrained, weights=weights,
                                      allow_random=self.opts.allow_random,
                                      role="transfer source", option_prefix="source_")
                extra[n] = m.to(ctx.device).eval()
            self._extra = extra
        size = getattr(ctx.spec, "input_size", None)
        for n, m in self._extra.items():   # a patch-based source is built for one resolution; a CNN takes any
            if size is not None and m.spec.patch_size is not None and tuple(m.spec.input_size[1:]) != tuple(size[1:]):
                raise RobustvitError(f"transfer source {n} takes {m.spec.image_size}px images but {ctx.model_name} is "
                                     f"evaluated on {size[-1]}px; every source must see the target's images")
        return self._extra

    def sources(self, ctx: EvalContext) -> dict[str, nn.Module]:
        return {**ctx.models, **self.extra_sources(ctx)}

    def parts(self, ctx: EvalContext) -> list[str]:
        return list(self.sources(ctx))

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        x, y = batch.x, batch.y
        key = (part, int(batch.index[0]), int(batch.index.numel()))
        x_adv = self._cache.get(key)
        if x_adv is None:
            source = self.sources(ctx)[part]
            x_adv = self.attack_for(ctx, source, chunk_seed(batch))(x, y)
            limit = self.opts.cache_gb * 2**30
            if self._cache_bytes + x_adv.numel() * x_adv.element_size() <= limit:
                self._cache[key] = x_adv.cpu()
                self._cache_bytes += x_adv.numel() * x_adv.element_size()
        with torch.no_grad():
            clean_logits = ctx.model(x)
        return chunk_outcome(ctx.model, x, x_adv.to(x.device), y, clean_logits)

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        kw = self.resolved(ctx)[0]
        column = {src: s.get("robust", 0) / max(s.get("n", 0), 1) for src, s in stats.items()}
        first = next(iter(stats.values()), {})
        clean = first.get("clean", 0) / max(first.get("n", 0), 1)
        settings = {k: v for k, v in kw.items() if isinstance(v, (bool, int, float, str))}
        models = self.sources(ctx)
        provenance = {src: dict(getattr(models.get(src), "weights", None) or {"source": "unknown"}) for src in column}
        random = [src for src in column if src in models and has_random_weights(models[src])]
        if has_random_weights(ctx.model) and ctx.model_name not in random:
            random.append(ctx.model_name)
        return {"attack": self.attack_name, **settings, "target": ctx.model_name, "accuracy": column,
                "matrix": {src: {ctx.model_name: acc} for src, acc in column.items()},
                "clean_accuracy": clean, "num_images": first.get("n", 0), "sources": provenance,
                "random_sources": random, "flags": {},
                **nonfinite_result(self.key, max((s.get("nonfinite", 0) for s in stats.values()), default=0))}


register_attack_suites()
SUITES.on_miss(register_attack_suites)
