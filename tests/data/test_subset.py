"""Subsets (robustvit.data.subset): seeded class-stratified samples, the first N, published lists."""

import json

import numpy as np
import pytest
import torch

from robustvit.data.base import FileImageDataset, TensorImageDataset
from robustvit.data.subset import (SubsetDataset, dataset_labels, load_subset_file, make_subset, select_subset,
                                   subset_order)
from robustvit.errors import RobustvitError
from robustvit.protocols import subset_note

SORTED = torch.arange(1000) // 50          # 20 classes of 50 images, sorted by class (like folder: data)


def test_stratified_covers_every_class_equally():
    for n in (20, 40, 100, 333):
        idx = select_subset(SORTED, n, "stratified", seed=0)
        counts = torch.bincount(SORTED[idx], minlength=20)
        assert len(idx) == n and counts.sum() == n
        assert int(counts.max() - counts.min()) <= 1, (n, counts)      # as equal as possible
        assert torch.equal(idx, idx.sort().values) and len(idx.unique()) == n


def test_fewer_images_than_classes_gives_distinct_random_classes():
    picks = [set(SORTED[select_subset(SORTED, 7, "stratified", seed=s)].tolist()) for s in range(5)]
    assert all(len(p) == 7 for p in picks)               # 7 distinct classes, one image each
    assert len({frozenset(p) for p in picks}) > 1         # which classes depends on the seed


def test_imbalanced_classes_in_proportion():
    labels = torch.cat([torch.full((n,), k) for k, n in enumerate([100, 300, 600, 7])])
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
    labels = labels[perm]                                 # not sorted: the draw must not depend on the order
    for n in (50, 101, 500):
        counts = torch.bincount(labels[select_subset(labels, n, "stratified", seed=3)], minlength=4).double()
        expect = n * torch.tensor([100, 300, 600, 7]).double() / len(labels)
        assert (counts - expect).abs().max() <= 1.0, (n, counts, expect)


def test_within_class_draw_is_random_not_a_prefix():
    idx = select_subset(SORTED, 40, "stratified", seed=0)
    within = idx % 50                                     # position inside each class folder
    assert within.float().mean() > 10                     # a prefix per class would give 0 and 1 only
    assert len(within.unique()) > 10


def test_same_seed_same_subset_and_draws_nest():
    a, b = select_subset(SORTED, 60, seed=5), select_subset(SORTED, 60, seed=5)
    assert torch.equal(a, b)
    assert not torch.equal(a, select_subset(SORTED, 60, seed=6))
    small = select_subset(SORTED, 25, seed=5)
    assert set(small.tolist()) <= set(a.tolist())         # a smaller draw lies inside a larger one
    order = subset_order(SORTED, seed=5)
    assert sorted(order.tolist()) == list(range(1000))


