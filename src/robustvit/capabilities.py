"""What applies to a model: its probe, and which analyses, attacks and evaluation suites run on it.

``capabilities(model_or_name)`` answers, for one model, with a JSON-able dict:

* ``probe``: how robustvit looks inside the model — ``ViTProbe`` (re-runs the blocks itself, needed by masks,
  lesions with a resumable start and Patch-Fool), ``BlockProbe`` (hooks on the model's own forward) or ``none`` —
  with ``has_class_token``, ``num_prefix_tokens``, ``num_registers``, ``num_blocks`` and, when run, ``exact``:
  whether its block outputs and logits match the model's own forward within 1e-4 (relative);
* ``analyses`` / ``attacks`` / ``suites``: {name: {"status", "reason"}} for every registered one; ``status`` is
  ``ok`` (ran on a tiny batch and its invariants held: finite, shapes, [0, 1] images, the ε-ball of bounded
  attacks), ``applies`` (static check only: nothing was run), ``refused`` (a one-line ``RobustvitError``, given
  as ``reason``) or ``failed`` (any other exception, or a broken invariant: a bug);
* ``counts``: per group, how many are ok/applies, refused and failed;
* ``model``, ``network`` (the network's class), ``family`` (``ModelSpec.family``), ``analysis_family``,
  ``has_class_token`` and ``num_registers`` (the probe's view, else the network's), ``input_size``,
  ``patch_size``, ``verified`` (whether it ran).

``run=True`` executes everything on ``images`` random images at the model's input size with tiny options (each
component's ``smoke`` class attribute), as the conformance tests and ``docs/models.md`` do. ``run=False``
(``robustvit list models --capabilities``) only builds the probe (``make_probe`` checks a ViT probe with one
forward), checks each analysis's model families and constructs each attack and suite; a named model is built at
its default configuration with random weights on the CPU (nothing downloaded): about a second for a ViT-B.

>>> cap = capabilities(create_model("vit_cifar_micro", num_classes=10), run=True,
...                    analyses=["pos_embed_similarity"], attacks=["fgsm"], suites=["clean"])
>>> cap["probe"]["kind"], cap["analyses"]["pos_embed_similarity"]["status"], cap["attacks"]["fgsm"]["status"]
('ViTProbe', 'ok', 'ok')
"""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError

STATUSES = ("ok", "applies", "refused", "failed")
#: Relative tolerance of the probe's exactness check (block outputs and logits vs the model's own forward).
PROBE_RTOL = 1e-4


# ---- the model's structure and its probe -----------------------------------------------------------------
def public(names: Iterable[str]) -> list[str]:
    """Registered names without private ones (``_name``: registered by tests or plugins for their own use)."""
    return [n for n in names if not n.startswith("_")]


def structure(model: nn.Module) -> dict[str, Any]:
    """Prefix tokens of a (timm) transformer read from the network: ``has_class_token``, ``num_registers``,
    ``num_prefix_tokens`` (None where the network has no token sequence)."""
    net = getattr(model, "net", model)
    if not hasattr(net, "patch_embed") and not hasattr(net, "cls_token"):
        return {"has_class_token": False, "num_registers": 0, "num_prefix_tokens": None}
    cls = getattr(net, "cls_token", None) is not None
    regs = int(getattr(net, "num_reg_tokens", 0) or 0)
    if not regs and getattr(net, "reg_token", None) is not None:
        regs = int(net.reg_token.shape[1])
    npt = getattr(net, "num_prefix_tokens", None)
    return {"has_class_token": cls, "num_registers": regs, "num_prefix_tokens": int(npt) if npt is not None else None}


def build_probe(model: nn.Module) -> tuple[Any, dict[str, Any]]:
    """``(make_probe(model), {})``, or ``(None, {"kind": "none" | "failed", "reason": …})`` when no probe reads
    the model (a ``RobustvitError``) or building one fails (a bug: reported, not raised)."""
    from robustvit.models.probe import make_probe
    try:
        return make_probe(model), {}
    except RobustvitError as e:
        return None, {"kind": "none", "reason": str(e)}
    except Exception as e:  # noqa: BLE001
        return None, {"kind": "failed", "reason": _one_line(e)}


