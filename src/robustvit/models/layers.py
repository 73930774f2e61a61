"""Attention arithmetic shared by robustvit's own blocks (FAN) and the ViT probe, which re-runs timm's."""

from __future__ import annotations

import torch


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over keys of the attention logits with a bool (True = may attend) or additive mask."""
    if mask is not None:
        mask = mask.to(logits.device)
        if mask.dtype == torch.bool:
            logits = logits.masked_fill(~mask, float("-inf"))
        else:
            logits = logits + mask.to(logits.dtype)
    return logits.softmax(dim=-1)
