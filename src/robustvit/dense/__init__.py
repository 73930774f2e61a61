"""Dense prediction under corruption: semantic segmentation (a light head on any timm backbone, training, mIoU)
and object detection (torchvision detectors, COCO box mAP through pycocotools), gathered from their layers: the
networks in ``robustvit.models`` (``segmenter``, registered with timm; ``detection``), the metrics in
``robustvit.metrics.dense``, the readers in ``robustvit.data.dense``, training in ``robustvit.training.tasks``
(``robustvit train --task segment``), the suites ``seg_clean``, ``seg_corruptions``, ``det_clean``,
``det_corruptions`` in ``robustvit.evaluation.suites.dense``. See docs/dense.md.
"""

from robustvit.data.dense import coco_ground_truth
from robustvit.metrics.dense import IGNORE_INDEX, coco_box_map, confusion_matrix, segmentation_scores
from robustvit.models.detection import Detector, create_detector, list_detectors
from robustvit.models.segmenter import SegmentationNet, create_segmenter, is_segmenter
from robustvit.training.trainer import evaluate_segmentation, train_segmenter

__all__ = ["Detector", "IGNORE_INDEX", "SegmentationNet", "coco_box_map", "coco_ground_truth", "confusion_matrix",
           "create_detector", "create_segmenter", "evaluate_segmentation", "is_segmenter", "list_detectors",
           "segmentation_scores", "train_segmenter"]
