"""Stand-in models for the dense suites: they know the answer for the clean images (looked up by the image's
bytes) and nothing about any other image, so every expected number can be computed by hand."""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from robustvit.models import ModelSpec


def image_key(x: torch.Tensor) -> str:
    return hashlib.sha1((x.detach().cpu().float() * 255).round().to(torch.uint8).numpy().tobytes()).hexdigest()


class SegOracle(nn.Module):
    """Predicts the true mask of a clean image, all background (class 0) for any other image."""

    def __init__(self, dataset, n: int) -> None:
        super().__init__()
        idx = torch.arange(n)
        x, _ = dataset.get_batch(idx)
        self.k = dataset.num_classes
        self.table = {image_key(xi): m for xi, m in zip(x, dataset.get_masks(idx))}
        self.spec = ModelSpec("seg_oracle", num_classes=self.k, input_size=(3, x.shape[-2], x.shape[-1]))
        self.weights = {"pretrained": False, "source": "oracle"}
        self.seen: list[torch.Tensor] = []
        self._p = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        masks = torch.stack([self.table.get(image_key(xi), torch.zeros(x.shape[-2:], dtype=torch.long)) for xi in x])
        masks = masks.masked_fill(masks == 255, 0)              # ignored pixels: any prediction
        return nn.functional.one_hot(masks, self.k).permute(0, 3, 1, 2).float()


class DetOracle(nn.Module):
    """Returns the ground-truth boxes (score 1) of a clean image, nothing for any other image."""

    def __init__(self, dataset, n: int) -> None:
        super().__init__()
        idx = torch.arange(n)
        ims = list(dataset.get_batch(idx)[0])
        self.table = {image_key(im): t for im, t in zip(ims, dataset.get_targets(idx))}
        self.spec = ModelSpec("det_oracle", num_classes=dataset.num_classes, family="detector")
        self.weights = {"pretrained": False, "source": "oracle"}
        self._p = nn.Parameter(torch.zeros(1))

    def forward(self, images: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        out = []
        for im in images:
            t = self.table.get(image_key(im))
            if t is None:
                out.append({"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long),
                            "scores": torch.zeros(0)})
            else:
                out.append({"boxes": t["boxes"], "labels": t["labels"], "scores": torch.ones(len(t["labels"]))})
        return out
