"""Adversarial evaluation suites: ``fgsm``, ``pgd``, ``apgd``, ``autoattack``, ``spatial``, ``patch_fool``
and ``transfer`` (the settings of Bhojanapalli et al. 2021, arXiv:2103.14586, and Croce & Hein 2020,
arXiv:2003.01690).

Defaults: L∞, ε by the data set's convention (RobustBench): 8/255 on CIFAR-10/100, 4/255 otherwise (ImageNet);
in L2 0.5 and 3.0. PGD 10 steps of ε/4. ``robustvit eval --eps/--norm/--steps`` set them for every attack suite
of the run; a suite option (``pgd:eps=1/255:steps=20``) overrides them; ``eps_source`` in the result says which
applied (``option``, ``run``, ``default:cifar``, ``default:imagenet``). Robust accuracy is the
RobustBench convention (:func:`robustvit.metrics.accuracy.robust_correct`): an image counts as robust when it is
classified correctly before *and* after the attack, so ``accuracy <= clean_accuracy`` always; only correctly
classified images are attacked; an image with NaN or infinite logits is never correct nor robust
(``num_nonfinite`` in the result when there were such images). Each chunk's
attack is seeded from (run seed, suite key, chunk), so results replay exactly and every model of a run sees
the same random starts.

Every result holds ``eps``, ``norm``, ``accuracy`` (robust), ``clean_accuracy``, ``attack_success_rate``, the
attack's settings (``steps``, ``step_size``, ``restarts``, ``version``, …), ``num_images`` and ``flags``: the
gradient-masking checks of :mod:`robustvit.attacks.checks`, run once on the first ``checks`` (32) images —
randomised output, softmax output, zero gradients, robust accuracy rising with more steps (``pgd``/``apgd``:
steps vs 2 × steps, same seed) and a black-box attack (Square, ``check_queries`` = 100 queries) beating the white-box
one (``pgd``/``apgd``). ``save=N`` writes the first N clean images, adversarial examples and perturbations (δ rescaled to [0, 1]
by (δ + ε) / 2ε) as PNGs under ``OUT/adversarial/<suite key>/``. Each suite's options are its ``Options``
dataclass (``robustvit list suites --options``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from robustvit.attacks import checks, create_attack
from robustvit.attacks.autoattack import VERSION_NAMES
from robustvit.attacks.base import ATTACKS, NORMS, Attack
from robustvit.attacks.spatial import translation_convention
from robustvit.errors import RobustvitError
from robustvit.evaluate.suites.base import (Batch, EvalContext, Suite, SuiteOptions, nonfinite_result,
                                            register_suite)
from robustvit.metrics.accuracy import correct, nonfinite_rows, robust_accuracy
from robustvit.models.factory import build_named_model, is_comparable
from robustvit.models.wrapper import inference_settings
from robustvit.models.probe import is_probeable
from robustvit.options import Eps, option
from robustvit.utils import parse_eps

#: Default budgets by data-set convention (RobustBench: CIFAR-10/100 L∞ 8/255, L2 0.5; ImageNet L∞ 4/255).
DEFAULT_EPS = {("cifar", "linf"): "8/255", ("cifar", "l2"): "0.5", ("imagenet", "linf"): "4/255", ("imagenet", "l2"): "3.0"}
#: Attack attributes reported as settings (attribute → result key).
SETTINGS = {"steps": "steps", "step_size": "step_size", "restarts": "restarts", "use_random_start": "random_start",
            "version": "version", "n_queries": "n_queries", "n_target_classes": "n_target_classes",
            "translations": "translations", "rotations": "rotations", "max_translation": "max_translation",
            "max_rotation": "max_rotation", "num_patches": "num_patches", "attn_weight": "attn_weight",
            "attn_block": "attn_block", "selection": "selection", "p_init": "p_init", "scoring": "scoring"}
#: The attacks the ``apgd`` suite runs.
APGD_ATTACKS = ("apgd_ce", "apgd_dlr", "apgd_t")


@dataclass
class ExampleOptions(SuiteOptions):
    """Options of every attack suite: saved examples and gradient-masking checks."""

    save: int = option(0, min=0, help="write the first N clean / adversarial / perturbation images as PNGs")
    checks: int = option(32, min=0, help="gradient-masking checks on the first N images (0: none)")


@dataclass
class BudgetOptions(ExampleOptions):
    """Options of the ε-bounded attack suites (``eps``/``norm`` default to the run's ``--eps``/``--norm``)."""

    eps: Eps | None = option(None, min=0, help="budget (default: --eps, else 8/255 on CIFAR, 4/255 on ImageNet; "
                                               "L2: 0.5 / 3.0)")
    norm: Literal[NORMS] | None = option(None, help="threat model (default: --norm, else linf)")
    check_queries: int = option(100, min=1, help="queries of the black-box (Square) check")


def chunk_seed(batch: Batch) -> int:
    """An attack seed drawn from the unit's generator: replayable, the same for every model of a run."""
    g = batch.generator
    return int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device).item())