def test_seeded_draw_is_pinned():
    """numpy's PCG64 stream: the same subset on any machine (a change here changes every stratified run)."""
    labels = torch.arange(20) // 5
    assert select_subset(labels, 4, "stratified", seed=0).tolist() == \
        select_subset(labels.numpy(), 4, "stratified", seed=0).tolist()
    rng = np.random.default_rng(0)
    within, offset = rng.random(20), rng.random(4)
    j = np.empty(20)
    for k in range(4):                                    # the documented key, computed by hand
        members = np.arange(5 * k, 5 * k + 5)
        j[members[np.argsort(within[members], kind="stable")]] = np.arange(5)
    key = (j + offset[np.arange(20) // 5]) / 5
    assert select_subset(labels, 4, "stratified", seed=0).tolist() == sorted(np.argsort(key, kind="stable")[:4].tolist())


def test_first_is_the_prefix_and_bad_sizes():
    assert select_subset(SORTED, 5, "first").tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(RobustvitError, match="larger than the data set"):
        select_subset(SORTED, 1001)
    with pytest.raises(RobustvitError, match="unknown subset method"):
        select_subset(SORTED, 5, "random")


def test_file_dataset_labels_without_decoding(tmp_path):
    ds = FileImageDataset([(str(tmp_path / f"missing{i}.png"), i % 3) for i in range(9)], ["a", "b", "c"])
    assert dataset_labels(ds).tolist() == [i % 3 for i in range(9)]       # the files do not even exist
    sub = SubsetDataset(ds, torch.tensor([4, 1]))
    assert dataset_labels(sub).tolist() == [1, 1] and sub.samples == [ds.samples[4], ds.samples[1]]


def test_subset_dataset_keeps_its_order():
    x = torch.arange(6, dtype=torch.uint8).view(6, 1, 1, 1).expand(6, 3, 2, 2).contiguous()
    ds = TensorImageDataset(x, torch.tensor([0, 1, 0, 1, 0, 1]), ["a", "b"])
    view = SubsetDataset(ds, torch.tensor([5, 0, 3]))
    xb, yb = view.get_batch(torch.tensor([0, 1, 2]))
    assert (xb[:, 0, 0, 0] * 255).round().long().tolist() == [5, 0, 3] and yb.tolist() == [1, 0, 1]


def _folder(tmp_path):
    root = tmp_path / "val"
    samples = []
    for c, wnid in enumerate(["n01", "n02"]):
        for k in range(3):
            samples.append((str(root / wnid / f"ILSVRC2012_val_{c * 3 + k:08d}.JPEG"), c))
    return FileImageDataset(samples, ["n01", "n02"], f"imagenet:{root}"), root


def test_subset_file_paths_indices_json(tmp_path):
    ds, root = _folder(tmp_path)
    f = tmp_path / "ids.txt"
    f.write_text("n02/ILSVRC2012_val_00000004.JPEG\n# comment\nn01/ILSVRC2012_val_00000001.JPEG\n\n")
    assert load_subset_file(f, ds).tolist() == [1, 4]
    f.write_text("ILSVRC2012_val_00000005.JPEG\n")              # a file name without its class folder
    assert load_subset_file(f, ds).tolist() == [5]
    f.write_text("3\n0\n")
    assert load_subset_file(f, ds).tolist() == [0, 3]
    f.write_text(json.dumps([2, 5]))
    assert load_subset_file(f, ds).tolist() == [2, 5]
    sub = make_subset(ds, file=str(f))
    assert sub.record() == {"method": "file", "seed": None, "num_images": 2, "num_classes": 2, "of": 6, "file": str(f)}
    assert subset_note(sub.record()) is None


@pytest.mark.parametrize("text, match", [
    ("n01/nope.JPEG\nn09/x.JPEG\nn01/ILSVRC2012_val_00000001.JPEG\n", "2 entries are not images.*n01/nope.JPEG, n09/x.JPEG"),
    ("1\n6\n", "indices 6 are outside"),
    ("1\n1\n", "twice"),
    ("", "lists no image"),
])
def test_bad_subset_files(tmp_path, text, match):
    ds, _ = _folder(tmp_path)
    f = tmp_path / "ids.txt"
    f.write_text(text)
    with pytest.raises(RobustvitError, match=match) as e:
        load_subset_file(f, ds)
    assert "\n" not in str(e.value)


def test_make_subset_records_and_draws():
    ds = TensorImageDataset(torch.zeros(1000, 3, 1, 1, dtype=torch.uint8), SORTED, [str(k) for k in range(20)])
    run = make_subset(ds, limit=100, seed=2)
    assert run.record() == {"method": "stratified", "seed": 2, "num_images": 100, "num_classes": 20, "of": 1000}
    assert torch.equal(run.indices, select_subset(SORTED, 100, "stratified", 2))
    assert "100 of 1000 images" in subset_note(run.record())
    inner = run.draw(30, "stratified")
    assert set(inner.tolist()) <= set(run.indices.tolist())
    assert torch.bincount(SORTED[inner], minlength=20).max() <= 2
    assert run.draw(10, "first").tolist() == run.indices[:10].tolist()
    first = make_subset(ds, limit=100, method="first")
    assert first.indices.tolist() == list(range(100)) and first.record()["num_classes"] == 2
    whole = make_subset(ds)
    assert whole.whole and whole.record() is None and subset_note(whole.record()) is None
    with pytest.raises(RobustvitError, match="exclude each other"):
        make_subset(ds, limit=5, file="x.txt")
