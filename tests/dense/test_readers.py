"""Cityscapes / ADE20K / COCO layouts and stored corruptions, on tiny trees written here."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.data import create_dataset
from robustvit.data.dense import StoredCorruptions, coco_ground_truth
from robustvit.errors import RobustvitError


def _png(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def _cityscapes(root: Path) -> np.ndarray:
    ids = np.zeros((8, 16), dtype=np.uint8)          # label ids: 7 road → 0, 26 car → 13, 0 unlabeled → 255
    ids[:, :8] = 7
    ids[2:6, 10:14] = 26
    rgb = np.zeros((8, 16, 3), dtype=np.uint8)
    rgb[..., 0] = np.arange(16, dtype=np.uint8)[None] * 16
    for city, name in (("aachen", "aachen_000000_000019"), ("bonn", "bonn_000001_000019")):
        _png(root / "leftImg8bit" / "val" / city / f"{name}_leftImg8bit.png", rgb)
        _png(root / "gtFine" / "val" / city / f"{name}_gtFine_labelIds.png", ids)
    return ids


def test_cityscapes_train_ids_and_nearest_resize(tmp_path: Path) -> None:
    _cityscapes(tmp_path)
    ds = create_dataset(f"cityscapes:{tmp_path}")
    assert len(ds) == 2 and ds.num_classes == 19 and ds.classes[13] == "car"
    m = ds.get_masks(torch.tensor([0, 1]))
    assert m.shape == (2, 8, 16)
    assert (m[0, :, :8] == 0).all() and (m[0, 2:6, 10:14] == 13).all() and (m[0, 0, 8:] == 255).all()
    x, _ = ds.get_batch(torch.tensor([0]))
    assert x.shape == (1, 3, 8, 16) and x[0, 0, 0, 1] == pytest.approx(16 / 255)
    small = create_dataset(f"cityscapes:{tmp_path},size=4")           # nearest: only existing label values
    ms = small.get_masks(torch.tensor([0]))
    assert ms.shape == (1, 4, 4) and set(ms.unique().tolist()) <= {0, 13, 255}
    assert small.get_batch(torch.tensor([0]))[0].shape == (1, 3, 4, 4)


def test_ade20k_reduce_zero_label(tmp_path: Path) -> None:
    ann = np.array([[0, 1, 2], [150, 1, 0]], dtype=np.uint8)
    _png(tmp_path / "images" / "validation" / "ADE_val_00000001.jpg", np.full((2, 3, 3), 90, dtype=np.uint8))
    _png(tmp_path / "annotations" / "validation" / "ADE_val_00000001.png", ann)
    (tmp_path / "objectInfo150.txt").write_text("Idx\tRatio\tTrain\tVal\tName\n" + "".join(
        f"{i}\t0.1\t1\t1\t{'wall' if i == 1 else f'thing{i}, other'}\n" for i in range(1, 151)))
    ds = create_dataset(f"ade20k:{tmp_path}")
    assert ds.num_classes == 150 and ds.classes[0] == "wall" and ds.classes[2] == "thing3"
    assert ds.get_masks(torch.tensor([0]))[0].tolist() == [[255, 0, 1], [149, 0, 255]]


def test_layout_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RobustvitError, match="leftImg8bit"):
        create_dataset(f"cityscapes:{tmp_path}")
    with pytest.raises(RobustvitError, match="instances_val2017.json"):
        create_dataset(f"coco:{tmp_path}")


def test_stored_corruptions_lookup(tmp_path: Path) -> None:
    _cityscapes(tmp_path / "cs")
    ds = create_dataset(f"cityscapes:{tmp_path / 'cs'}")
    rel = ds.relpaths[0]
    assert rel == "aachen/aachen_000000_000019_leftImg8bit.png"
    target = tmp_path / "c" / "fog" / "2" / Path(rel).with_suffix(".jpg")
    _png(target, np.full((8, 16, 3), 200, dtype=np.uint8))
    src = StoredCorruptions(tmp_path / "c")
    assert src.corruptions == ["fog"] and src.path("fog", 2, rel) == target      # another extension is found
    im = src.images("fog", 2, [rel], 4)[0]
    assert im.shape == (3, 4, 4) and abs(float(im.mean()) - 200 / 255) < 0.03
    with pytest.raises(RobustvitError, match="no fog/3"):
        src.check("fog", 3)


def test_coco_layout_targets_and_ground_truth(tmp_path: Path) -> None:
    _png(tmp_path / "val2017" / "a.jpg", np.zeros((20, 30, 3), dtype=np.uint8))
    _png(tmp_path / "val2017" / "b.jpg", np.zeros((10, 10, 3), dtype=np.uint8))
    ann = {"images": [{"id": 7, "file_name": "b.jpg", "width": 10, "height": 10},
                      {"id": 3, "file_name": "a.jpg", "width": 30, "height": 20}],
           "annotations": [{"id": 1, "image_id": 3, "category_id": 18, "bbox": [1, 2, 10, 5], "area": 40.0, "iscrowd": 0},
                           {"id": 2, "image_id": 3, "category_id": 1, "bbox": [0, 0, 4, 4], "area": 16.0, "iscrowd": 1},
                           {"id": 3, "image_id": 7, "category_id": 1, "bbox": [2, 2, 3, 3], "area": 9.0, "iscrowd": 0}],
           "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]}
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_val2017.json").write_text(json.dumps(ann))
    ds = create_dataset(f"coco:{tmp_path}")
    assert len(ds) == 2 and ds.num_classes == 19 and ds.classes[18] == "dog" and ds.classes[2] == "N/A"
    assert ds.image_ids(torch.tensor([0, 1])) == [3, 7]                 # sorted by image id
    t = ds.get_targets(torch.tensor([0]))[0]                            # crowd boxes are not targets
    assert t["boxes"].tolist() == [[1.0, 2.0, 11.0, 7.0]] and t["labels"].tolist() == [18]
    ims = ds.get_images(torch.tensor([0, 1]))
    assert [tuple(i.shape) for i in ims] == [(3, 20, 30), (3, 10, 10)]
    gt = coco_ground_truth(ds, torch.tensor([0]))
    assert [a["id"] for a in gt["annotations"]] == [1, 2] and gt["images"] == [{"id": 3, "height": 20, "width": 30}]
