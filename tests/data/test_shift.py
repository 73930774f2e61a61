import pytest
from PIL import Image

from robustvit.data import create_dataset
from robustvit.data.shift import (imagenet_wnids, load_shift_dataset, subset_indices, subset_wnids)
from robustvit.errors import RobustvitError


def png(path, color=(10, 20, 30), size=(20, 18)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)


def test_class_lists_match_the_official_scripts():
    w = imagenet_wnids()
    assert len(w) == 1000 == len(set(w)) and list(w) == sorted(w) and w[0] == "n01440764" and w[-1] == "n15075141"
    r, a = subset_wnids("imagenet_r"), subset_wnids("imagenet_a")
    assert len(r) == len(a) == 200 and list(r) == sorted(r) and list(a) == sorted(a)
    assert set(r) <= set(w) and set(a) <= set(w) and len(set(r) & set(a)) == 86
    # hendrycks/imagenet-r eval.py (commented imagenet_r_indices) and natural-adv-examples (indices_in_1k)
    assert subset_indices("imagenet_r")[:10] == [1, 2, 4, 6, 8, 9, 11, 13, 22, 23]
    assert subset_indices("imagenet_a")[:5] == [6, 11, 13, 15, 17]
    assert subset_indices("imagenet_a")[-1] == 988


def test_imagenet_r_labels_index_the_200_classes(tmp_path):
    r = subset_wnids("imagenet_r")
    for j in (0, 5, 199):
        png(tmp_path / r[j] / "a.png"), png(tmp_path / r[j] / "b.jpg")
    ds = load_shift_dataset("imagenet_r", tmp_path, image_size=16)
    assert len(ds) == 6 and ds.num_classes == 200 and sorted({y for _, y in ds.samples}) == [0, 5, 199]
    assert ds.shift.logit_indices == subset_indices("imagenet_r") and ds.shift.num_found_classes == 3
    x, y = ds[0]
    assert x.shape == (3, 16, 16) and y == 0 and abs(x[0].mean().item() - 10 / 255) < 1e-6
    # as a run's --data, labels are ImageNet-1k indices (generic suites then score a 1000-way argmax)
    full = create_dataset(f"imagenet_r:{tmp_path}", image_size=16)
    ind = subset_indices("imagenet_r")
    assert full.num_classes == 1000 and sorted({y for _, y in full.samples}) == [ind[0], ind[5], ind[199]]


def test_imagenet_v2_labels_are_folder_integers(tmp_path):
    for c in ("2", "10", "999"):
        png(tmp_path / c / "x.jpeg")
    ds = load_shift_dataset("imagenet_v2", tmp_path, image_size=8)
    assert sorted(y for _, y in ds.samples) == [2, 10, 999] and ds.num_classes == 1000
    assert {p.split("/")[-2]: y for p, y in ds.samples} == {"2": 2, "10": 10, "999": 999}
    assert ds.shift.logit_indices is None


def test_sketch_accepts_the_sketch_subfolder_and_env_root(tmp_path, monkeypatch):
    w = imagenet_wnids()
    png(tmp_path / "imagenet-sketch" / "sketch" / w[7] / "s.png")
    monkeypatch.setenv("ROBUSTVIT_DATA", str(tmp_path))
    ds = create_dataset("imagenet_sketch:", image_size=8)
    assert [y for _, y in ds.samples] == [7] and ds.num_classes == 1000


def test_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("ROBUSTVIT_DATA", raising=False)
    with pytest.raises(RobustvitError, match="does not exist"):
        create_dataset(f"imagenet_a:{tmp_path / 'nope'}")
    with pytest.raises(RobustvitError, match="ROBUSTVIT_DATA"):
        create_dataset("imagenet_a:")
    png(tmp_path / "n99999999" / "a.png")
    with pytest.raises(RobustvitError, match="not one of its 200 wnids"):
        create_dataset(f"imagenet_a:{tmp_path}")
    png(tmp_path / "v2" / "cat" / "a.png")
    with pytest.raises(RobustvitError, match="0..999"):
        load_shift_dataset("imagenet_v2", tmp_path / "v2")
    (tmp_path / "r" / subset_wnids("imagenet_r")[0]).mkdir(parents=True)
    (tmp_path / "r" / subset_wnids("imagenet_r")[0] / "notes.txt").write_text("x")
    with pytest.raises(RobustvitError, match="no images"):
        load_shift_dataset("imagenet_r", tmp_path / "r")