def probe_info(model: nn.Module, x: torch.Tensor | None = None, *, probe: Any = None) -> dict[str, Any]:
    """The probe ``make_probe`` picks for ``model`` (or the one given) and its attributes; with images ``x``,
    whether it is exact (``probe.verify(x)`` where the probe has it, else block outputs and logits against hooks
    on the model's own blocks, within :data:`PROBE_RTOL`)."""
    info: dict[str, Any] = {"kind": "none", **structure(model), "exact": None, "reason": None}
    if probe is None:
        probe, failure = build_probe(model)
        if probe is None:
            info.update(failure)
            return info
    kind = type(probe).__name__
    info.update(kind=kind, family=getattr(probe, "family", None), num_blocks=int(getattr(probe, "num_blocks", 0)),
                remove_modes=list(getattr(probe, "remove_modes", ())),
                maskable=bool(getattr(probe, "maskable", kind == "ViTProbe")))
    for k in ("has_class_token", "num_prefix_tokens", "num_registers"):
        if hasattr(probe, k):
            v = getattr(probe, k)
            info[k] = bool(v) if k == "has_class_token" else (int(v) if v is not None else None)
    if x is not None:
        try:
            err = probe_error(model, probe, x)
            info["exact"] = err <= PROBE_RTOL
            info["max_rel_error"] = float(f"{err:.3g}")
            if not info["exact"]:
                info["reason"] = f"probe differs from the model's forward by {err:.3g} (relative)"
        except Exception as e:  # noqa: BLE001  (a RobustvitError is its own one-line reason)
            info.update(exact=False, reason=str(e) if isinstance(e, RobustvitError) else _one_line(e))
    return info


def probe_error(model: nn.Module, probe: Any, x: torch.Tensor) -> float:
    """Largest relative error of ``probe.run(x)``'s block outputs and logits against the model's own forward
    (forward hooks on the probe's blocks, which are the model's real modules). ``probe.verify(x)`` runs first
    where the probe has it (it raises ``RobustvitError`` when it disagrees)."""
    verify = getattr(probe, "verify", None)
    if callable(verify):
        verify(x)
    outs: list[torch.Tensor] = []
    to_tokens = getattr(probe, "_tokens", None)
    hooks = [b.register_forward_hook(lambda m, a, y: outs.append(to_tokens(y) if to_tokens else
                                                                (y[0] if isinstance(y, (tuple, list)) else y)))
             for b in probe.blocks]
    try:
        with torch.no_grad():
            ref = model(x)
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        out = probe.run(x, tokens=True)
    errors = [_rel(out.logits, ref)]
    if len(outs) == len(out.tokens):
        errors += [_rel(a, b) for a, b in zip(out.tokens, outs)]
    return max(errors)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference relative to ``b``'s largest magnitude; inf for different shapes."""
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max()) / (float(b.abs().max()) or 1.0)


# ---- analyses, attacks, suites ----------------------------------------------------------------------------
def _one_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:300]


def _entry(status: str, reason: str | None = None) -> dict[str, Any]:
    return {"status": status, "reason": reason}


def _guard(fn) -> dict[str, Any]:  # noqa: ANN001
    """Run ``fn`` → its entry; a ``RobustvitError`` is a refusal, anything else a failure."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except RobustvitError as e:
        msg = str(e)
        if "\n" in msg:
            return _entry("failed", "RobustvitError spanning several lines: " + msg.splitlines()[0])
        return _entry("refused", msg)
    except Exception as e:  # noqa: BLE001  (reported as a failure: the contract says one-line RobustvitError)
        return _entry("failed", _one_line(e))


def _finite(obj: Any, where: str = "") -> str | None:
    """The first non-finite number in a nested result (keys starting with ``_`` are figure data: skipped)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and k.startswith("_"):
                continue
            bad = _finite(v, f"{where}.{k}" if where else str(k))
            if bad:
                return bad
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad = _finite(v, f"{where}[{i}]")
            if bad:
                return bad
    elif isinstance(obj, float) and not math.isfinite(obj):
        return where or "value"
    elif isinstance(obj, torch.Tensor) and obj.is_floating_point() and not bool(torch.isfinite(obj).all()):
        return where or "tensor"
    return None