def recheck_fp32(model: nn.Module, robust: torch.Tensor, x: torch.Tensor | None, x_adv: torch.Tensor,
                 y: torch.Tensor) -> torch.Tensor:
    """``robust`` re-checked in float32 when the model computes in lower precision (``--precision``): an attack
    run in bf16 can fail where bfloat16 rounding masks the gradient, so a point counts as robust only if the fp32
    model also classifies its adversarial image (and its clean image ``x``, unless None) correctly. Only the robust
    points are re-run."""
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


@contextmanager
def attack_memory(model: nn.Module, atk: Attack, num_classes: int) -> Iterator[None]:
    """Within the block the model's forward micro-batch (``--batch-size``) is divided by the attack's memory factor
    (batched restarts, FAB's per-class gradients), so an attack fits where a forward and backward pass does."""
    mb = getattr(model, "micro_batch", None)
    factor = atk.memory_factor(num_classes)
    if mb is None or factor <= 1:
        yield
        return
    with inference_settings(model, micro_batch=max(1, mb // factor)):
        yield


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


class AttackSuite(Suite):
    """Shared machinery: option handling, the attack per chunk, robust accuracy, checks and saving."""

    attack_name: ClassVar[str] = ""
    attack_options: ClassVar[tuple[str, ...]] = ()
    #: Which gradient-masking checks the suite runs (subset of model/more_steps/blackbox).
    check_kinds: ClassVar[tuple[str, ...]] = ("model", "blackbox")
    bounded: ClassVar[bool] = True

    # ---- configuration ------------------------------------------------------------------------
    def eps_and_source(self, ctx: EvalContext, norm: str) -> tuple[Any, str]:
        """The budget and where it comes from: the suite option, the run's ``--eps``, or the data set's default."""
        if self.options.get("eps") is not None:
            return self.options["eps"], "option"
        if ctx.options.get("eps") is not None:
            return self.option(ctx, "eps"), "run"
        return parse_eps(DEFAULT_EPS[(ctx.convention, norm)]), f"default:{ctx.convention}"

    def attack_kwargs(self, ctx: EvalContext) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.bounded:
            kw["norm"] = str(self.option(ctx, "norm", "linf"))
            kw["eps"] = self.eps_and_source(ctx, kw["norm"])[0]
        for k in self.attack_options:
            v = self.option(ctx, k)
            if v is not None:
                kw[k] = v
        return kw

    def attack_for(self, ctx: EvalContext, model: nn.Module, seed: int) -> Attack:
        return create_attack(self.attack_name, model, seed=seed, **self.attack_kwargs(ctx))

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["all", "checks"] if self.opts.checks > 0 else ["all"]

    # ---- one chunk ----------------------------------------------------------------------------
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        if part == "checks":
            return self.run_checks(ctx, batch) if int(batch.index.min()) == 0 else {}
        x, y = batch.x, batch.y
        with torch.no_grad():
            clean_logits = ctx.model(x)
        clean_ok = correct(clean_logits, y)
        atk = self.attack_for(ctx, ctx.model, chunk_seed(batch))
        stats: dict[str, Any] = {"n": int(y.numel()), "clean": int(clean_ok.sum())}
        x_adv = x.clone()
        idx = clean_ok.nonzero().squeeze(1)
        if idx.numel():
            with attack_memory(ctx.model, atk, ctx.num_classes):
                x_adv[idx] = atk(x[idx], y[idx])
            stats.update(self.attack_stats(atk, int(idx.numel())))
        with torch.no_grad():
            adv_logits = ctx.model(x_adv)
        robust = recheck_fp32(ctx.model, clean_ok & correct(adv_logits, y), x, x_adv, y)
        stats["robust"] = int(robust.sum())
        stats["nonfinite"] = int((nonfinite_rows(clean_logits) | nonfinite_rows(adv_logits)).sum())
        stats["saved"] = self.maybe_save(ctx, batch, x, x_adv, clean_ok)
        return stats

    def attack_stats(self, atk: Attack, n_attacked: int) -> dict[str, Any]:
        """Extra additive statistics from the attack object (e.g. AutoAttack's per-member counts)."""
        return {}

    def maybe_save(self, ctx: EvalContext, batch: Batch, x: torch.Tensor, x_adv: torch.Tensor,
                   clean_ok: torch.Tensor) -> int:
        """Save the suite's first ``save`` images (files named by their data-set index); those misclassified
        before the attack (not attacked for the statistics) are attacked separately, for the picture only."""
        n_save = self.opts.save
        sel = (batch.index < n_save).to(x.device)
        if n_save <= 0 or ctx.out_dir is None or not bool(sel.any()):
            return 0
        atk = self.attack_for(ctx, ctx.model, chunk_seed(batch) + 1)
        extra = (sel & ~clean_ok).nonzero().squeeze(1)
        x_adv = x_adv.clone()
        if extra.numel():
            x_adv[extra] = atk(x[extra], batch.y[extra])
        linf = getattr(atk, "bounded", False) and atk.norm == "linf" and atk.eps > 0
        scale = atk.eps if linf else max(float((x_adv[sel] - x[sel]).abs().max()), 1e-12)
        return save_examples(self.save_dir(ctx), batch.ids[sel.cpu()], x[sel], x_adv[sel], scale)

    def save_dir(self, ctx: EvalContext) -> Path:
        assert ctx.out_dir is not None
        return Path(ctx.out_dir) / "adversarial" / re.sub(r"[^A-Za-z0-9_.=+-]+", "_", self.key)

    # ---- gradient-masking checks (first chunk only) -------------------------------------------
    def run_checks(self, ctx: EvalContext, batch: Batch) -> dict[str, Any]:
        n = self.opts.checks
        xs, ys = batch.x[:n], batch.y[:n]
        flags: dict[str, checks.CheckResult] = {}
        if "model" in self.check_kinds:
            flags["randomized"] = checks.check_randomized(ctx.model, xs)
            flags["softmax_output"] = checks.check_softmax_output(ctx.model, xs)
            flags["zero_gradients"] = checks.check_zero_gradients(ctx.model, xs, ys)
        kw = self.attack_kwargs(ctx)
        if "more_steps" in self.check_kinds:
            steps = int(self.attack_for(ctx, ctx.model, 0).steps)
            kw_steps = {k: v for k, v in kw.items() if k != "steps"}
            flags["more_steps"] = checks.check_more_steps(ctx.model, xs, ys, attack=self.attack_name,
                                                          steps=(steps, 2 * steps), seed=0, **kw_steps)
        if "blackbox" in self.check_kinds and kw.get("eps", 0) > 0:
            white = self._robust_accuracy(ctx.model, self.attack_for(ctx, ctx.model, 0), xs, ys)
            square = create_attack("square", ctx.model, eps=kw["eps"], norm=kw["norm"], seed=0,
                                   n_queries=self.opts.check_queries)
            black = self._robust_accuracy(ctx.model, square, xs, ys)
            flags["blackbox_stronger"] = checks.check_blackbox_stronger({self.attack_name: white, "square": black})
        return {"flags": flags}

    @staticmethod
    def _robust_accuracy(model: nn.Module, atk: Attack, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            clean_logits = model(x)
        xa = atk(x, y)
        with torch.no_grad():
            return robust_accuracy(clean_logits, model(xa), y)

    # ---- result ---------------------------------------------------------------------------------
    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        atk = self.attack_for(ctx, ctx.model, 0)
        out: dict[str, Any] = {"attack": atk.name}
        if self.bounded:
            out.update(eps=atk.eps, norm=atk.norm, eps_source=self.eps_and_source(ctx, atk.norm)[1])
        for attr, key in SETTINGS.items():
            v = getattr(atk, attr, None)
            if isinstance(v, (bool, int, float, str)):
                out[key] = v
        return out

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats.get("all", {})
        n, clean, robust = s.get("n", 0), s.get("clean", 0), s.get("robust", 0)
        res: dict[str, Any] = {**self.settings(ctx),
                               "accuracy": robust / max(n, 1), "clean_accuracy": clean / max(n, 1),
                               "attack_success_rate": (clean - robust) / max(clean, 1), "num_images": n}
        res.update(self.extra_results(ctx, s))
        res.update(nonfinite_result(self.key, s.get("nonfinite", 0)))
        res["flags"] = dict(stats.get("checks", {}).get("flags", {}))
        res["flags"].update(self.extra_flags(ctx, res))
        if s.get("saved"):
            res["saved"] = {"dir": str(self.save_dir(ctx).relative_to(ctx.out_dir)), "count": int(s["saved"])}
        return res

    def extra_results(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, Any]:
        return {}

    def extra_flags(self, ctx: EvalContext, res: dict[str, Any]) -> dict[str, checks.CheckResult]:
        return {}


@register_suite
class FGSMSuite(AttackSuite):
    name = "fgsm"
    description = "FGSM robust accuracy (Goodfellow et al. 2015; Bhojanapalli et al. 2021)"
    attack_name = "fgsm"
    attack_options = ("step_size", "random_start")

    @dataclass
    class Options(BudgetOptions):
        step_size: Eps | None = option(None, min=0, help="step (default ε; with random_start the attack's rule)")
        random_start: bool | None = option(None, help="start from a random point of the ε-ball (FGSM-RS)")
    check_kinds = ("model",)


@register_suite
class PGDSuite(AttackSuite):
    name = "pgd"
    description = "PGD robust accuracy (Madry et al. 2018); default 10 steps of ε/4"
    attack_name = "pgd"
    attack_options = ("steps", "step_size", "restarts", "random_start")

    @dataclass
    class Options(BudgetOptions):
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else 10)")
        step_size: Eps | None = option(None, min=0, help="step (default 2.5·ε/steps)")
        restarts: int | None = option(None, min=1, help="random restarts (default 1)")
        random_start: bool | None = option(None, help="start from a random point of the ε-ball (default true)")
    check_kinds = ("model", "more_steps", "blackbox")

    def attack_kwargs(self, ctx: EvalContext) -> dict[str, Any]:
        kw = super().attack_kwargs(ctx)
        kw.setdefault("steps", 10)   # the attack's step rule applies: 2.5·ε/steps (ε/4 for 10 steps)
        return kw


@register_suite
class APGDSuite(AttackSuite):
    name = "apgd"
    description = "APGD robust accuracy (Croce & Hein 2020); option attack=apgd_ce|apgd_dlr|apgd_t"
    attack_options = ("steps", "restarts", "n_target_classes")
    check_kinds = ("model", "more_steps", "blackbox")

    @dataclass
    class Options(BudgetOptions):
        attack: str = option("apgd_ce", help=f"{' | '.join(APGD_ATTACKS)} (hyphenated spellings accepted)")
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else 100)")
        restarts: int | None = option(None, min=1, help="restarts (default 1)")
        n_target_classes: int | None = option(None, min=1, help="apgd_t: target classes (default 9, capped at "
                                                                "classes − 1)")

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

    def attack_for(self, ctx: EvalContext, model: nn.Module, seed: int) -> Attack:
        kw = self.attack_kwargs(ctx)
        if self.attack_name != "apgd_t":
            kw.pop("n_target_classes", None)
        else:
            kw["n_target_classes"] = max(1, min(kw.get("n_target_classes", 9), ctx.num_classes - 1))
        return create_attack(self.attack_name, model, seed=seed, **kw)


@register_suite
class AutoAttackSuite(AttackSuite):
    name = "autoattack"
    description = "AutoAttack (Croce & Hein 2020): apgd_ce, apgd_t, fab_t, square; per-attack accuracy"
    attack_name = "autoattack"
    attack_options = ("version", "steps", "n_queries", "n_target_classes")
    check_kinds = ("model",)

    @dataclass
    class Options(BudgetOptions):
        version: Literal[VERSION_NAMES] | None = option(None, help="standard (default), plus, rand or custom")
        attacks: list[str] | None = option(None, help="members joined by + (sets version=custom), e.g. "
                                                      "apgd_ce+square")
        steps: int | None = option(None, min=1, help="iterations of every member (a reduced AutoAttack)")
        n_queries: int | None = option(None, min=1, help="Square queries (a reduced AutoAttack)")
        n_target_classes: int | None = option(None, min=1, help="target classes of apgd_t / fab_t (default 9)")
    # A reduced AutoAttack on a subset (the report says so): the full budget costs ~10 s per image on 2 CPU cores.

    def attack_for(self, ctx: EvalContext, model: nn.Module, seed: int) -> Attack:
        kw = self.attack_kwargs(ctx)
        attacks = self.opts.attacks
        if attacks:
            kw["version"], kw["attacks"] = "custom", list(attacks)
        return create_attack("autoattack", model, seed=seed, run_checks=False, **kw)

    def attack_stats(self, atk: Attack, n_attacked: int) -> dict[str, Any]:
        per = atk.last_report.get("per_attack", {})   # type: ignore[attr-defined]
        return {"per_attack": {k: int(round(v * n_attacked)) for k, v in per.items()}}

    def settings(self, ctx: EvalContext) -> dict[str, Any]:
        out = super().settings(ctx)
        atk = self.attack_for(ctx, ctx.model, 0)
        out["attacks"] = atk.member_names()   # type: ignore[attr-defined]
        overrides = {k: v for k, v in atk.overrides.items()}   # type: ignore[attr-defined]
        out["reduced"] = bool(overrides) and out.get("version") != "custom"
        if overrides:
            out["overrides"] = overrides
        return out

    def extra_results(self, ctx: EvalContext, s: dict[str, Any]) -> dict[str, Any]:
        n = max(s.get("n", 0), 1)
        counts = s.get("per_attack", {})
        misclassified = s.get("n", 0) - s.get("clean", 0)
        return {"per_attack": {k: v / n for k, v in counts.items()}, "clean_misclassified": misclassified}

    def extra_flags(self, ctx: EvalContext, res: dict[str, Any]) -> dict[str, checks.CheckResult]:
        return {"blackbox_stronger": checks.check_blackbox_stronger(res["per_attack"]),
                "n_classes": checks.check_n_classes(ctx.num_classes, int(res.get("n_target_classes", 9)))}


@register_suite
class SpatialSuite(AttackSuite):
    name = "spatial"
    description = "worst case over 9 × 9 translations (the papers' range at the image size) × 31 rotations (±30°)"
    attack_name = "spatial"
    attack_options = ("translations", "rotations", "max_translation", "max_rotation", "batch_size")

    @dataclass
    class Options(ExampleOptions):
        translations: int | None = option(None, min=1, help="translations per axis (default 9)")
        rotations: int | None = option(None, min=1, help="rotation angles (default 31)")
        max_translation: float | None = option(None, min=0, help="largest shift in pixels (default: the papers' "
                                                                 "range at the image size)")
        max_rotation: float | None = option(None, min=0, help="largest angle in degrees (default 30)")
        batch_size: int | None = option(None, min=1, help="transformed images per forward pass (default 256)")
    check_kinds = ()
    bounded = False

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["all"]

    def attack_stats(self, atk: Attack, n_attacked: int) -> dict[str, Any]:
        st = atk.last_stats   # type: ignore[attr-defined]
        return {"evaluated": st.get("evaluated", 0.0), "attack_seconds": st.get("seconds", 0.0)}

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
                "transforms_per_s": s.get("evaluated", 0) / max(s.get("attack_seconds", 0.0), 1e-9)}


