"""Suite ``clean``: top-1 and top-5 accuracy on unmodified images (images with non-finite logits count wrong)."""

from __future__ import annotations

from typing import Any

import torch

from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, nonfinite_result, register_suite
from robustvit.metrics.accuracy import nonfinite_rows, topk_hits


@register_suite
class Clean(Suite):
    name = "clean"
    description = "top-1 / top-5 accuracy on clean images"
    low_precision = True

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        logits = ctx.model(batch.x)
        c1, c5 = topk_hits(logits, batch.y, (1, 5))     # device tensors: the run engine reads them one unit late
        return {"n": int(batch.y.numel()), "top1": c1, "top5": c5, "nonfinite": nonfinite_rows(logits).sum()}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        s = stats["all"]
        n = max(s["n"], 1)
        return {"top1": s["top1"] / n, "top5": s["top5"] / n, "num_images": s["n"],
                **nonfinite_result(self.key, s.get("nonfinite", 0))}
