"""torchvision detectors behind robustvit's contract (offline: random weights, no downloads)."""

import pytest
import torch

from robustvit.dense import create_detector, list_detectors
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.dense import evaluate_dense


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


def test_eval_cli_builds_a_torchvision_detector(tmp_path) -> None:
    """`robustvit eval --model tv:NAME` evaluates a torchvision detector (random weights: the data's class
    count, labelled not comparable) with the numbers of ``evaluate_dense`` on the same model."""
    pytest.importorskip("pycocotools")
    from robustvit.evaluation.runner import EvalConfig, run_eval

    name, data = "fasterrcnn_mobilenet_v3_large_320_fpn", "synthshapes:test,count=2,boxes=1"
    torch.manual_seed(0)
    res = run_eval(EvalConfig(models=[f"tv:{name}"], data=data, suites=["det_clean"], out=str(tmp_path),
                              progress=False))[f"tv:{name}"]
    assert res["comparable"] is False and any("random weights" in n for n in res["notes"])
    torch.manual_seed(0)
    det = create_detector(name, num_classes=11)
    assert det.spec.num_classes == 11
    direct = evaluate_dense(det, data, ["det_clean"], batch_size=128)["det_clean"]
    assert res["suites"]["det_clean"]["clean_stats"] == direct["clean_stats"]
    with pytest.raises(RobustvitError, match="--weights"):
        run_eval(EvalConfig(models=[f"tv:{name}"], data=data, suites=["det_clean"], out=str(tmp_path / "w"),
                            weights="x.pth", progress=False))
