"""``Normalized``: the wrapper that makes any classifier take [0, 1] images."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.spec import ModelSpec


class Normalized(nn.Module):
    """Applies ``(x − mean) / std`` then the wrapped network; ``spec`` describes the model.

    Input: float (N, 3, H, W) in [0, 1] (the range is not checked here — that would synchronise the
    device on every call; data loaders and attacks check it). Output: logits (N, num_classes).
    """

    def __init__(self, model: nn.Module, spec: ModelSpec) -> None:
        super().__init__()
        self.model = model
        self.spec = spec
        #: where the weights came from: {"pretrained": bool, "source": "random" | "timm:NAME" | "file:PATH" |
        #: "checkpoint:DIR", "sha256": … (files)}; set by ``create_model``
        self.weights: dict[str, Any] = {"pretrained": False, "source": "unknown"}
        self.register_buffer("mean", torch.tensor(spec.mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(spec.std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise RobustvitError(f"model input must have shape (N, 3, H, W), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise RobustvitError(f"model input must be float in [0, 1], got dtype {x.dtype}; use x.float() / 255")
        return self.model((x - self.mean.to(x.dtype)) / self.std.to(x.dtype))

    @property
    def net(self) -> nn.Module:
        """The wrapped network (a timm model for timm architectures)."""
        return self.model