def _accuracies_in_range(obj: Any, where: str = "") -> str | None:
    """The first ``*accuracy*``/``top1``/``top5`` number outside [0, 1]."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{where}.{k}" if where else str(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(k, str) and \
                    ("accuracy" in k or k in ("top1", "top5")) and not 0.0 <= float(v) <= 1.0:
                return path
            bad = _accuracies_in_range(v, path) if isinstance(v, (dict, list)) else None
            if bad:
                return bad
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad = _accuracies_in_range(v, f"{where}[{i}]")
            if bad:
                return bad
    return None


def _check_result(res: Any) -> dict[str, Any]:
    bad = _finite(res)
    if bad:
        return _entry("failed", f"non-finite value at {bad}")
    bad = _accuracies_in_range(res)
    if bad:
        return _entry("failed", f"accuracy outside [0, 1] at {bad}")
    return _entry("ok")


def check_analysis(model: nn.Module, name: str, dataset: Any = None, *, run: bool = True,
                   options: dict[str, Any] | None = None, family: str | None = None,
                   probe: Any = None) -> dict[str, Any]:
    """One analysis on ``model``: run on ``dataset`` (``run=True``) or checked statically (its model families,
    and a probe where it needs one). ``family`` / ``probe``: the model's, when already known (not rebuilt)."""
    from robustvit.analysis import check_family, get_analysis, run_analyses
    from robustvit.models.families import family_of
    analysis = get_analysis(name)
    opts = {**analysis.smoke, **(options or {})}

    def go() -> dict[str, Any]:
        if not run:
            fam = family if family is not None else family_of(model, probe)
            check_family(name, fam, getattr(getattr(model, "spec", None), "architecture", ""))
            if analysis.requires_probe and probe is None:
                from robustvit.models.probe import make_probe
                make_probe(model)         # no probe reads the model: its one-line reason is the refusal
            return _entry("applies")
        n = len(dataset)
        res = run_analyses(model, dataset, [_spec(name, opts)], None, limit=n, batch_size=n, device="cpu",
                           seed=0)[analysis.name]
        entry = _check_result(res)
        problem = analysis.check(res) if entry["status"] == "ok" else None
        return _entry("failed", problem) if problem else entry
    return _guard(go)


def _spec(name: str, options: dict[str, Any]) -> str:
    """``name:key=value…`` of a component and its options (list values joined by ``+``)."""
    values = {k: "+".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for k, v in options.items()}
    return name + "".join(f":{k}={v}" for k, v in values.items())


