"""Cityscapes-C / COCO-C as published: imagecorruptions' parameters unscaled at the image's native resolution,
corrupted before any resize for the model; segmentation scored at the label's resolution (whole / slide);
FAN's 16 corruptions and its <corruption>_<severity>/ layout."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from robustvit.corruptions import corrupt, corruption_params
from robustvit.corruptions.params import BENCHMARK_CORRUPTIONS
from robustvit.data import create_dataset
from robustvit.evaluation.suites import create_suite
from robustvit.evaluation.suites import dense as dense_suites
from robustvit.evaluation.suites.dense import CITYSCAPES_C, evaluate_dense, slide_logits
from robustvit.models import ModelSpec

#: FAN's COCO-C / Cityscapes-C corruptions (its coco_c_test_all.sh).
FAN_16 = {"gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "defocus_blur", "glass_blur",
          "motion_blur", "gaussian_blur", "snow", "frost", "fog", "spatter", "brightness", "contrast", "saturate",
          "jpeg_compression"}


def _png(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


class SpyDetector(nn.Module):
    """Records the images it receives; detects nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.spec = ModelSpec("spy_detector", num_classes=2, family="detector")
        self.seen: list[torch.Tensor] = []
        self._p = nn.Parameter(torch.zeros(1))

    def forward(self, images):
        self.seen.extend(im.detach().clone() for im in images)
        return [{"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long), "scores": torch.zeros(0)}
                for _ in images]


class SpySegmenter(nn.Module):
    """Records its inputs; predicts class 0 everywhere at its (square) input size."""

    def __init__(self, size: int, k: int = 19) -> None:
        super().__init__()
        self.spec = ModelSpec("spy_segmenter", num_classes=k, input_size=(3, size, size))
        self.k, self.seen = k, []
        self._p = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        assert x.shape[-2:] == (self.spec.input_size[1], self.spec.input_size[2])
        self.seen.append(x.detach().clone())
        out = torch.zeros(x.shape[0], self.k, *x.shape[-2:])
        out[:, 0] = 1
        return out


def test_detection_corrupts_a_480x640_image_with_imagecorruptions_unscaled_radius(tmp_path, monkeypatch) -> None:
    pytest.importorskip("pycocotools")
    rng = np.random.default_rng(0)
    img = (rng.random((480, 640, 3)) * 255).astype(np.uint8)
    _png(tmp_path / "val2017" / "a.png", img)
    ann = {"images": [{"id": 1, "file_name": "a.png", "width": 640, "height": 480}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 50, 40], "area": 2000.0,
                            "iscrowd": 0}], "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_val2017.json").write_text(json.dumps(ann))
    calls = []
    real = dense_suites.corrupt

    def spy(x, name, severity, **kw):
        calls.append((tuple(x.shape[-2:]), name, severity, kw))
        return real(x, name, severity, **kw)

    monkeypatch.setattr(dense_suites, "corrupt", spy)
    model = SpyDetector()
    key = "det_corruptions:corruptions=defocus_blur:severities=3"
    r = evaluate_dense(model, f"coco:{tmp_path}", [key])[key]
    (shape, name, sev, kw), = calls
    assert shape == (480, 640) and (name, sev) == ("defocus_blur", 3)        # the native image
    used = corruption_params(name, sev, kw["preset"], size=shape if kw.get("size_scaling", True) else None)
    assert used.values["radius"] == 6.0 and used.values["alias"] == 0.5        # imagecorruptions' (6, 0.5), not 12.9
    clean = torch.from_numpy(img).permute(2, 0, 1).float().div(255)[None]
    assert torch.equal(model.seen[0], clean[0])
    assert torch.allclose(model.seen[1], corrupt(clean, "defocus_blur", 3, preset="imagenet", size_scaling=False)[0])
    assert r["size_scaling"] is False and r["corrupted_at"] == "native resolution" and r["preset"] == "imagenet"


def _cityscapes_native(root: Path) -> np.ndarray:
    """One 16×32 image whose road pixels (label id 7) are every 4th column starting at 1; the rest is car (26)."""
    ids = np.full((16, 32), 26, dtype=np.uint8)
    ids[:, 1::4] = 7
    rgb = (np.random.default_rng(1).random((16, 32, 3)) * 255).astype(np.uint8)
    _png(root / "leftImg8bit" / "val" / "aachen" / "aachen_000000_000019_leftImg8bit.png", rgb)
    _png(root / "gtFine" / "val" / "aachen" / "aachen_000000_000019_gtFine_labelIds.png", ids)
    return rgb


