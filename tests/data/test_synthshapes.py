import pytest
import torch

from robustvit.data import create_dataset
from robustvit.data.synthshapes import render_synthshapes
from robustvit.errors import RobustvitError


def test_deterministic_and_prefix_stable():
    a, ya, ta = render_synthshapes(120, size=24, seed=3)
    b, yb, tb = render_synthshapes(120, size=24, seed=3)
    assert torch.equal(a, b) and torch.equal(ya, yb) and torch.equal(ta, tb)
    c, yc, _ = render_synthshapes(700, size=24, seed=3)  # crosses a chunk boundary
    assert torch.equal(c[:120], a) and torch.equal(yc[:120], ya)
    d, _, _ = render_synthshapes(120, size=24, seed=4)
    assert not torch.equal(a, d)
    assert a.dtype == torch.uint8 and a.shape == (120, 3, 24, 24)


def test_class_balance_and_texture_knob():
    _, y, t = render_synthshapes(1000, size=16, seed=0, classes=10, texture_correlation=1.0)
    assert y.bincount(minlength=10).tolist() == [100] * 10
    assert torch.equal(t, y)
    _, y, t = render_synthshapes(1000, size=16, seed=0, classes=10, texture_correlation=0.0)
    assert 0.03 < (t == y).float().mean() < 0.2  # chance agreement only
    _, y, t = render_synthshapes(500, size=16, seed=0, cue_conflict=True)
    assert (t != y).all()


def test_images_vary_and_use_the_range():
    x, _, _ = render_synthshapes(64, size=32, seed=0)
    xf = x.float() / 255
    assert xf.std() > 0.15
    assert (xf.flatten(1).std(1) > 0.03).all()  # no blank images
    assert len({tuple(img.flatten()[:50].tolist()) for img in x}) == 64


def test_dataset_specs():
    ds = create_dataset("synthshapes:test,count=30,size=48")
    x, y = ds[0]
    assert x.shape == (3, 48, 48) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert len(ds) == 30 and ds.num_classes == 10 and ds.classes[0] == "circle"
    train = create_dataset("synthshapes:train,count=30,size=48")
    ids = torch.arange(30)
    assert not torch.equal(train.get_batch(ids)[0], ds.get_batch(ids)[0])  # train and test use different seeds
    cue = create_dataset("synthshapes:cue_conflict,count=20")
    assert (cue.extra["texture_labels"] != cue.labels).all()


@pytest.mark.parametrize("spec,match", [
    ("synthshapes:val", "unknown synthshapes split"),
    ("synthshapes:train,classes=40", "2 to 12 classes"),
    ("synthshapes:train,size=500", "between 8 and 224"),
    ("synthshapes:train,colour=1", "no option 'colour'"),
])
def test_errors(spec, match):
    with pytest.raises(RobustvitError, match=match):
        create_dataset(spec)


def test_dataset_renders_on_demand_and_matches_the_full_render():
    ds = create_dataset("synthshapes:test,count=700,size=24,seed=3")
    x, y, t = render_synthshapes(700, size=24, seed=3)
    assert ds._chunks == {}                                       # nothing rendered to build the data set
    assert torch.equal(ds.labels, y) and torch.equal(ds.extra["texture_labels"], t) and len(ds) == 700
    idx = torch.tensor([3, 0, 499])                              # all in the first chunk
    a, b = ds.get_batch(idx)
    assert list(ds._chunks) == [0]
    assert torch.equal(a, x[idx].float() / 255) and torch.equal(b, y[idx])
    idx = torch.tensor([699, 3, 520, 500])                       # across the chunk boundary
    assert torch.equal(ds.get_batch(idx)[0], x[idx].float() / 255)
    img, label = ds[650]
    assert torch.equal(img, x[650].float() / 255) and label == int(y[650])
