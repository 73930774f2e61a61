"""The contract every registered data source keeps, checked over the whole registry on tiny trees written here:
float32 images (N, 3, H, W) in [0, 1], long labels in [0, num_classes), ``len`` equal to what a batch over
every index returns, items equal to the batch's rows, and the same data from two builds of the same spec.
A source whose data cannot be made offline (torchvision's CIFAR files, checked by their checksums) is skipped
with the reason unless it is on this machine already."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.data import create_dataset, list_sources
from robustvit.data.shift import imagenet_wnids, subset_wnids
from robustvit.errors import RobustvitError

RNG = np.random.default_rng(0)


def _png(path: Path, size: tuple[int, int] = (20, 18), arr: np.ndarray | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if arr is None:
        arr = RNG.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr).save(path)


def _folder(root: Path) -> str:
    for c in ("cat", "dog", "emu"):
        for i in range(2):
            _png(root / c / f"{i}.png")
    return str(root)


def _imagenet(root: Path) -> str:
    for j, w in enumerate(imagenet_wnids()):
        (root / w).mkdir(parents=True)
        if j in (0, 417, 999):
            _png(root / w / "a.png")
    return str(root)


def _npz(root: Path) -> str:
    root.mkdir(parents=True)
    x = RNG.integers(0, 256, (7, 12, 10, 3), dtype=np.uint8)
    np.savez(root / "d.npz", x=x, y=np.array([0, 1, 2, 3, 2, 1, 0]), classes=np.array(["a", "b", "c", "d"]))
    return str(root / "d.npz")


def _shift(name: str) -> Callable[[Path], str]:
    def build(root: Path) -> str:
        wnids = subset_wnids(name) if name in ("imagenet_r", "imagenet_a") else imagenet_wnids()
        folders = ["0", "7", "999"] if name == "imagenet_v2" else [wnids[0], wnids[5], wnids[-1]]
        for f in folders:
            _png(root / f / "a.jpg")
            _png(root / f / "b.png")
        return str(root)
    return build


def _imagenet_c(root: Path) -> str:
    for sev in (1, 3):
        for w in ("n01440764", "n01443537"):
            for i in range(2):
                _png(root / "fog" / str(sev) / w / f"{i}.png", (16, 16))
    return f"{root}:corruption=fog:severity=3"


def _cifar_c(root: Path) -> str:
    root.mkdir(parents=True)
    n = 4
    np.save(root / "fog.npy", RNG.integers(0, 256, (5 * n, 32, 32, 3), dtype=np.uint8))
    np.save(root / "labels.npy", np.tile(np.array([0, 3, 9, 1]), 5))
    return f"{root},corruption=fog,severity=2"


def _cityscapes(root: Path) -> str:
    ids = np.zeros((8, 16), dtype=np.uint8)
    ids[:, :8] = 7
    ids[2:6, 10:14] = 26
    for city, name in (("aachen", "aachen_000000_000019"), ("bonn", "bonn_000001_000019")):
        rgb = RNG.integers(0, 256, (8, 16, 3), dtype=np.uint8)
        _png(root / "leftImg8bit" / "val" / city / f"{name}_leftImg8bit.png", arr=rgb)
        _png(root / "gtFine" / "val" / city / f"{name}_gtFine_labelIds.png", arr=ids)
    return str(root)


def _ade20k(root: Path) -> str:
    ann = np.array([[0, 1, 2], [150, 1, 0]], dtype=np.uint8)
    for i in (1, 2):
        _png(root / "images" / "validation" / f"ADE_val_0000000{i}.jpg", arr=np.full((2, 3, 3), 90, dtype=np.uint8))
        _png(root / "annotations" / "validation" / f"ADE_val_0000000{i}.png", arr=ann)
    return str(root)


def _coco(root: Path) -> str:
    _png(root / "val2017" / "a.jpg", (30, 20))
    _png(root / "val2017" / "b.jpg", (10, 10))
    ann = {"images": [{"id": 7, "file_name": "b.jpg", "width": 10, "height": 10},
                      {"id": 3, "file_name": "a.jpg", "width": 30, "height": 20}],
           "annotations": [{"id": 1, "image_id": 3, "category_id": 18, "bbox": [1, 2, 10, 5], "area": 40.0,
                            "iscrowd": 0}],
           "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]}
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(ann))
    return f"{root}:size=12"


# source → variants: (argument and options built under tmp_path, the model's image size)
CASES: dict[str, list[tuple[Callable[[Path], str], int | None]]] = {
    "synthshapes": [(lambda p: "train:count=12:size=16", None), (lambda p: "test,count=10,size=16", None),
                    (lambda p: "cue_conflict:count=8:classes=4", 24), (lambda p: "test:count=6:masks=1:boxes=1", 16),
                    (lambda p: "count=5:seed=3:texture_correlation=1", 16)],
    "folder": [(_folder, None), (lambda p: _folder(p) + ":size=16:crop_pct=1", None), (_folder, 8)],
    "imagenet": [(lambda p: _imagenet(p) + ":size=16", None)],
    "npz": [(_npz, None)],
    "cifar10": [(lambda p: "test:download=0", None)],
    "cifar100": [(lambda p: "test:download=0", None)],
    "imagenet_r": [(_shift("imagenet_r"), 16)],
    "imagenet_a": [(lambda p: "root=" + _shift("imagenet_a")(p), 16)],
    "imagenet_sketch": [(_shift("imagenet_sketch"), 16)],
    "imagenet_v2": [(lambda p: _shift("imagenet_v2")(p) + ":crop_pct=1", 16)],
    "imagenet_c": [(_imagenet_c, None)],
    "cifar_c": [(_cifar_c, None)],
    "cityscapes": [(_cityscapes, None), (lambda p: _cityscapes(p) + ":size=4", None)],
    "ade20k": [(_ade20k, None)],
    "coco": [(_coco, None)],
}
PARAMS = [pytest.param(src, i, id=f"{src}-{i}") for src, variants in CASES.items() for i in range(len(variants))]
#: Sources downloaded by torchvision, whose files carry checksums: skipped unless already on this machine.
NEEDS_DOWNLOAD = {"cifar10", "cifar100"}


def test_every_registered_source_has_a_case():
    assert set(list_sources()) == set(CASES)


def _build(source: str, variant: int, tmp_path: Path):
    make, image_size = CASES[source][variant]
    spec = f"{source}:{make(tmp_path / 'data')}"
    try:
        a = create_dataset(spec, image_size=image_size)
    except RobustvitError as e:
        if source in NEEDS_DOWNLOAD:
            pytest.skip(f"{source} is not on this machine and tests do not download ({e})")
        raise
    return spec, image_size, a


@pytest.mark.parametrize("source,variant", PARAMS)
def test_source_contract(source, variant, tmp_path):
    spec, image_size, a = _build(source, variant, tmp_path)
    b = create_dataset(spec, image_size=image_size)
    n = len(a)
    assert n > 0 and len(b) == n and a.info()["num_images"] == n
    idx = torch.arange(n) if n <= 64 else torch.tensor([0, 1, n // 2, n - 2, n - 1])
    x, y = a.get_batch(idx)
    assert x.dtype == torch.float32 and x.ndim == 4 and x.shape[:2] == (len(idx), 3)
    assert torch.isfinite(x).all() and float(x.min()) >= 0 and float(x.max()) <= 1
    assert float(x.std()) > 0                                        # real pixels, not a constant fill
    if image_size is not None and source not in ("coco",):
        assert tuple(x.shape[-2:]) == (image_size, image_size)
    assert y.dtype == torch.long and y.shape == (len(idx),)
    assert bool(((y >= 0) & (y < a.num_classes)).all()), (y.tolist(), a.num_classes)
    x2, y2 = b.get_batch(idx)                                        # two builds of the same spec: the same data
    assert torch.equal(x, x2) and torch.equal(y, y2)
    for row, i in ((0, int(idx[0])), (len(idx) - 1, int(idx[-1]))):  # items are the batch's rows
        xi, yi = a[i]
        assert torch.allclose(xi, x[row], atol=1e-6) and yi == int(y[row])
    with pytest.raises((RobustvitError, IndexError)):
        a.get_batch(torch.tensor([n]))
    if getattr(a, "has_masks", False):                               # segmentation: class ids or 255 (ignore)
        m = a.get_masks(idx)
        assert m.dtype == torch.long and m.shape == (len(idx), *x.shape[-2:])
        assert bool((((m >= 0) & (m < a.num_classes)) | (m == 255)).all())


def test_synthshapes_seed_changes_the_images_and_labels_follow_the_spec():
    a = create_dataset("synthshapes:test:count=20:size=16:seed=1")
    b = create_dataset("synthshapes:test:count=20:size=16:seed=2")
    assert not torch.equal(a.get_batch(torch.arange(20))[0], b.get_batch(torch.arange(20))[0])
    four = create_dataset("synthshapes:train:count=40:size=16:classes=4")
    assert four.num_classes == 4 and set(four.get_batch(torch.arange(40))[1].tolist()) <= {0, 1, 2, 3}


def test_folder_labels_are_the_sorted_class_folders(tmp_path):
    root = tmp_path / "f"
    for c, colour in (("zebra", (0, 0, 255)), ("ant", (255, 0, 0))):
        _png(root / c / "x.png", arr=np.full((6, 6, 3), colour, dtype=np.uint8))
    ds = create_dataset(f"folder:{root}")
    x, y = ds.get_batch(torch.arange(2))
    assert ds.classes == ["ant", "zebra"] and y.tolist() == [0, 1]
    assert torch.allclose(x[0, 0], torch.ones(6, 6)) and torch.allclose(x[1, 2], torch.ones(6, 6))


def test_cifar_c_unit_is_the_severity_block(tmp_path):
    spec = f"cifar_c:{_cifar_c(tmp_path / 'c')}"
    ds = create_dataset(spec)
    rows = np.load(tmp_path / "c" / "fog.npy")[4:8]                  # severity 2 of 4 images per severity
    x, y = ds.get_batch(torch.arange(4))
    assert torch.equal(x, torch.from_numpy(rows).permute(0, 3, 1, 2).float() / 255) and y.tolist() == [0, 3, 9, 1]