def test_cityscapes_is_corrupted_at_native_size_then_resized_and_scored_at_the_label_size(tmp_path) -> None:
    rgb = _cityscapes_native(tmp_path)
    model = SpySegmenter(8)
    key = "seg_corruptions:corruptions=defocus_blur:severities=1"
    r = evaluate_dense(model, f"cityscapes:{tmp_path}", [key])[key]
    native = torch.from_numpy(rgb).permute(2, 0, 1).float().div(255)[None]
    expect = F.interpolate(corrupt(native, "defocus_blur", 1, preset="imagenet", size_scaling=False), size=(8, 8),
                           mode="bilinear", align_corners=False, antialias=True)
    squashed_first = corrupt(F.interpolate(native, size=(8, 8), mode="bilinear", align_corners=False, antialias=True),
                             "defocus_blur", 1, preset="imagenet", size_scaling=False)
    assert torch.allclose(model.seen[1], expect, atol=1e-6)
    assert not torch.allclose(model.seen[1], squashed_first, atol=1e-3)
    # all-road prediction at the label's 16×32: a quarter of the pixels are road; an 8×8 nearest-resized label
    # would have no road column at all
    assert r["clean_pixel_accuracy"] == pytest.approx(0.25)
    assert r["pixel_accuracy"]["defocus_blur"]["1"] == pytest.approx(0.25)
    assert r["inference"] == "whole" and r["corruption_set"] == "custom"


def test_slide_inference_windows_cover_the_image_and_average() -> None:
    x = torch.rand(2, 3, 37, 53)
    out = slide_logits(lambda c: c * 2.0, x, (16, 16), (12, 12))      # each window returns its crop: mean = itself
    assert torch.allclose(out, 2 * x)
    seen = []
    slide_logits(lambda c: seen.append(tuple(c.shape[-2:])) or torch.zeros(2, 1, 16, 16), x, (16, 16), (12, 12))
    assert set(seen) == {(16, 16)} and len(seen) == 3 * 5               # ceil((37-16)/12)+1 × ceil((53-16)/12)+1


def test_seg_slide_records_its_stride_and_scores_at_native_size(tmp_path) -> None:
    _cityscapes_native(tmp_path)
    model = SpySegmenter(8)
    r = evaluate_dense(model, f"cityscapes:{tmp_path}", ["seg_clean:inference=slide"])["seg_clean:inference=slide"]
    assert r["inference"] == "slide" and r["stride"] == [6, 6] and r["clean_pixel_accuracy"] == pytest.approx(0.25)
    assert all(x.shape[-2:] == (8, 8) for x in model.seen) and len(model.seen) == 3   # 8×16 resized, 3 windows


def test_fan_corruption_sets() -> None:
    assert set(CITYSCAPES_C) == FAN_16 and len(CITYSCAPES_C) == 16
    det = create_suite("det_corruptions")
    assert det.names == list(CITYSCAPES_C) and det.corruption_set == "cityscapes_c"
    mich = create_suite("det_corruptions:corruptions=imagenet_c")
    assert mich.names == list(BENCHMARK_CORRUPTIONS) and len(mich.names) == 15 and mich.corruption_set == "imagenet_c"


def test_fan_layout_is_read(tmp_path) -> None:
    _cityscapes_native(tmp_path / "cs")
    rel = "aachen/aachen_000000_000019_leftImg8bit.png"
    _png(tmp_path / "c" / "fog_3" / rel, np.full((16, 32, 3), 250, dtype=np.uint8))
    _png(tmp_path / "c" / "fog_4" / rel, np.full((16, 32, 3), 200, dtype=np.uint8))
    model = SpySegmenter(8)
    key = f"seg_corruptions:source={tmp_path / 'c'}:severities=3+4"
    r = evaluate_dense(model, f"cityscapes:{tmp_path / 'cs'}", [key])[key]
    assert r["source_layout"] == "fan" and r["corruptions"] == ["fog"] and set(r["miou"]["fog"]) == {"3", "4"}
    assert float(model.seen[1].mean()) == pytest.approx(250 / 255, abs=1e-3)
    assert float(model.seen[2].mean()) == pytest.approx(200 / 255, abs=1e-3)
    assert r["preset"] is None and r["size_scaling"] is None                      # stored files: nothing applied
