"""mIoU / pixel accuracy against hand-computed confusion matrices and an independent per-class count; COCO mAP
(pycocotools) on hand-made detections whose AP is known."""

import pytest
import torch

from robustvit.metrics.dense import coco_box_map, confusion_matrix, segmentation_scores
from robustvit.errors import RobustvitError


def test_confusion_matrix_by_hand() -> None:
    target = torch.tensor([[0, 0, 1], [2, 255, 1], [0, 2, 255]])
    pred = torch.tensor([[0, 1, 1], [2, 0, 0], [0, 1, 2]])
    # rows = target, columns = prediction; the two 255 pixels are not counted
    want = torch.tensor([[2, 1, 0],
                         [1, 1, 0],
                         [0, 1, 1]])
    assert torch.equal(confusion_matrix(pred, target, 3), want)


def test_scores_by_hand_absent_class_excluded() -> None:
    conf = torch.tensor([[3, 1, 0, 0],    # class 0: TP 3, FN 1
                         [0, 2, 0, 0],    # class 1: TP 2, FP 1 + 1
                         [0, 1, 0, 0],    # class 2: in the targets, never predicted → IoU 0
                         [0, 0, 0, 0]])   # class 3: absent from targets and predictions → left out
    s = segmentation_scores(conf)
    assert s["iou"][:3] == pytest.approx([3 / 4, 2 / 4, 0.0])
    assert s["iou"][3] is None
    assert s["miou"] == pytest.approx((0.75 + 0.5 + 0.0) / 3)
    assert s["pixel_accuracy"] == pytest.approx(5 / 7)
    assert s["class_accuracy"][:3] == pytest.approx([0.75, 1.0, 0.0]) and s["class_accuracy"][3] is None
    assert s["mean_accuracy"] == pytest.approx(1.75 / 3)
    assert s["num_pixels"] == 7


def test_miou_matches_per_class_sets() -> None:
    g = torch.Generator().manual_seed(0)
    k = 5
    target = torch.randint(0, k - 1, (4, 9, 11), generator=g)          # class 4 never in the targets …
    target[torch.rand(target.shape, generator=g) < 0.1] = 255
    pred = torch.where(torch.rand(target.shape, generator=g) < 0.6, target.clamp_max(k - 1),
                       torch.randint(0, k, target.shape, generator=g))   # … but sometimes predicted
    pred[pred == 255] = 0
    valid = target != 255
    ious = []
    for c in range(k):
        inter = ((pred == c) & (target == c) & valid).sum().item()
        union = (((pred == c) | (target == c)) & valid).sum().item()
        if union:
            ious.append(inter / union)
    s = segmentation_scores(confusion_matrix(pred, target, k))
    assert s["miou"] == pytest.approx(sum(ious) / len(ious))
    assert s["iou"][4] == pytest.approx(0.0)            # predicted but never true: IoU 0, counted
    assert s["pixel_accuracy"] == pytest.approx(((pred == target) & valid).sum().item() / valid.sum().item())


def test_confusion_refuses_out_of_range_and_shape() -> None:
    with pytest.raises(RobustvitError, match="mask values"):
        confusion_matrix(torch.zeros(2, 2, dtype=torch.long), torch.full((2, 2), 3), 3)
    with pytest.raises(RobustvitError, match="shape"):
        confusion_matrix(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long), 3)


def _gt(boxes: list[list[float]], cat: int = 1) -> dict:
    return {"images": [{"id": 1, "width": 100, "height": 100}],
            "annotations": [{"id": i + 1, "image_id": 1, "category_id": cat, "bbox": b, "area": b[2] * b[3],
                             "iscrowd": 0} for i, b in enumerate(boxes)],
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}


def test_coco_map_perfect_detections() -> None:
    pytest.importorskip("pycocotools")
    boxes = [[10.0, 10.0, 30.0, 30.0], [50.0, 40.0, 40.0, 50.0]]
    dets = [{"image_id": 1, "category_id": 1, "bbox": b, "score": 0.9 - 0.1 * i} for i, b in enumerate(boxes)]
    r = coco_box_map(_gt(boxes), dets)
    assert r["map"] == pytest.approx(1.0) and r["map_50"] == pytest.approx(1.0) and r["map_75"] == pytest.approx(1.0)


def test_coco_map_known_precision_recall() -> None:
    """Scores 0.9 (hit), 0.8 (false positive), 0.7 (hit) on 2 boxes: precision 1 up to recall 0.5, then 2/3.
    COCO's 101-point interpolated AP = (51·1 + 50·2/3) / 101 at every IoU threshold."""
    pytest.importorskip("pycocotools")
    boxes = [[10.0, 10.0, 30.0, 30.0], [50.0, 40.0, 40.0, 50.0]]
    dets = [{"image_id": 1, "category_id": 1, "bbox": boxes[0], "score": 0.9},
            {"image_id": 1, "category_id": 1, "bbox": [0.0, 70.0, 20.0, 20.0], "score": 0.8},
            {"image_id": 1, "category_id": 1, "bbox": boxes[1], "score": 0.7}]
    r = coco_box_map(_gt(boxes), dets)
    ap = (51 + 50 * 2 / 3) / 101
    assert r["map"] == pytest.approx(ap) and r["map_50"] == pytest.approx(ap)
    assert r["mar_100"] == pytest.approx(1.0)
    # a box shifted to IoU 0.6 with its ground truth counts at IoU ≥ .5, .55, .6 only (3 of the 10 thresholds)
    shifted = [[10.0, 10.0, 30.0, 30.0 * 0.6]]
    r = coco_box_map(_gt([boxes[0]]), [{"image_id": 1, "category_id": 1, "bbox": shifted[0], "score": 0.9}])
    assert r["map_50"] == pytest.approx(1.0) and r["map_75"] == pytest.approx(0.0)
    assert r["map"] == pytest.approx(0.3)


def test_coco_map_no_detections_is_zero() -> None:
    pytest.importorskip("pycocotools")
    assert coco_box_map(_gt([[10.0, 10.0, 30.0, 30.0]]), [])["map"] == 0.0


def test_coco_map_without_pycocotools_refuses_in_one_line(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pycocotools", None)
    monkeypatch.setitem(sys.modules, "pycocotools.coco", None)
    with pytest.raises(RobustvitError, match=r"pip install 'robustvit\[dense\]'"):
        coco_box_map(_gt([[10.0, 10.0, 30.0, 30.0]]), [])
