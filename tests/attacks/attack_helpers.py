"""Helpers several attack test files share (imported by name: pytest puts this folder on the path)."""

from __future__ import annotations

import torch
from torch import nn


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


class Binary(nn.Module):
    """Two classes: logits (u·x + b, 0), so the decision boundary is the hyperplane u·x + b = 0 (the exact minimal
    distance to it is known in every norm)."""

    def __init__(self, u: torch.Tensor, b: float) -> None:
        super().__init__()
        self.u, self.b = nn.Parameter(u.flatten(), requires_grad=False), b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.flatten(1) @ self.u + self.b
        return torch.stack((m, torch.zeros_like(m)), 1)
