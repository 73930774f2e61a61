"""seg_clean / seg_corruptions / det_clean / det_corruptions: values against hand computation with stand-in
models, masks and boxes untouched by corruptions, finalize's means and retention by hand."""

import pytest
import torch

from robustvit.data import create_dataset
from robustvit.evaluation.suites import EvalContext, create_suite
from robustvit.evaluation.suites import dense as dense_suites
from robustvit.evaluation.suites.dense import evaluate_dense


def _load_standins():
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("robustvit_dense_standins", Path(__file__).with_name("standins.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_standins = _load_standins()
SegOracle, DetOracle = _standins.SegOracle, _standins.DetOracle

SEG = "synthshapes:test,count=24,masks=1"


def _all_background_miou(masks: torch.Tensor) -> float:
    """mIoU of predicting background everywhere: IoU_bg = bg / all pixels, 0 for each shape class present."""
    present = masks.unique()
    return float((masks == 0).float().mean()) / len(present)


def test_seg_clean_oracle_is_perfect() -> None:
    ds = create_dataset(SEG)
    r = evaluate_dense(SegOracle(ds, 24), ds, ["seg_clean"], batch_size=10)["seg_clean"]
    assert r["clean_miou"] == pytest.approx(1.0) and r["clean_pixel_accuracy"] == pytest.approx(1.0)
    assert r["num_images"] == 24 and r["class_names"][0] == "background"
    present = set(ds.get_masks(torch.arange(24)).unique().tolist())
    assert [i for i, v in enumerate(r["clean_iou"]) if v is not None] == sorted(present)


def test_seg_corruptions_never_touch_the_mask(monkeypatch) -> None:
    ds = create_dataset(SEG)
    model = SegOracle(ds, 24)
    targets: list[torch.Tensor] = []
    real = dense_suites.confusion_matrix

    def spy(pred, target, k, *a, **kw):
        targets.append(target.clone())
        return real(pred, target, k, *a, **kw)

    monkeypatch.setattr(dense_suites, "confusion_matrix", spy)
    r = evaluate_dense(model, ds, ["seg_corruptions:corruptions=gaussian_noise+fog:severities=1+4"],
                       batch_size=24)["seg_corruptions:corruptions=gaussian_noise+fog:severities=1+4"]
    masks = ds.get_masks(torch.arange(24))
    # parts: clean, gaussian_noise/1 (noise only at severities 1-3), fog/1, fog/4 — each saw the same masks
    assert len(targets) == 4 and all(torch.equal(t, masks) for t in targets)
    clean_x = model.seen[0]
    assert all((x - clean_x).abs().mean() > 0.01 for x in model.seen[1:])     # the images did change
    assert r["miou"] == {"gaussian_noise": {"1": pytest.approx(_all_background_miou(masks))},
                         "fog": {"1": pytest.approx(_all_background_miou(masks)),
                                 "4": pytest.approx(_all_background_miou(masks))}}
    assert r["clean_miou"] == pytest.approx(1.0)
    assert r["retention"] == pytest.approx(_all_background_miou(masks))
    assert r["noise_severities"] == [1]


def _conf(rows: list[list[int]]) -> dict:
    flat = [v for row in rows for v in row]
    return {"n": 1, "confusion": {str(i): v for i, v in enumerate(flat) if v}}


def test_seg_finalize_by_hand() -> None:
    suite = create_suite("seg_corruptions:corruptions=gaussian_noise+fog")
    ctx = EvalContext(model=None, model_name="m", models={}, data_spec="x", dataset=None, num_classes=2,
                      device=torch.device("cpu"), seed=0)
    assert suite.parts(ctx) == ["clean"] + [f"gaussian_noise/{s}" for s in (1, 2, 3)] + [f"fog/{s}" for s in range(1, 6)]
    stats = {"clean": _conf([[3, 1], [0, 4]])}                            # IoU 3/4, 4/5 → 0.775
    for s in (1, 2, 3):
        stats[f"gaussian_noise/{s}"] = _conf([[2, 2], [0, 4]])            # IoU 2/4, 4/6
    stats["gaussian_noise/5"] = _conf([[0, 4], [4, 0]])                  # not a part: ignored
    for s in range(1, 6):
        stats[f"fog/{s}"] = _conf([[1, 3], [0, 4]] if s < 5 else [[4, 0], [0, 4]])   # IoU 1/4, 4/7; s5 perfect
    r = suite.finalize(ctx, stats)
    noise, fog = (0.5 + 4 / 6) / 2, (4 * (0.25 + 4 / 7) / 2 + 1.0) / 5
    assert r["clean_miou"] == pytest.approx(0.775)
    assert r["corruption_miou"] == {"gaussian_noise": pytest.approx(noise), "fog": pytest.approx(fog)}
    assert r["category_miou"] == {"noise": pytest.approx(noise), "weather": pytest.approx(fog)}
    assert r["mean_miou"] == pytest.approx((noise + fog) / 2)
    assert r["retention"] == pytest.approx((noise + fog) / 2 / 0.775)
    assert r["severity_miou"]["5"] == pytest.approx(1.0)                 # only fog has severity 5
    assert r["clean_pixel_accuracy"] == pytest.approx(7 / 8)


def test_det_suites_with_an_oracle_detector() -> None:
    pytest.importorskip("pycocotools")
    ds = create_dataset("synthshapes:test,count=12,boxes=1")
    keys = ["det_clean", "det_corruptions:corruptions=fog:severities=2"]
    r = evaluate_dense(DetOracle(ds, 12), ds, keys, batch_size=5)
    assert r["det_clean"]["clean_map"] == pytest.approx(1.0) and r["det_clean"]["num_images"] == 12
    c = r[keys[1]]
    assert c["clean_map"] == pytest.approx(1.0)
    assert c["map"] == {"fog": {"2": 0.0}} and c["retention"] == 0.0      # corrupted images: no detections


def test_seg_suite_refuses_a_classifier(tiny_vit) -> None:
    from robustvit.errors import RobustvitError

    with pytest.raises(RobustvitError, match="segmentation model"):
        evaluate_dense(tiny_vit, "synthshapes:test,count=4,masks=1,size=16", ["seg_clean"])


def test_seg_corruptions_from_a_stored_tree(tmp_path) -> None:
    import numpy as np
    from PIL import Image

    root = tmp_path / "cs"
    ids = np.zeros((8, 16), dtype=np.uint8)
    ids[:, :6] = 7                                           # road (train id 0)
    ids[2:6, 9:14] = 26                                      # car (train id 13); the rest unlabeled (255)
    for i, city in enumerate(("aachen", "bonn")):
        rgb = np.full((8, 16, 3), 40 * (i + 1), dtype=np.uint8)
        for sub, arr, suffix in (("leftImg8bit", rgb, "leftImg8bit"), ("gtFine", ids, "gtFine_labelIds")):
            p = root / sub / "val" / city / f"{city}_000000_000019_{suffix}.png"
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(arr).save(p)
        p = tmp_path / "c" / "fog" / "3" / city / f"{city}_000000_000019_leftImg8bit.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 16, 3), 250, dtype=np.uint8)).save(p)
    ds = create_dataset(f"cityscapes:{root}")
    key = f"seg_corruptions:source={tmp_path / 'c'}:severities=3"
    r = evaluate_dense(SegOracle(ds, 2), ds, [key], batch_size=2)[key]
    assert r["corruptions"] == ["fog"] and r["clean_miou"] == pytest.approx(1.0)
    # the stored images are unknown to the oracle: all "road" (class 0) → IoU_road = road / labelled pixels, car 0
    m = ds.get_masks(torch.arange(2))
    road = float((m == 0).sum()) / float((m != 255).sum())
    assert r["miou"]["fog"]["3"] == pytest.approx(road / 2)