def check_attack(model: nn.Module, name: str, x: torch.Tensor | None = None, y: torch.Tensor | None = None, *,
                 run: bool = True, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One attack on ``model``: constructed, and with ``run=True`` run on (x, y) with its invariants checked:
    same shape/dtype, finite, in [0, 1], inside the ε-ball when the attack is bounded."""
    from robustvit.attacks import create_attack
    from robustvit.attacks.base import get_attack_class, lp_norm
    kw = {**get_attack_class(name).smoke, **(options or {})}

    def go() -> dict[str, Any]:
        atk = create_attack(name, model, **kw)
        if not run:
            return _entry("applies")
        assert x is not None and y is not None
        yy = (y + 1) % int(model.spec.num_classes) if getattr(atk, "targeted", False) else y
        adv = atk(x, yy)
        if adv.shape != x.shape or adv.dtype != x.dtype:
            return _entry("failed", f"output shape/dtype {tuple(adv.shape)} {adv.dtype} differs from the input's")
        if not bool(torch.isfinite(adv).all()):
            return _entry("failed", "non-finite adversarial images")
        if float(adv.min()) < 0 or float(adv.max()) > 1:
            return _entry("failed", "adversarial images outside [0, 1]")
        if getattr(atk, "bounded", False):
            norm = lp_norm(adv - x, atk.norm)
            if float(norm.max()) > float(atk.eps) * (1 + 1e-5) + 1e-6:
                return _entry("failed", f"outside the ε-ball: {float(norm.max()):.4g} > {float(atk.eps):.4g}")
        return _entry("ok")
    return _guard(go)


def check_suite(model: nn.Module, name: str, x: torch.Tensor | None = None, y: torch.Tensor | None = None, *,
                run: bool = True, spec: str | None = None, dataset: Any = None,
                out_dir: Any = None) -> dict[str, Any]:
    """One evaluation suite on ``model``: created from its tiny spec, and with ``run=True`` evaluated on the
    batch (x, y) through its ``plan`` → ``run`` → ``finalize``, the result checked (finite, accuracies in
    [0, 1]). Suites that read their own data set (ImageNet-R/-A, cue-conflict stimuli) refuse without it."""
    from robustvit.evaluation.suites import Batch, EvalContext, create_suite, get_suite_class
    from robustvit.utils import sum_stats
    cls = get_suite_class(name)
    spec = spec or _spec(name, cls.smoke)

    def go() -> dict[str, Any]:
        suite = create_suite(spec)
        mname = getattr(getattr(model, "spec", None), "architecture", "model")
        ctx = EvalContext(model=model, model_name=mname, models={mname: model}, data_spec="tensor:capabilities",
                          dataset=dataset, num_classes=int(model.spec.num_classes), device=torch.device("cpu"),
                          seed=0, options={}, out_dir=out_dir)
        if not run:
            if cls.requires_probe:
                from robustvit.models.probe import ViTProbe
                ViTProbe(model)
            return _entry("applies")
        assert x is not None and y is not None
        plan = suite.plan(ctx)
        if plan.data is not None or plan.size is not None:   # its own images (reachable when a root was given)
            return _entry("applies", "reads its own data set; not run here")
        batch = Batch(x, y, torch.arange(len(y)), torch.Generator().manual_seed(0))
        stats = {p: sum_stats([suite.run(ctx, p, batch)]) for p in plan.parts}
        res = suite.finalize(ctx, stats)
        if isinstance(res, dict) and isinstance(res.get("skipped"), str):   # a suite that skips models it cannot use
            return _entry("refused", res["skipped"])
        return _check_result(res)
    return _guard(go)


# ---- the whole picture ------------------------------------------------------------------------------------
def tiny_batch(model: nn.Module, images: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``images`` seeded random images at the model's input size and the model's own predictions as labels
    (so attacks start from correctly classified points)."""
    s = int(model.spec.image_size)
    x = torch.rand(images, 3, s, s, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = model(x).argmax(1)
    return x, y


def capabilities(model: nn.Module | str, *, run: bool = False, images: int = 4, seed: int = 0,
                 analyses: Iterable[str] | None = None, attacks: Iterable[str] | None = None,
                 suites: Iterable[str] | None = None) -> dict[str, Any]:
    """What applies to ``model`` (a ``Normalized`` model, or a model name: built at its default configuration
    with random weights on the CPU, static check only). See the module docstring for the keys. ``analyses``/``attacks``/``suites``: restrict to these
    names (default: every registered one)."""
    from robustvit.analysis import list_analyses
    from robustvit.attacks import list_attacks
    from robustvit.evaluation.suites import list_suites
    from robustvit.models.families import ANALYSIS_FAMILY, family_of
    name = model if isinstance(model, str) else getattr(getattr(model, "spec", None), "architecture", type(model).__name__)
    if isinstance(model, str):
        if run:
            raise RobustvitError("capabilities(name, run=True) needs a built model; pass create_model(name, ...)")
        model = build_default(model)
    spec = model.spec
    x = y = dataset = None
    if run:
        from robustvit.data import TensorImageDataset
        model = model.eval()
        x, y = tiny_batch(model, images, seed)
        dataset = TensorImageDataset(x, y, [str(i) for i in range(int(spec.num_classes))], spec="tensor:capabilities")
    probe, _ = build_probe(model)           # built once: the probe's report, the family and the static checks
    family = family_of(model, probe) if probe is not None else ANALYSIS_FAMILY.get(spec.family, "other")
    out: dict[str, Any] = {
        "model": name, "network": type(getattr(model, "net", model)).__name__, "family": spec.family,
        "analysis_family": family, "input_size": list(spec.input_size), "patch_size": spec.patch_size,
        "verified": bool(run), "probe": probe_info(model, x[:1] if x is not None else None, probe=probe),
        "analyses": {a: check_analysis(model, a, dataset, run=run, family=family, probe=probe)
                     for a in (analyses or public(list_analyses()))},
        "attacks": {a: check_attack(model, a, x, y, run=run) for a in (attacks or public(list_attacks()))},
        "suites": {s: check_suite(model, s, x, y, run=run) for s in (suites or public(list_suites()))},
    }
    out["has_class_token"] = out["probe"]["has_class_token"]
    out["num_registers"] = out["probe"]["num_registers"]
    out["counts"] = {g: {st: sum(1 for e in out[g].values() if e["status"] == st) for st in STATUSES}
                     for g in ("analyses", "attacks", "suites")}
    return out


def build_meta(name: str) -> nn.Module:
    """``name`` at its default configuration on the meta device: structure and ``ModelSpec`` only (no memory, no
    weights, nothing can run); falls back to the CPU for constructors that compute on their tensors."""
    from robustvit.models import create_model
    try:
        with torch.device("meta"):
            return create_model(name)
    except RobustvitError:
        raise
    except Exception:  # noqa: BLE001  (a constructor that needs real tensors)
        return create_model(name)


def build_default(name: str) -> nn.Module:
    """``name`` at its default configuration on the CPU with random weights (nothing is downloaded), in eval
    mode: what ``capabilities(name)`` inspects. ``make_probe`` checks itself on it with one forward."""
    from robustvit.models import create_model
    return create_model(name).eval()


#: At most this many models per ``capability_rows`` call (each is built at its default size: seconds each).
MAX_MODELS = 64


def capability_rows(pattern: str, max_models: int = MAX_MODELS) -> list[dict[str, Any]]:
    """Static capabilities of every model whose name matches ``pattern`` (``robustvit list models
    --capabilities PATTERN``); refuses more than ``max_models`` models."""
    from robustvit.models import list_models
    names = [n for n in list_models(pattern) if fnmatch.fnmatch(n, pattern)] if pattern else list_models()
    if not names:
        raise RobustvitError(f"no model matches {pattern!r}; see `robustvit list models`")
    if len(names) > max_models:
        raise RobustvitError(f"{len(names)} models match {pattern!r}; --capabilities builds each at its default size "
                             f"(seconds per model), so give a pattern matching at most {max_models}, e.g. 'deit_*'")
    rows = []
    for n in names:
        try:
            rows.append(capabilities(n))
        except RobustvitError as e:
            rows.append({"model": n, "error": str(e)})
    return rows


def mark(entry: dict[str, Any]) -> str:
    """✓ (ran ok), ○ (applies, not run), ✗ (refused), ! (failed)."""
    return {"ok": "✓", "applies": "○", "refused": "✗", "failed": "!"}[entry["status"]]


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table, one row per model: probe, class token, registers, how many analyses / attacks /
    suites apply (or ran), and the names of those refused (! marks a failure)."""
    if not rows:
        return ""
    width = max(5, *(len(r["model"]) for r in rows))
    lines = [f"{'model':<{width}}  {'probe':<10} {'cls':<3} {'reg':>3}  {'analyses':>8} {'attacks':>7} {'suites':>6}  "
             "refused (! failed)"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<{width}}  error: {r['error']}")
            continue
        p = r["probe"]
        counts = [f"{r['counts'][g]['ok'] + r['counts'][g]['applies']}/{len(r[g])}" for g in ("analyses", "attacks", "suites")]
        refused = [("!" if e["status"] == "failed" else "") + n for g in ("analyses", "attacks", "suites")
                   for n, e in r[g].items() if e["status"] in ("refused", "failed")]
        lines.append(f"{r['model']:<{width}}  {p['kind']:<10} {'yes' if p['has_class_token'] else 'no':<3} "
                     f"{p['num_registers'] or 0:>3}  {counts[0]:>8} {counts[1]:>7} {counts[2]:>6}  "
                     + (", ".join(refused) or "-"))
    lines.append("")
    lines.append("counts: applies (static check, nothing run) / registered; `robustvit list models --capabilities NAME` "
                 "gives one model's reasons")
    return "\n".join(lines)


def format_one(cap: dict[str, Any]) -> str:
    """One model's capabilities, with the reason of every refusal."""
    p = cap["probe"]
    lines = [f"{cap['model']}  family {cap['family']} (analyses: {cap['analysis_family']})  input {cap['input_size']}",
             f"probe: {p['kind']}" + (f" ({p['reason']})" if p["kind"] == "none" else "")
             + f"; class token: {'yes' if p['has_class_token'] else 'no'}; registers: {p['num_registers'] or 0}"
             + ("" if p.get("exact") is None else f"; exact: {'yes' if p['exact'] else 'no'}")]
    for g in ("analyses", "attacks", "suites"):
        lines.append(f"{g}:")
        for n, e in cap[g].items():
            lines.append(f"  {mark(e)} {n}" + (f" — {e['reason']}" if e.get("reason") else ""))
    lines.append("✓ ran · ○ applies (static check, nothing run) · ✗ refused · ! failed")
    return "\n".join(lines)


__all__ = ["MAX_MODELS", "PROBE_RTOL", "STATUSES", "build_default", "build_meta",
           "build_probe", "capabilities", "capability_rows", "check_analysis", "check_attack", "check_suite", "format_one",
           "format_table", "mark", "probe_error", "probe_info", "structure", "tiny_batch"]
