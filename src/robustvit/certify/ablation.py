"""Derandomized smoothing against adversarial patches: column and block ablations and the margin certificate.

Levine & Feizi, "(De)Randomized Smoothing for Certifiable Defense against Patch Attacks" (NeurIPS 2020,
arXiv:2002.10733): the base classifier sees only a band of ``size`` pixels (a full-height column band or a
``size``×``size`` block) at every position (wrapping around the edge); the smoothed classifier predicts the most
voted class (ties: the smaller index). An ``m``×``m`` patch meets at most Δ = m + size − 1 column bands
((m + size − 1)² blocks), so the prediction is certified when the top count exceeds the runner-up by more than 2Δ
(MadryLab/smoothed-vit's ``gap = 2Δ + 1``). Votes: each position's argmax (Salman et al.), or with a threshold θ
every class of softmax probability ≥ θ (Levine & Feizi's ``predict_and_certify``).

Salman, Jain, Wong & Madry, "Certified Patch Robustness via Smoothed Vision Transformers" (CVPR 2022,
arXiv:2110.07719): a ViT *drops* the tokens whose pixels are all ablated (re-run through
:class:`robustvit.models.probe.ViTProbe` on the kept tokens). Other models see ablated pixels as 0 before the
normalisation, or, with 6 input channels, Levine & Feizi's ``cat(z·keep, (1 − z)·keep)`` (alevine0/patchSmoothing,
``utils_band.py``), built by :class:`robustvit.models.Normalized`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe
from robustvit.models.wrapper import Normalized

ABLATIONS = ("column", "block")
#: How ablated pixels reach the model: ``drop`` (ViT tokens removed, Salman et al.) or ``zero_fill``.
TOKEN_MODES = ("drop", "zero_fill")
#: What a zero-filled model takes: ``rgb`` (3 channels, ablated pixels 0) or ``levine_feizi`` (6 channels).
ENCODINGS = ("rgb", "levine_feizi")


@dataclass(frozen=True)
class Ablation:
    """A column (``size`` pixels wide, full height) or block (``size``×``size``) retained band, at every ``stride``-th
    position (MadryLab/smoothed-vit's ``certify_stride``; 1 = every position, Levine & Feizi)."""

    kind: Literal["column", "block"]
    size: int
    stride: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ABLATIONS:
            raise RobustvitError(f"ablation must be one of {', '.join(ABLATIONS)}, got {self.kind!r}")
        if self.size < 1 or self.stride < 1:
            raise RobustvitError(f"ablation size and stride must be at least 1 pixel, got {self.size} and "
                                 f"{self.stride}")

    def positions(self, h: int, w: int, device: torch.device | None = None) -> torch.Tensor:
        """Band starts, long (P,): the column index, or row·W + column for blocks."""
        for side in (w,) if self.kind == "column" else (h, w):
            if side % self.stride:
                raise RobustvitError(f"ablation stride {self.stride} must divide the image side {side}")
        cols = torch.arange(0, w, self.stride, device=device)
        if self.kind == "column":
            return cols
        return (torch.arange(0, h, self.stride, device=device)[:, None] * w + cols[None, :]).flatten()

    def keep(self, positions: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Retained pixels, bool (P, H, W), of the bands starting at ``positions`` (see :meth:`positions`); bands
        wrap around the image edge as in Levine & Feizi."""
        dev = positions.device
        cols = (torch.arange(w, device=dev)[None, :] - (positions % w)[:, None]) % w < self.size     # (P, W)
        if self.kind == "column":
            return cols[:, None, :].expand(-1, h, -1)
        rows = (torch.arange(h, device=dev)[None, :] - (positions // w)[:, None]) % h < self.size    # (P, H)
        return rows[:, :, None] & cols[:, None, :]

    def delta(self, patch: int, h: int, w: int) -> int:
        """Δ: the most band positions a ``patch``×``patch`` square touches: ⌈(patch + size − 1) / stride⌉ per axis
        (at most the positions along it), squared for blocks."""
        def axis(side: int) -> int:
            return min(-(-(patch + self.size - 1) // self.stride), side // self.stride)
        return axis(w) if self.kind == "column" else axis(h) * axis(w)


class AblatedModel:
    """The base classifier on ablated images: ``ablated(x, keep)`` → logits (P, N, K) for images x (N, 3, H, W) in
    [0, 1] and retained-pixel masks ``keep`` (P, H, W). ``tokens``: ``drop`` (ViTs), ``zero_fill``, or ``auto``
    (drop where it applies; :attr:`note` says why not). ``encoding``: ``rgb``, ``levine_feizi`` (a 6-channel
    network) or ``auto`` (what the network takes)."""

    def __init__(self, model: nn.Module, tokens: Literal["auto", "drop", "zero_fill"] = "auto",
                 encoding: Literal["auto", "rgb", "levine_feizi"] = "auto") -> None:
        if tokens not in ("auto", *TOKEN_MODES):
            raise RobustvitError(f"tokens must be auto, drop or zero_fill, got {tokens!r}")
        if encoding not in ("auto", *ENCODINGS):
            raise RobustvitError(f"encoding must be auto, rgb or levine_feizi, got {encoding!r}")
        chans = int(getattr(model, "in_chans", 3))
        self.encoding = "levine_feizi" if chans == 6 else "rgb"
        if encoding != "auto" and encoding != self.encoding:
            fix = ("build it with in_chans=6, e.g. train --model-kwargs '{\"in_chans\": 6}'"
                   if encoding == "levine_feizi" else "use encoding=levine_feizi or auto")
            raise RobustvitError(f"encoding={encoding} needs a network with {6 if encoding == 'levine_feizi' else 3} "
                                 f"input channels; this model's takes {chans} ({fix})")
        self.model = model
        self.note: str | None = None
        self.probe: ViTProbe | None = None
        if tokens != "zero_fill":
            why = _cannot_drop(model) if self.encoding == "rgb" else "it takes Levine & Feizi's 6-channel input"
            if why is None:
                self.probe = ViTProbe(model)
            elif tokens == "drop":
                raise RobustvitError(f"cannot drop ablated tokens: {why}; use tokens=zero_fill")
            elif self.encoding == "rgb":
                self.note = f"ablated pixels zero-filled: {why}"
        self.mode = "drop" if self.probe is not None else "zero_fill"

    def __call__(self, x: torch.Tensor, keep: torch.Tensor, kept: int | None = None) -> torch.Tensor:
        """Logits (P, N, K). ``kept``: the patch tokens every mask keeps (drop mode, :meth:`token_groups`); None reads
        it from the first mask."""
        kd = keep.to(x.device)
        if self.probe is None:
            xa = x[None].expand(len(kd), *x.shape).flatten(0, 1)                     # (P·N, 3, H, W)
            ka = kd[:, None].expand(-1, len(x), -1, -1).flatten(0, 1)                # (P·N, H, W)
            if isinstance(self.model, Normalized):                  # zero-filled, or the 6-channel input
                return self.model(xa, keep=ka).unflatten(0, (len(kd), len(x)))
            return self.model(xa * ka[:, None].to(x.dtype)).unflatten(0, (len(kd), len(x)))
        xa = (x[None] * kd[:, None, None].to(x.dtype)).flatten(0, 1)                  # ablated pixels 0
        probe = self.probe
        cells = self.token_cells(keep)                                           # (P, T): tokens with a kept pixel
        kept = int(cells[0].sum()) if kept is None else kept
        idx = torch.argsort((~cells).to(torch.uint8), dim=1, stable=True)[:, :kept].to(x.device)  # kept, in order
        prefix = torch.arange(probe.num_prefix_tokens, device=x.device).expand(len(keep), -1)
        idx = torch.cat([prefix, idx + probe.num_prefix_tokens], 1).repeat_interleave(len(x), 0)
        h = probe.embed(xa)
        h = h.gather(1, idx[:, :, None].expand(-1, -1, h.shape[-1]))
        return probe.run(None, tokens=False, start=(0, h)).logits.unflatten(0, (len(keep), len(x)))

    def token_cells(self, keep: torch.Tensor) -> torch.Tensor:
        """bool (P, T): the patch tokens holding at least one retained pixel (row-major, as the token sequence)."""
        assert self.probe is not None
        return F.max_pool2d(keep[:, None].float(), self.probe.patch_size).flatten(1) > 0

    def token_groups(self, ablation: Ablation, h: int, w: int, per_call: int,
                     device: torch.device) -> list[tuple[torch.Tensor, int | None]]:
        """Every position of ``ablation`` as (positions, kept tokens) groups of at most ``per_call`` positions keeping
        as many tokens (kept is None when tokens are not dropped); masks are built on the CPU: no device read."""
        pos = ablation.positions(h, w)
        if self.probe is None:
            return [(p.to(device), None) for p in pos.split(per_call)]
        kept = torch.cat([self.token_cells(ablation.keep(p, h, w)).sum(1) for p in pos.split(1024)])
        return [(p.to(device), int(c)) for c in kept.unique().tolist() for p in pos[kept == c].split(per_call)]


def _cannot_drop(model: nn.Module) -> str | None:
    """Why ablated tokens cannot be dropped for ``model`` (None: they can)."""
    try:
        probe = ViTProbe(model, check=False)
    except RobustvitError:
        return f"{type(getattr(model, 'net', model)).__name__} is not a timm VisionTransformer the probe re-runs"
    if probe.arch != "vit":
        return (f"{type(probe.net).__name__} ties its blocks to the full token grid (relative position bias, rotary "
                "embedding or convolutions)")
    if not probe.patch_size or probe.grid_size is None:
        return "its patch grid is unknown"
    if getattr(probe.net, "dynamic_img_size", False):
        return "it resamples position embeddings per input size (dynamic_img_size)"
    return None


def ablation_counts(ablated: AblatedModel, x: torch.Tensor, ablation: Ablation, num_classes: int,
                    batch: int = 256, threshold: float | None = None) -> torch.Tensor:
    """Votes of the base classifier over every ablation position: long (N, K) on the device; each position votes for
    its argmax, or every class of softmax probability ≥ ``threshold``. ``batch``: images per forward."""
    n, _, h, w = x.shape
    counts = torch.zeros(n, num_classes, dtype=torch.long, device=x.device)
    per_call = max(1, batch // max(n, 1))
    for pos, kept in ablated.token_groups(ablation, h, w, per_call, x.device):
        logits = ablated(x, ablation.keep(pos, h, w), kept)                     # (P, N, K)
        if threshold is None:
            counts += F.one_hot(logits.argmax(-1), num_classes).sum(0)
        else:
            counts += (logits.float().softmax(-1) >= threshold).sum(0)
    return counts


def patch_certificate(counts: torch.Tensor, delta: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prediction, certified) from vote counts (N, K): the most voted class (ties: the smaller index), certified
    when its count exceeds the runner-up's by more than 2Δ (Levine & Feizi, Thm. 1)."""
    if counts.shape[1] > 1:
        top2 = counts.topk(2, dim=1, sorted=True).values
    else:
        top2 = torch.cat([counts, torch.zeros_like(counts)], 1)
    return counts.argmax(1), top2[:, 0] - top2[:, 1] > 2 * delta
