"""AutoAttack — an ensemble of parameter-free attacks (Croce & Hein 2020, "Reliable evaluation of
adversarial robustness with an ensemble of diverse parameter-free attacks", arXiv:2003.01690).

The members (any registered attack) run in order, each on the points still classified correctly; the output
keeps, per sample, the first adversarial example found. Versions as fra31/auto-attack, T = min(``n_target_classes``,
classes − 1):

=========== ==================================================================================
``standard`` apgd_ce (1 restart), apgd_t (T targets), fab_t (T targets), square (5000 queries)
``plus``     apgd_ce (5 restarts), apgd_dlr (5 restarts), fab (5 restarts), square (5000 queries),
             apgd_t (T targets), fab_t (T targets)
``rand``     apgd_ce and apgd_dlr with EoT over 20 forward passes (randomised defences)
``custom``   ``attacks=[...]``: names, ``(name, kwargs)`` pairs or :class:`Attack` objects
=========== ==================================================================================

L1 ``standard`` is the original's L1 version (Croce & Hein 2021, "Mind the box", arXiv:2103.01208,
:data:`L1_VERSIONS`). Members that cannot run (too few classes) are skipped and flagged. ``last_report`` holds the
clean, per-member and final robust accuracy, times and the self-check flags; ``individual=True`` adds each
member's robust accuracy alone on every clean-correct point (``run_standard_evaluation_individual``).

Example::

    atk = create_attack("autoattack", model, eps="8/255", version="standard")
    x_adv = atk(x, y)
    atk.last_report["per_attack"]      # {'apgd_ce': 0.51, 'apgd_t': 0.49, 'fab_t': 0.49, 'square': 0.49}
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from robustvit.attacks import checks
from robustvit.attacks.base import (ATTACKS, NORMS, Attack, attack_keywords, create_attack, list_attacks,
                                    register_attack)
from robustvit.errors import RobustvitError
from robustvit.options import option

MemberSpec = tuple[str, dict[str, Any]]

#: Square as the reference AutoAttack builds it: 5,000 queries, p_init 0.8 and ``resc_schedule=False`` (its
#: p schedule counts iterations as they are, so it stops shrinking the window at p_init/128).
SQUARE = ("square", {"n_queries": 5000, "p_init": 0.8, "rescale_schedule": False})
VERSIONS: dict[str, list[MemberSpec]] = {
    "standard": [("apgd_ce", {"restarts": 1}), ("apgd_t", {"restarts": 1, "n_target_classes": "T"}),
                 ("fab_t", {"restarts": 1, "n_target_classes": "T"}), SQUARE],
    "plus": [("apgd_ce", {"restarts": 5}), ("apgd_dlr", {"restarts": 5}), ("fab", {"restarts": 5}),
             SQUARE, ("apgd_t", {"restarts": 1, "n_target_classes": "T"}),
             ("fab_t", {"restarts": 1, "n_target_classes": "T"})],
    "rand": [("apgd_ce", {"restarts": 1, "eot_iter": 20}), ("apgd_dlr", {"restarts": 1, "eot_iter": 20})],
}
#: The versions whose members differ in L1 (fra31/auto-attack ``set_version``, norm L1): APGD with the 3ε → 2ε → ε
#: schedule, 5 restarts of APGD-CE, APGD-T on 5 target classes ("T<=5": min(5, T)).
L1_VERSIONS: dict[str, list[MemberSpec]] = {
    "standard": [("apgd_ce", {"restarts": 5, "use_largereps": True}),
                 ("apgd_t", {"restarts": 1, "n_target_classes": "T<=5", "use_largereps": True}),
                 ("fab_t", {"restarts": 1, "n_target_classes": "T"}), SQUARE],
}
#: Every ``version`` name.
VERSION_NAMES = (*VERSIONS, "custom")
#: Fewest classes each member needs.
MIN_CLASSES = {"apgd_dlr": 3, "apgd_t": 4}
#: Keyword aliases tried when a member does not accept the common name.
ALIASES = {"restarts": ("n_restarts",), "steps": ("n_iter", "iterations"), "n_target_classes": ("n_targets",)}


def _name(member: MemberSpec | Attack) -> str:
    return member.name if isinstance(member, Attack) else member[0]


def _targets(value: Any, t: int) -> Any:
    """A member keyword's value with the target-count placeholders resolved: "T" → t, "T<=k" → min(t, k)."""
    if value == "T":
        return t
    if isinstance(value, str) and value.startswith("T<="):
        return min(t, int(value[3:]))
    return value


