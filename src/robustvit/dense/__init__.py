"""Dense prediction under corruption: semantic segmentation (a light head on any timm backbone, training,
mIoU) and object detection (torchvision detectors, COCO mAP through pycocotools).

Importing this package registers the ``segmentation_net`` architecture with timm, so segmentation checkpoint
folders load with ``robustvit.models.create_model``. Suites: ``seg_clean``, ``seg_corruptions``, ``det_clean``,
``det_corruptions`` (``robustvit.evaluate.suites.dense``). See docs/dense.md.
"""

from robustvit.dense.detection import Detector, create_detector, list_detectors
from robustvit.dense.metrics import IGNORE_INDEX, coco_box_map, confusion_matrix, segmentation_scores
from robustvit.dense.segmenter import SegmentationNet, create_segmenter, is_segmenter
from robustvit.dense.train import evaluate_segmentation, train_segmenter

__all__ = ["Detector", "IGNORE_INDEX", "SegmentationNet", "coco_box_map", "confusion_matrix", "create_detector",
           "create_segmenter", "evaluate_segmentation", "is_segmenter", "list_detectors", "segmentation_scores",
           "train_segmenter"]
