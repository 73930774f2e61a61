"""torchvision detectors behind robustvit's contract (offline: random weights, no downloads)."""

import pytest
import torch

from robustvit.dense import create_detector, list_detectors
from robustvit.errors import RobustvitError
from robustvit.evaluate.suites.dense import evaluate_dense


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(0)
    det = create_detector("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=11, min_size=64, max_size=64,
                          box_score_thresh=0.0)
    return det


def test_detector_boxes_in_input_pixels(detector) -> None:
    ims = [torch.rand(3, 40, 64), torch.rand(3, 64, 48)]
    out = detector(ims)
    assert len(out) == 2 and detector.spec.architecture == "tv:fasterrcnn_mobilenet_v3_large_320_fpn"
    for o, im in zip(out, ims):
        h, w = im.shape[-2:]
        b = o["boxes"]
        assert len(b) > 0                            # score threshold 0: a random detector still proposes boxes
        assert (b[:, 0] >= 0).all() and (b[:, 2] <= w).all() and (b[:, 1] >= 0).all() and (b[:, 3] <= h).all()
        assert ((o["labels"] >= 1) & (o["labels"] <= 10)).all()        # 0 is the background class
    assert not detector.model.training


def test_detector_input_checks_and_names(detector) -> None:
    with pytest.raises(RobustvitError, match="float"):
        detector([torch.zeros(3, 8, 8, dtype=torch.uint8)])
    assert {"fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn"} <= set(list_detectors())
    with pytest.raises(RobustvitError, match="unknown detector"):
        create_detector("fasterrcnn_resnet51")


def test_detector_through_det_suites(detector) -> None:
    pytest.importorskip("pycocotools")
    r = evaluate_dense(detector, "synthshapes:test,count=4,boxes=1",
                       ["det_corruptions:corruptions=gaussian_noise:severities=3"], batch_size=4)
    res = r["det_corruptions:corruptions=gaussian_noise:severities=3"]
    assert res["num_images"] == 4 and 0.0 <= res["clean_map"] <= 1.0 and len(res["clean_stats"]) == 12
    assert set(res["map"]) == {"gaussian_noise"}