@register_suite
class PatchFoolSuite(AttackSuite):
    name = "patch_fool"
    description = "Patch-Fool (Fu et al. 2022): one attention-chosen patch replaced and optimised; ViTs only"
    attack_name = "patch_fool"
    attack_options = ("num_patches", "steps", "step_size", "attn_weight", "attn_block", "selection", "scoring")

    @dataclass
    class Options(ExampleOptions):
        eps: Eps | None = option(None, min=0, help="L∞ bound of the patch (the mild variant; default none)")
        num_patches: int | None = option(None, min=1, help="patches attacked (default 1)")
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else 250)")
        step_size: Eps | None = option(None, min=0, help="Adam step (default the attack's)")
        attn_weight: float | None = option(None, min=0, help="weight of the attention loss (default 0.002)")
        attn_block: int | None = option(None, min=0, help="blocks whose attention is used (default 4)")
        selection: str | None = option(None, help="how the patch is chosen (default attn)")
        scoring: Literal["final", "best"] | None = option(None, help="final (default: the final iterate, as the "
                                                                     "reference) or best (any fooling iterate)")
    check_kinds = ("model",)
    bounded = False

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        """``scoring=final`` (default) scores the final iterate on every image, as the reference; ``best``
        keeps any fooling iterate and counts misclassified images as broken (RobustBench's convention)."""
        if part == "checks" or self.options.get("scoring", "final") == "best":
            return super().run(ctx, part, batch)
        x, y = batch.x, batch.y
        with torch.no_grad():
            clean_logits = ctx.model(x)
        clean_ok = correct(clean_logits, y)
        with inference_settings(ctx.model, micro_batch=None):     # the attack's probe hooks read whole batches
            x_adv = self.attack_for(ctx, ctx.model, chunk_seed(batch))(x, y)
        with torch.no_grad():
            adv_logits = ctx.model(x_adv)
        robust = recheck_fp32(ctx.model, correct(adv_logits, y), None, x_adv, y)
        return {"n": int(y.numel()), "clean": int(clean_ok.sum()), "robust": int(robust.sum()),
                "nonfinite": int((nonfinite_rows(clean_logits) | nonfinite_rows(adv_logits)).sum()),
                "saved": self.maybe_save(ctx, batch, x, x_adv, torch.ones_like(clean_ok))}

    def attack_kwargs(self, ctx: EvalContext) -> dict[str, Any]:
        kw = super().attack_kwargs(ctx)
        if self.options.get("eps") is not None:   # the "mild" L∞ variant; unconstrained by default
            kw["eps"] = self.options["eps"]
        return kw

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
    """Examples crafted on every model of the run (``--model A,B,…``) and on the extra source models named by
    ``sources=NAME+NAME…``, evaluated on the model under test: each results.json holds its column of the source
    → target accuracy matrix (Bhojanapalli et al. Tables 4–5); ``robustvit report`` assembles the whole matrix.
    The examples crafted on a source are identical for every target (same seeds) and are cached in memory (up
    to ``cache_gb``, 2) across targets.

    An extra source is a checkpoint folder, or a model name with ``source_pretrained=1`` (published weights) or
    ``source_weights=FILE`` (one source only); a bare name is refused (it would have random weights) unless
    ``allow_random=1``. The result records every source's weights (``sources``) and is ``comparable: false``,
    with a note, when any source or the target has random weights."""

    name = "transfer"
    description = "transfer matrix: adversarial examples crafted on each model of the run, evaluated on this one"
    attack_options = ("steps", "step_size", "restarts", "random_start")
    check_kinds = ()
    across_models = True

    @dataclass
    class Options(BudgetOptions):
        attack: str = option("pgd", help="the attack crafting the examples on each source (`robustvit list attacks`)")
        steps: int | None = option(None, min=1, help="iterations (default: --steps, else 10 for pgd)")
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
        self._cache: dict[tuple[str, int, int], torch.Tensor] = {}
        self._cache_bytes = 0
        self._extra: dict[str, nn.Module] | None = None

    @property
    def attack_name(self) -> str:  # type: ignore[override]
        return str(self.opts.attack)

    def attack_kwargs(self, ctx: EvalContext) -> dict[str, Any]:
        kw = super().attack_kwargs(ctx)
        if self.attack_name == "pgd":
            kw.setdefault("steps", 10)   # step 2.5·ε/steps, the attack's own rule
        return kw

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
        x_adv = x_adv.to(x.device)
        with torch.no_grad():
            clean_logits, adv_logits = ctx.model(x), ctx.model(x_adv)
        clean_ok = correct(clean_logits, y)
        robust = recheck_fp32(ctx.model, clean_ok & correct(adv_logits, y), x, x_adv, y)
        return {"n": int(y.numel()), "clean": int(clean_ok.sum()), "robust": int(robust.sum()),
                "nonfinite": int((nonfinite_rows(clean_logits) | nonfinite_rows(adv_logits)).sum())}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        kw = self.attack_kwargs(ctx)
        column = {src: s.get("robust", 0) / max(s.get("n", 0), 1) for src, s in stats.items()}
        first = next(iter(stats.values()), {})
        clean = first.get("clean", 0) / max(first.get("n", 0), 1)
        settings = {k: v for k, v in kw.items() if isinstance(v, (bool, int, float, str))}
        models = self.sources(ctx)
        provenance = {src: dict(getattr(models.get(src), "weights", None) or {"source": "unknown"}) for src in column}
        random = [src for src in column if src in models and not is_comparable(models[src])]
        if not is_comparable(ctx.model) and ctx.model_name not in random:
            random.append(ctx.model_name)
        notes = [f"random weights: {', '.join(random)} (untrained networks; the matrix is not comparable with "
                 "published tables)"] if random else []
        return {"attack": self.attack_name, **settings, "target": ctx.model_name, "accuracy": column,
                "matrix": {src: {ctx.model_name: acc} for src, acc in column.items()},
                "clean_accuracy": clean, "num_images": first.get("n", 0), "sources": provenance,
                "comparable": not random, "notes": notes, "flags": {},
                **nonfinite_result(self.key, max((s.get("nonfinite", 0) for s in stats.values()), default=0))}