@register_attack
class AutoAttack(Attack):
    """AutoAttack (Croce & Hein 2020, arXiv:2003.01690): apgd_ce, apgd_t, fab_t and square in cascade, each on the
    points still robust; per-member robust accuracy in ``last_report``."""

    name = "autoattack"
    smoke = {"version": "custom", "attacks": ["apgd_ce", "square"], "steps": 2, "n_queries": 3}
    norms = NORMS
    masking_checks = ("model",)   # the ensemble holds its own black-box member

    @dataclass
    class Options(Attack.Options):
        version: Literal[VERSION_NAMES] = option("standard", help="standard, plus, rand or custom (attacks=)")
        attacks: list[Any] | None = option(None, help="custom: the members, joined by + (names; in Python also "
                                                      "(name, kwargs) pairs or Attack objects)")
        n_target_classes: int = option(9, min=1, help="target classes of apgd_t / fab_t (capped at classes − 1)")
        steps: int | None = option(None, min=1, help="iterations of every member (a reduced AutoAttack)")
        n_queries: int | None = option(None, min=1, help="Square's queries (a reduced AutoAttack)")
        member_kwargs: dict | None = option(None, help="keywords per member, {name: {key: value}} (Python / YAML)")
        batch_size: int | None = option(None, min=1, help="images per member call (default: the whole batch)")
        skip_missing: bool = option(False, help="skip members that are not registered instead of refusing")
        run_checks: bool = option(True, help="AutoAttack's own checks of the model (randomness, softmax output, …)")
        individual: bool = option(False, help="also run every member alone on all clean-correct points (the "
                                              "original's run_standard_evaluation_individual)")
        verbose: bool = option(False, help="print each member's progress")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        if self.targeted:
            raise RobustvitError("autoattack is untargeted (apgd_t/fab_t pick their own targets); drop targeted=True")
        o = self.opts
        self.version = o.version
        self.members = self._resolve(self.version, o.attacks, self.norm)
        self.n_target_classes = o.n_target_classes
        self.overrides = {k: v for k, v in (("steps", o.steps), ("n_queries", o.n_queries)) if v is not None}
        self.member_kwargs = {ATTACKS.canonical(k): v for k, v in (o.member_kwargs or {}).items()}
        self.batch_size, self.individual = o.batch_size, o.individual
        self.skip_missing, self.run_checks, self.verbose = o.skip_missing, o.run_checks, o.verbose
        self.missing = self._check_registered()
        self.last_report: dict[str, Any] = {}

    # ---- configuration ------------------------------------------------------------------------
    @staticmethod
    def _resolve(version: str, attacks: list[Any] | None, norm: str = "linf") -> list[MemberSpec | Attack]:
        if version == "custom":
            if not attacks:
                raise RobustvitError("autoattack version 'custom' needs attacks=[...], e.g. ['apgd_ce', 'square']")
            return [(ATTACKS.canonical(a), {}) if isinstance(a, str) else a if isinstance(a, Attack)
                    else (ATTACKS.canonical(a[0]), dict(a[1])) for a in attacks]
        if attacks:
            raise RobustvitError(f"attacks=[...] is only used with version='custom', not {version!r}")
        members = L1_VERSIONS.get(version, VERSIONS[version]) if norm == "l1" else VERSIONS[version]
        return [(n, dict(kw)) for n, kw in members]

    def _check_registered(self) -> list[str]:
        known = set(list_attacks())
        missing = [m[0] for m in self.members if not isinstance(m, Attack) and m[0] not in known]
        if missing and not self.skip_missing:
            raise RobustvitError(
                f"autoattack version {self.version!r} needs the attack(s) {', '.join(missing)}, which are not "
                f"registered (registered: {', '.join(sorted(known))}); pass skip_missing=True to run without them "
                "(the report flags it) or use version='custom', attacks=[...]")
        return missing

    def memory_factor(self, num_classes: int) -> int:
        """The largest of its members' (built with the ensemble's settings)."""
        return max([1] + [self.member_attack(m, num_classes).memory_factor(num_classes) for m in self.members
                          if _name(m) not in self.missing])

    def member_names(self) -> list[str]:
        return [_name(m) for m in self.members]

    def _n_targets(self, n_classes: int) -> int:
        """T: the target classes of apgd_t / fab_t, ``n_target_classes`` capped at ``n_classes − 1``."""
        return max(1, min(self.n_target_classes, n_classes - 1))

    def build_member(self, name: str, kw: dict[str, Any], n_classes: int) -> Attack:
        """Create one member with the ensemble's ε, norm and seed; keywords it does not take are dropped."""
        t = self._n_targets(n_classes)
        wanted = {"eps": self.eps, "norm": self.norm, "seed": self.seed, "n_target_classes": t,
                  **{k: _targets(v, t) for k, v in kw.items()}, **self.overrides,
                  **self.member_kwargs.get(name, {})}
        accepted = attack_keywords(name)
        args: dict[str, Any] = {}
        for k, v in wanted.items():
            key = k if k in accepted else next((a for a in ALIASES.get(k, ()) if a in accepted), None)
            if key is not None:
                args[key] = v
            elif k in self.member_kwargs.get(name, {}):
                raise RobustvitError(f"autoattack: member {name!r} does not take the keyword {k!r}")
        return create_attack(name, self.model, **args)

    # ---- the ensemble -------------------------------------------------------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t_start = time.perf_counter()
        logits = self._logits(x)
        n_classes = logits.shape[1]
        robust = logits.argmax(1) == y
        clean_ok = robust.clone()
        per_attack: dict[str, float] = {}
        times: dict[str, float] = {}
        skipped: dict[str, str] = {m: "not registered" for m in self.missing}
        flags = self._checks(x, y, n_classes)
        x_adv = x.clone()
        clean = robust.float().mean().item()
        self._log(f"clean accuracy {clean:.2%}")
        members = self.schedule(n_classes, skipped)
        for name, member in members:
            t0 = time.perf_counter()
            atk = self.member_attack(member, n_classes)
            robust = self.run_member(atk, x, y, robust, x_adv)
            per_attack[name] = robust.float().mean().item()
            times[name] = time.perf_counter() - t0
            self._log(f"robust accuracy after {name}: {per_attack[name]:.2%} ({times[name]:.1f} s)")
        individual = {name: self.run_member(self.member_attack(member, n_classes), x, y, clean_ok,
                                             x.clone()).float().mean().item()
                      for name, member in members} if self.individual else None
        flags["blackbox_stronger"] = checks.check_blackbox_stronger({"clean": clean, **per_attack})
        if skipped:
            flags["skipped_members"] = checks._result(True, "members skipped: " + ", ".join(
                f"{k} ({v})" for k, v in skipped.items()), skipped=skipped)
        for name, res in flags.items():
            if res["flag"]:
                warnings.warn(f"autoattack check {name!r}: {res['message']}", stacklevel=3)
        self.last_report = {
            "version": self.version, "attacks": self.member_names(), "eps": self.eps, "norm": self.norm,
            "seed": self.seed, "n": int(x.shape[0]), "n_classes": int(n_classes),
            "n_target_classes": self._n_targets(n_classes), "clean_accuracy": clean, "per_attack": per_attack,
            "robust_accuracy": robust.float().mean().item(),
            "time_s": {**times, "total": time.perf_counter() - t_start}, "flags": flags,
            **({} if individual is None else {"individual": individual})}
        return x_adv

    def schedule(self, n_classes: int, skipped: dict[str, str] | None = None) -> list[tuple[str, MemberSpec | Attack]]:
        """The members that run on ``n_classes`` classes, in cascade order, as (name, spec or Attack); those that
        cannot run (not registered, too few classes) are left out and added to ``skipped`` with why."""
        skipped = {} if skipped is None else skipped
        skipped.update({m: "not registered" for m in self.missing if m not in skipped})
        out: list[tuple[str, MemberSpec | Attack]] = []
        for member in self.members:
            name = _name(member)
            if name in skipped:
                continue
            if n_classes < MIN_CLASSES.get(name, 2):
                skipped[name] = f"needs >= {MIN_CLASSES[name]} classes"
                continue
            out.append((name, member))
        return out

    def member_attack(self, member: MemberSpec | Attack, n_classes: int) -> Attack:
        """The attack object of one member of :meth:`schedule` (built with the ensemble's ε, norm and seed)."""
        return member if isinstance(member, Attack) else self.build_member(member[0], member[1], n_classes)

    def run_member(self, atk: Attack, x: torch.Tensor, y: torch.Tensor, robust: torch.Tensor,
                   x_adv: torch.Tensor) -> torch.Tensor:
        """One member of the cascade: attack the points of ``robust`` (still robust); write the fooling examples
        into ``x_adv``; return the new mask."""
        idx = robust.nonzero().squeeze(1)
        robust = robust.clone()
        if idx.numel() == 0:          # nothing left to attack (split() would still yield one empty chunk)
            return robust
        for chunk in idx.split(self.batch_size or max(len(idx), 1)):
            xa = atk(x[chunk], y[chunk])
            fooled = self.predict(xa).argmax(1) != y[chunk]
            x_adv[chunk[fooled]] = xa[fooled]
            robust[chunk[fooled]] = False
        return robust

    def correct_mask(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The points the cascade starts from: those the model classifies correctly (as :meth:`perturb` does)."""
        return self._logits(x).argmax(1) == y

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.predict(c) for c in x.split(self.batch_size or max(x.shape[0], 1))])

    def _checks(self, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> dict[str, checks.CheckResult]:
        if not self.run_checks:
            return {}
        out: dict[str, checks.CheckResult] = {}
        xs, ys = x[: self.batch_size or 256], y[: self.batch_size or 256]
        if self.version != "rand":
            out["randomized"] = checks.check_randomized(self.model, xs)
        out["softmax_output"] = checks.check_softmax_output(self.model, xs)
        out["zero_gradients"] = checks.check_zero_gradients(self.model, xs, ys)
        if any(n in ("apgd_t", "fab_t", "apgd_dlr") for n in self.member_names()):
            out["n_classes"] = checks.check_n_classes(n_classes, self._n_targets(n_classes))
        return out

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[autoattack] {msg}", flush=True)

    def __repr__(self) -> str:
        return (f"AutoAttack(version={self.version!r}, attacks={self.member_names()}, eps={self.eps:.6g}, "
                f"norm={self.norm!r}, seed={self.seed})")
