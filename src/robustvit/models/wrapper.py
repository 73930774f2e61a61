"""``Normalized``: the wrapper that makes any classifier take [0, 1] images."""

from __future__ import annotations

from dataclasses import replace
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
        self.register_buffer("class_index", None, persistent=False)    # set by map_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise RobustvitError(f"model input must have shape (N, 3, H, W), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise RobustvitError(f"model input must be float in [0, 1], got dtype {x.dtype}; use x.float() / 255")
        logits = self.model((x - self.mean.to(x.dtype)) / self.std.to(x.dtype))
        if self.class_index is not None:            # a class map: the best logit of each data class's model classes
            logits = logits[:, self.class_index].amax(-1)
        return logits

    def map_classes(self, groups: list[list[int]], names: list[str] | None = None) -> None:
        """Score data class i by the largest logit among the model classes ``groups[i]`` — e.g. a 1000-class
        ImageNet model on a 10-class data set; ``spec.num_classes`` becomes ``len(groups)``."""
        n = self.spec.num_classes
        if not groups or any(not g or not all(0 <= int(c) < n for c in g) for g in groups):
            raise RobustvitError(f"a class map needs, for every data class, model class indices in 0-{n - 1}")
        width = max(len(g) for g in groups)
        index = torch.tensor([[int(c) for c in g] + [int(g[0])] * (width - len(g)) for g in groups])   # pad: max unchanged
        self.class_index = index.to(self.mean.device)
        self.spec = replace(self.spec, num_classes=len(groups), class_names=names)

    @property
    def net(self) -> nn.Module:
        """The wrapped network (a timm model for timm architectures)."""
        return self.model
