"""Suite ``fewshot``: few-shot linear evaluation of frozen pre-logit features (the ViT paper, §4.1 and App. B).

Dosovitskiy et al. (arXiv:2010.11929) judge a representation by "a regularized least-squares regression
problem that maps the (frozen) representation of a subset of training images to {−1, 1}ᴷ target vectors",
solved in closed form, with 1, 5, 10 and 25 examples per class. This suite follows the released evaluator
(google-research/big_vision, ``evaluators/fewshot_lsr.py`` with ``configs/common_fewshot.py``):

* **examples**: per draw d, each class's training images permuted by a generator seeded from (run seed,
  ``"fewshot"``, d); the first ``s`` are the ``s``-shot set (the 1-shot set lies inside the 5-shot set). The
  training split goes with the evaluation data (``cifar10:test`` → ``cifar10:train``, ``folder:ROOT/val`` →
  ``ROOT/train``, …, :func:`train_spec_for`) or is ``train=PATH``, read with the model's preprocessing.
* **features**: timm's ``forward_head(forward_features(x), pre_logits=True)`` after the model's normalisation.
* **regression**: features whitened with the few-shot set's mean and std (+1e-5), a constant feature 100 for the
  bias, targets 2·onehot − 1, ``W = (XᵀX + λI)⁻¹XᵀY`` (or its dual with fewer examples than dimensions).
* **regulariser**: big_vision's fixed ``λ = 2¹⁰`` (option ``l2``); ``l2=auto`` picks λ from 2⁰, 2², …, 2²⁰ per
  (shots, draw) by accuracy on ``holdout`` further training images per class (never the evaluation images).

The result (docs/fewshot.md) gives per shots the mean, sample std over draws and per-draw accuracies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from robustvit.data import ImageDataset, create_dataset, dataset_for_model, parse_data_spec
from robustvit.data.subset import dataset_labels
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.options import option
from robustvit.utils import derive_seed, eval_mode

DEFAULT_SHOTS = (1, 5, 10, 25)
DEFAULT_L2 = 2.0 ** 10            # big_vision configs/common_fewshot.py
AUTO_GRID = tuple(2.0 ** k for k in range(0, 21, 2))
BIAS_CONSTANT = 100.0             # big_vision evaluators/fewshot_lsr.py
FEATURE_BATCH = 256


# ---- the closed-form regression (no torch.nn, no data: unit-testable on fixed features) --------------------
@dataclass
class RidgeFit:
    """A fitted few-shot regressor: whitening statistics and weights (D + 1, K)."""

    mean: torch.Tensor
    std: torch.Tensor
    weight: torch.Tensor

    def predict(self, feats: torch.Tensor) -> torch.Tensor:
        """Class indices (N,) for features (N, D)."""
        return (_design(feats.double(), self.mean, self.std) @ self.weight).argmax(1)


def _design(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    x = (x - mean) / std
    return torch.cat([x, x.new_full((len(x), 1), BIAS_CONSTANT)], 1)


def ridge_fit(feats: torch.Tensor, labels: torch.Tensor, num_classes: int,
              l2: float | tuple[float, ...]) -> RidgeFit | list[RidgeFit]:
    """Regularised least squares from whitened features (+ bias feature) to {−1, 1}ᴷ targets, in closed form
    (float64), one fit per λ when ``l2`` is a tuple. ``feats``: (N, D); ``labels``: (N,) in [0, K)."""
    x = feats.detach().double()
    mean = x.mean(0, keepdim=True)
    std = x.std(0, unbiased=False, keepdim=True) + 1e-5
    a = _design(x, mean, std)
    y = 2.0 * torch.nn.functional.one_hot(labels.long().cpu(), num_classes).to(a) - 1.0
    n, d = a.shape
    # one eigendecomposition serves every λ (as big_vision): (G + λI)⁻¹ = Q diag(1/(e + λ)) Qᵀ
    eigs, q = torch.linalg.eigh(a.T @ a if n >= d else a @ a.T)
    lhs, rhs = (q, q.T @ (a.T @ y)) if n >= d else (a.T @ q, q.T @ y)
    fits = [RidgeFit(mean, std, (lhs / (eigs + lam)) @ rhs) for lam in (l2 if isinstance(l2, tuple) else (l2,))]
    return fits if isinstance(l2, tuple) else fits[0]


def class_balanced_draw(labels: torch.Tensor, num_classes: int, count: int,
                        generator: torch.Generator) -> list[torch.Tensor]:
    """For each class, ``count`` of its indices in a random order (the draw's permutation, truncated)."""
    out = []
    for k in range(num_classes):
        idx = torch.nonzero(labels == k).flatten()
        if len(idx) < count:
            raise RobustvitError(f"fewshot: class {k} has {len(idx)} training images but {count} are needed; "
                                 "lower shots= (or holdout=) or give a larger training split with train=PATH")
        out.append(idx[torch.randperm(len(idx), generator=generator)[:count]])
    return out


# ---- features -----------------------------------------------------------------------------------------------
def pre_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's pre-logit features (N, D) for images in [0, 1]: the wrapper's normalisation, then timm's
    ``forward_features`` and ``forward_head(..., pre_logits=True)``."""
    net = getattr(model, "net", model)
    if not (callable(getattr(net, "forward_features", None)) and callable(getattr(net, "forward_head", None))):
        raise RobustvitError(f"fewshot needs a timm-style model with forward_features/forward_head; "
                             f"{type(net).__name__} has none")
    if callable(getattr(model, "network_input", None)):      # a robustvit wrapper: normalised (6-channel encoded)
        x = model.network_input(x)
    out = net.forward_head(net.forward_features(x), pre_logits=True)
    return out.flatten(1).float()


def train_spec_for(data_spec: str, train: str | None) -> str:
    """The training split that goes with the evaluation data ``data_spec`` (or the folder ``train``)."""
    if train:
        if not Path(train).is_dir():
            raise RobustvitError(f"fewshot: train={train} is not a folder; give the training images' ImageFolder root")
        return f"folder:{train}"
    source, arg, options = parse_data_spec(data_spec)
    opts = "".join(f",{k}={v}" for k, v in options.items()
                   if not (source == "synthshapes" and k in ("count", "seed")))   # the train split's own count/seed
    if source in ("synthshapes", "cifar10", "cifar100") and arg in ("test", "train"):
        return f"{source}:train{opts}"
    if source in ("folder", "imagenet"):
        root = Path(arg)
        if (root.parent / "train").is_dir() and root.name != "train":
            return f"{source}:{root.parent / 'train'}{opts}"
    raise RobustvitError(f"fewshot: cannot tell the training split of {data_spec}; give its folder with "
                         "fewshot:train=PATH (ImageFolder layout)")


# ---- the suite ----------------------------------------------------------------------------------------------
@register_suite
class FewShot(Suite):
    name = "fewshot"
    demo = ("fewshot:shots=1+5+10+25:draws=5:limit=500",), ("fewshot:shots=1+5+10:draws=3:limit=200",)
    description = "few-shot linear probe (closed-form ridge to ±1 targets) on frozen pre-logits (ViT paper)"
    uses_head = False       # features only: an ImageNet model can be probed on CIFAR without a class map

    @dataclass
    class Options(SuiteOptions):
        shots: list[int] = option(default_factory=lambda: list(DEFAULT_SHOTS), min=1,
                                  help="examples per class, joined by + (e.g. 1+5+10+25)")
        draws: int = option(5, min=1, help="random draws of the examples, averaged")
        l2: float | Literal["auto"] = option(DEFAULT_L2, help="ridge regulariser (> 0), or auto: chosen on "
                                                              "held-out examples from a grid")
        holdout: int = option(5, min=1, help="held-out examples per class for l2=auto")
        train: str | None = option(None, help="the training split to draw from (a data spec or folder; default: "
                                              "the split that goes with --data)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.opts
        if not o.shots:
            raise RobustvitError("fewshot: shots= needs at least one count, e.g. shots=1+5")
        self.shots = tuple(sorted(set(o.shots)))
        self.draws, self.holdout = o.draws, o.holdout
        self.l2: float | None = None if o.l2 == "auto" else float(o.l2)
        if self.l2 is not None and not self.l2 > 0:
            raise RobustvitError(f"suite 'fewshot': l2={o.l2!r} is out of range (l2 must be > 0, or auto)")
        self.train = o.train
        self._fits: dict[str, dict[str, Any]] = {}     # by model name: fitted regressors and their record

    def _prepare(self, ctx: EvalContext) -> dict[str, Any]:
        """Draw the examples, compute their features once and fit every (shots, draw) regressor."""
        if ctx.model_name in self._fits:
            return self._fits[ctx.model_name]
        spec = train_spec_for(ctx.data_spec, self.train)
        model = ctx.model
        train = dataset_for_model(spec, model.spec) if hasattr(model, "spec") else create_dataset(spec)
        k = ctx.dataset.num_classes if ctx.dataset is not None else ctx.num_classes
        if train.num_classes != k or (ctx.dataset is not None and list(train.classes) != list(ctx.dataset.classes)):
            raise RobustvitError(f"fewshot: the training split {spec} has classes {list(train.classes)[:3]}… "
                                 f"({train.num_classes}), not those of {ctx.data_spec}; give a matching train=PATH")
        labels = dataset_labels(train)
        need = max(self.shots) + (self.holdout if self.l2 is None else 0)
        draws = []
        for d in range(self.draws):
            gen = torch.Generator().manual_seed(derive_seed(ctx.seed, "fewshot", d) % 2**63)
            draws.append(torch.stack(class_balanced_draw(labels, k, need, gen)))     # (K, need)
        used = torch.unique(torch.cat([dr.flatten() for dr in draws]))
        feats = self._features(ctx, train, used)
        row = {int(i): j for j, i in enumerate(used.tolist())}
        fits: dict[str, list[RidgeFit]] = {}
        chosen: dict[str, list[float]] = {}
        for s in self.shots:
            fits[str(s)], chosen[str(s)] = [], []
            for dr in draws:
                idx = dr[:, :s].flatten()
                x, y = feats[[row[int(i)] for i in idx]], labels[idx]
                if self.l2 is not None:
                    fits[str(s)].append(ridge_fit(x, y, k, self.l2))
                    continue
                hold = dr[:, max(self.shots):].flatten()
                hx, hy = feats[[row[int(i)] for i in hold]], labels[hold]
                grid = ridge_fit(x, y, k, AUTO_GRID)
                scores = [float((f.predict(hx) == hy).float().mean()) for f in grid]
                best = max(range(len(grid)), key=lambda i: (scores[i], i))   # ties: the stronger regulariser
                fits[str(s)].append(grid[best])
                chosen[str(s)].append(AUTO_GRID[best])
        self._fits[ctx.model_name] = {"fits": fits, "chosen": chosen, "spec": train.spec or spec,
                                      "dim": int(feats.shape[1])}
        return self._fits[ctx.model_name]

    @torch.no_grad()
    def _features(self, ctx: EvalContext, ds: ImageDataset, index: torch.Tensor) -> torch.Tensor:
        with eval_mode(ctx.model):
            return torch.cat([pre_logits(ctx.model, ds.get_batch(chunk)[0].to(ctx.device)).cpu()
                              for chunk in index.split(FEATURE_BATCH)])

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        prep = self._prepare(ctx)
        feats = pre_logits(ctx.model, batch.x).cpu()
        y = batch.y.cpu()
        correct = {s: [int((f.predict(feats) == y).sum()) for f in fs] for s, fs in prep["fits"].items()}
        return {"n": int(y.numel()), "correct": correct}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats["all"]
        n = max(int(s.get("n", 0)), 1)
        prep = self._prepare(ctx)
        accuracy = {}
        for shots in map(str, self.shots):
            accs = [c / n for c in s["correct"][shots]]
            mean = sum(accs) / len(accs)
            std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) if len(accs) > 1 else 0.0
            accuracy[shots] = {"mean": mean, "std": std, "per_draw": accs}
        out: dict[str, Any] = {"accuracy": accuracy, "shots": list(self.shots), "draws": self.draws,
                               "l2": "auto" if self.l2 is None else self.l2, "train_data": prep["spec"],
                               "feature_dim": prep["dim"], "num_images": int(s.get("n", 0)),
                               "num_classes": ctx.dataset.num_classes if ctx.dataset is not None else ctx.num_classes}
        if self.l2 is None:
            out["holdout"] = self.holdout
            out["l2_chosen"] = prep["chosen"]
        return out
