"""Metrics: accuracy and robustness scores."""

from robustvit.metrics.accuracy import accuracy, topk_correct

__all__ = ["accuracy", "topk_correct"]
