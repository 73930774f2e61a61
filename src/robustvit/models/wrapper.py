"""``Normalized``: the wrapper that makes any classifier take [0, 1] images."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from robustvit.errors import RobustvitError
from robustvit.models.spec import ModelSpec

#: How the wrapped network computes (``Normalized.precision``): plain float32; TF32 matrix products on CUDA (the same
#: as fp32 on the CPU); bfloat16 autocast (CUDA and CPU). Logits always come back in the input's dtype.
PRECISIONS = ("fp32", "tf32", "bf16")

#: Float slack on the [0, 1] input range (a projection or a resize can land a rounding error outside it).
RANGE_TOL = 1e-6


class Normalized(nn.Module):
    """Applies ``(x − mean) / std`` then the wrapped network; ``spec`` describes the model.

    Input: float (N, 3, H, W) in [0, 1]; output: logits (N, num_classes). ``keep`` (bool (N, H, W), optional): the
    retained pixels of an ablated image (:mod:`robustvit.certify`): a 3-channel network sees the others as 0 (before
    normalisation); a 6-channel network (``in_chans=6`` in ``spec.kwargs``) takes Levine & Feizi's ablation input
    (arXiv:2002.10733, alevine0/patchSmoothing): ``cat(z·keep, (1 − z)·keep)`` of the normalised image z.

    Values outside [0, 1] (± ``RANGE_TOL``) or NaN raise a one-line :class:`RobustvitError` (below 0 usually means
    already normalised). The CPU checks every call; an accelerator, not to synchronise on every call, checks the
    first call, then keeps a running min/max on the device read every ``check_every`` calls (an error names the
    window). ``model.check_range = False`` turns it off; traced, compiled and graph-captured forwards skip it.

    >>> m = create_model("vit_cifar_micro", num_classes=10)          # doctest: +SKIP
    >>> m(imagenet_normalised_batch)                                 # doctest: +SKIP
    RobustvitError: model input must lie in [0, 1], got values in [-2.12, 2.64]; it looks normalised ...
    """

    #: Enforce the [0, 1] input range (set ``False`` on an instance to opt out).
    check_range: bool = True
    #: Accelerators only: calls between two reads of the device-side running range (see the class docstring).
    check_every: int = 64
    #: How the network computes (:data:`PRECISIONS`); applied here only — never to corruption or attack arithmetic.
    precision: str = "fp32"
    #: Largest number of images one forward takes (None: the whole batch); with gradients each micro-batch is
    #: checkpointed, so memory is one micro-batch's. Logits do not depend on the cut (up to kernels' rounding).
    micro_batch: int | None = None

    def __init__(self, model: nn.Module, spec: ModelSpec) -> None:
        super().__init__()
        self.model, self.spec = model, spec
        #: where the weights came from: {"pretrained": bool, "source": "random" | "timm:NAME" | "file:PATH" |
        #: "checkpoint:DIR", "sha256": … (files)}; set by ``create_model``
        self.weights: dict[str, Any] = {"pretrained": False, "source": "unknown"}
        self.register_buffer("mean", torch.tensor(spec.mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(spec.std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("class_index", None, persistent=False)    # set by map_classes
        self._range_calls = 0
        self._range: tuple[torch.Tensor, torch.Tensor] | None = None    # device-side running (min, max)

    @property
    def in_chans(self) -> int:
        """Input channels of the wrapped network: 3 (the image) or 6 (Levine & Feizi's ablation input)."""
        return int(self.spec.kwargs.get("in_chans", 3))

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise RobustvitError(f"model input must have shape (N, 3, H, W), got {tuple(x.shape)}")
        if self.in_chans not in (3, 6):
            raise RobustvitError(f"the network takes {self.in_chans} input channels; robustvit wraps networks of 3 "
                                 "(RGB) or 6 (RGB and its ablation encoding) channels")
        if keep is not None and keep.shape != (len(x), *x.shape[2:]):
            raise RobustvitError(f"keep must be the retained pixels (N, H, W) = {(len(x), *x.shape[2:])}, got "
                                 f"{tuple(keep.shape)}")
        if not x.is_floating_point():
            raise RobustvitError(f"model input must be float in [0, 1], got dtype {x.dtype}; use x.float() / 255")
        if self.check_range and x.numel() and not _tracing(x):
            self._check_range(x)
        mb = self.micro_batch
        if mb is None or len(x) <= mb:
            return self._logits(x, keep)
        keeps = [None] * len(x.split(mb)) if keep is None else keep.split(mb)
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            return torch.cat([checkpoint(self._logits, part, k, use_reentrant=False)
                              for part, k in zip(x.split(mb), keeps)])
        return torch.cat([self._logits(part, k) for part, k in zip(x.split(mb), keeps)])

    def network_input(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """What the network sees for images ``x`` (N, 3, H, W) in [0, 1]: normalised, the pixels ``keep`` drops
        zeroed, and for a 6-channel network Levine & Feizi's encoding (z, 1 − z; 0 where dropped)."""
        k = None if keep is None else keep[:, None].to(x.dtype)
        if k is not None and self.in_chans == 3:
            x = x * k
        z = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        if self.in_chans == 6:
            z = torch.cat([z, 1 - z], 1) if k is None else torch.cat([z * k, (1 - z) * k], 1)
        return z

    def _logits(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        with computing_in(self.precision, x.device):
            logits = self.model(self.network_input(x, keep))
        logits = logits.to(x.dtype)
        if self.class_index is not None:            # a class map: the best logit of each data class's model classes
            logits = logits[:, self.class_index].amax(-1)
        return logits

    def _check_range(self, x: torch.Tensor) -> None:
        lo, hi = torch.aminmax(x.detach())
        if not _deferred(x.device) or self.check_every <= 1:
            _refuse_outside_unit(float(lo), float(hi), 1)
            return
        if getattr(self, "_range", None) is not None and self._range[0].device != lo.device:
            self._flush_range(self._range_calls % self.check_every or self.check_every)   # the model moved
        if getattr(self, "_range", None) is None:
            self._range_calls = getattr(self, "_range_calls", 0)
            self._range = (lo, hi)
        else:   # NaN propagates through minimum/maximum, so it is caught at the next read
            self._range = (torch.minimum(self._range[0], lo), torch.maximum(self._range[1], hi))
        self._range_calls += 1
        if self._range_calls == 1 or self._range_calls % self.check_every == 0:
            self._flush_range(1 if self._range_calls == 1 else self.check_every)

    def _flush_range(self, window: int) -> None:
        """Read the device-side running range (the one synchronisation per window) and reset it."""
        assert self._range is not None
        lo_v, hi_v = torch.stack(self._range).tolist()
        self._range = None
        _refuse_outside_unit(lo_v, hi_v, window)

    def map_classes(self, groups: list[list[int]], names: list[str] | None = None) -> None:
        """Score data class i by the largest logit among the model classes ``groups[i]`` — e.g. a 1000-class
        ImageNet model on a 10-class data set; ``spec.num_classes`` becomes ``len(groups)``."""
        n = self.spec.num_classes
        if not groups or any(not g or not all(0 <= int(c) < n for c in g) for g in groups):
            raise RobustvitError(f"a class map needs, for every data class, model class indices in 0-{n - 1}")
        width = max(len(g) for g in groups)
        index = [[int(c) for c in g] + [int(g[0])] * (width - len(g)) for g in groups]   # pad: max unchanged
        self.class_index = torch.tensor(index).to(self.mean.device)
        self.spec = replace(self.spec, num_classes=len(groups), class_names=names)

    @property
    def net(self) -> nn.Module:
        """The wrapped network (a timm model for timm architectures)."""
        return self.model


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a one-line error."""
    if precision not in PRECISIONS:
        raise RobustvitError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


@contextmanager
def computing_in(precision: str, device: torch.device) -> Iterator[None]:
    """Within the block, float32 work on ``device`` runs in ``precision``: ``bf16`` autocast, ``tf32`` TF32 CUDA
    matmuls and convolutions (nothing on the CPU), ``fp32`` plain float32 (TF32 off, whatever the global setting)."""
    check_precision(precision)
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
        return
    if device.type != "cuda":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    old = matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = old


@contextmanager
def inference_settings(model: nn.Module, *, precision: str | None = None, micro_batch: int | None | bool = False
                       ) -> Iterator[None]:
    """Within the block, a ``Normalized`` ``model`` computes in ``precision`` and cuts batches into ``micro_batch``
    images (None: whole batches); an argument not given keeps the model's setting (anything else is left alone)."""
    if not isinstance(model, Normalized):
        yield
        return
    old = model.precision, model.micro_batch
    if precision is not None:
        model.precision = check_precision(precision)
    if micro_batch is not False:
        model.micro_batch = micro_batch
    try:
        yield
    finally:
        model.precision, model.micro_batch = old


def _deferred(device: torch.device) -> bool:
    """Whether inputs on ``device`` are range-checked lazily: all but the CPU (no synchronisation to save there)."""
    return device.type != "cpu"


def _tracing(x: torch.Tensor) -> bool:
    """Inside ``torch.jit`` tracing/scripting, ``torch.compile`` or a CUDA-graph capture (no host reads there)."""
    compiling = getattr(torch.compiler, "is_compiling", None)
    capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
    return bool(torch.jit.is_tracing() or torch.jit.is_scripting() or (compiling is not None and compiling())
                or capturing)


def _refuse_outside_unit(lo: float, hi: float, window: int) -> None:
    """One-line error for an input range outside [0, 1] (± RANGE_TOL) or containing NaN."""
    if lo >= -RANGE_TOL and hi <= 1 + RANGE_TOL:
        return
    where = "model input" if window == 1 else f"the model input of one of the last {window} calls"
    if lo != lo or hi != hi:
        raise RobustvitError(f"{where} contains NaN; pass finite images in [0, 1]")
    if lo < -RANGE_TOL:
        hint = ("it looks normalised (mean/std already applied): pass unnormalised [0, 1] images, the model "
                "normalises inside")
    else:
        hint = "it looks like 0-255 pixels: divide by 255" if hi > 2 else "clip it to [0, 1]"
    raise RobustvitError(f"{where} must lie in [0, 1], got values in [{lo:.3g}, {hi:.3g}]; {hint} "
                         "(model.check_range = False turns this check off)")


@contextmanager
def range_check_off(model: nn.Module) -> Iterator[None]:
    """Within the block, a ``Normalized`` ``model`` takes inputs outside [0, 1] (analyses that perturb on purpose)."""
    if not isinstance(model, Normalized):
        yield
        return
    old = model.check_range
    model.check_range = False
    try:
        yield
    finally:
        model.check_range = old
