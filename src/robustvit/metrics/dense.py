"""Dense-prediction metrics: the segmentation confusion matrix, IoU / mIoU / pixel accuracy (as mmseg computes
them), and COCO box mAP through ``pycocotools`` (the reference implementation of the COCO benchmark).

mIoU follows mmsegmentation (``mmseg.evaluation.metrics.IoUMetric``): one confusion matrix summed over the whole
data set (not per image), IoU_c = TP_c / (TP_c + FP_c + FN_c); a class absent from both the predictions and the
targets has no IoU and is left out of the mean; pixels labelled ``ignore_index`` (255) are not counted.

>>> pred = torch.tensor([[0, 1], [1, 1]]); target = torch.tensor([[0, 1], [0, 255]])
>>> segmentation_scores(confusion_matrix(pred, target, 3))["miou"]
0.5
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch

from robustvit.errors import RobustvitError

IGNORE_INDEX = 255


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int,
                     ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """(K, K) long matrix, row = target class, column = predicted class, over the pixels whose target is not
    ``ignore_index``. ``pred``/``target``: integer tensors of the same shape (any), on any device."""
    if pred.shape != target.shape:
        raise RobustvitError(f"prediction {tuple(pred.shape)} and mask {tuple(target.shape)} differ in shape; "
                             "predict at the mask's resolution")
    keep = target != ignore_index
    t, p = target[keep].long(), pred[keep].long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise RobustvitError(f"mask values must lie in [0, {num_classes - 1}] or be {ignore_index} (ignored), got "
                             f"[{int(t.min())}, {int(t.max())}]; does the model have the data's classes?")
    return torch.bincount(t * num_classes + p, minlength=num_classes * num_classes).view(num_classes, num_classes)


def segmentation_scores(conf: torch.Tensor | list[list[int]]) -> dict[str, Any]:
    """From a confusion matrix: ``iou`` / ``class_accuracy`` per class (None where undefined), ``miou`` (mean
    over classes present in the targets or the predictions), ``pixel_accuracy`` (mmseg's aAcc),
    ``mean_accuracy`` (mmseg's mAcc, over classes present in the targets), ``num_pixels``."""
    c = torch.as_tensor(conf, dtype=torch.float64)
    tp, gt, pr = c.diag(), c.sum(1), c.sum(0)
    union = gt + pr - tp
    iou = [None if u == 0 else float(t / u) for t, u in zip(tp.tolist(), union.tolist())]
    acc = [None if g == 0 else float(t / g) for t, g in zip(tp.tolist(), gt.tolist())]
    total = float(c.sum())
    defined = [v for v in iou if v is not None]
    accs = [v for v in acc if v is not None]
    return {"miou": sum(defined) / len(defined) if defined else None,
            "pixel_accuracy": float(tp.sum()) / total if total else None,
            "mean_accuracy": sum(accs) / len(accs) if accs else None,
            "iou": iou, "class_accuracy": acc, "num_pixels": int(total)}


def coco_box_map(ground_truth: dict[str, Any], detections: list[dict[str, Any]]) -> dict[str, Any]:
    """COCO box AP with ``pycocotools.cocoeval.COCOeval`` (Lin et al. 2014, arXiv:1405.0312).

    ``ground_truth``: a COCO dict (``images``, ``annotations`` with ``bbox`` [x, y, w, h], ``area``,
    ``iscrowd``; ``categories``); ``detections``: ``{"image_id", "category_id", "bbox": [x, y, w, h],
    "score"}``. Returns ``map`` (AP@[.50:.95]), ``map_50``, ``map_75``, ``map_small``/``medium``/``large``,
    ``mar_1``/``mar_10``/``mar_100`` — None where COCOeval has no ground truth (its −1) — and ``stats``."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise RobustvitError("COCO mAP needs pycocotools; pip install 'robustvit[dense]' (or pycocotools)") from None
    keys = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
            "mar_small", "mar_medium", "mar_large")
    gt = {"info": {}, "licenses": [], **ground_truth}
    if not gt["annotations"]:
        return {**{k: None for k in keys}, "stats": None, "num_detections": len(detections)}
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        if not detections:
            stats = [0.0] * len(keys)
            return {**dict(zip(keys, stats)), "stats": stats, "num_detections": 0}
        coco_dt = coco_gt.loadRes([dict(d) for d in detections])
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        ev.params.imgIds = sorted(int(i["id"]) for i in gt["images"])
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    stats = [float(v) for v in ev.stats]
    return {**{k: (None if v < 0 else v) for k, v in zip(keys, stats)}, "stats": stats,
            "num_detections": len(detections)}


__all__ = ["IGNORE_INDEX", "coco_box_map", "confusion_matrix", "segmentation_scores"]
