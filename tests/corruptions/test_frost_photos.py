"""frost uses the ImageNet-C photographs when a folder of them is given, the procedural texture otherwise."""

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.corruptions import CORRUPTIONS, corrupt, corruption_params
from robustvit.corruptions.frost import FROST_ENV, FROST_FILES, frost_photo_dir, frost_source
from robustvit.errors import RobustvitError


@pytest.fixture
def photos(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for i, f in enumerate(FROST_FILES):
        arr = rng.integers(0, 256, (60 + 4 * i, 70 + 2 * i, 3), dtype=np.uint8)
        Image.fromarray(arr).save(tmp_path / f, quality=100) if f.endswith("jpg") else Image.fromarray(arr).save(tmp_path / f)
    monkeypatch.setenv(FROST_ENV, str(tmp_path))
    return tmp_path


def test_frost_blends_a_crop_of_a_photograph(photos):
    assert frost_photo_dir() == photos and frost_source() == f"photos:{photos}"
    x = torch.rand(6, 3, 40, 40)
    spec = CORRUPTIONS.get("frost")
    p = corruption_params("frost", 4, "imagenet")          # unscaled: the photos are used at their own size
    draw = spec.sample(6, (40, 40), p, torch.Generator().manual_seed(1))
    y = spec.apply(x, p, draw)
    assert torch.equal(y, corrupt(x, "frost", 4, seed=1, preset="imagenet", size_scaling=False))
    for i in range(6):
        k, (t, l) = int(draw["photo"][i]), draw["top_left"][i].tolist()
        photo = np.asarray(Image.open(photos / FROST_FILES[k]).convert("RGB"), dtype=np.float32) / 255
        assert 0 <= t <= photo.shape[0] - 40 and 0 <= l <= photo.shape[1] - 40
        crop = torch.from_numpy(photo[t:t + 40, l:l + 40]).permute(2, 0, 1)
        expected = (0.65 * x[i] + 0.7 * crop).clamp(0, 1)
        assert torch.allclose(y[i], expected, atol=1e-6)
    assert len(set(draw["photo"].tolist())) > 1


def test_small_photos_are_enlarged_to_cover_the_image(photos):
    y = corrupt(torch.rand(2, 3, 96, 128), "frost", 2, seed=0, preset="imagenet", size_scaling=False)
    assert y.shape == (2, 3, 96, 128) and 0 <= float(y.min()) and float(y.max()) <= 1


def test_without_photos_the_texture_is_procedural(monkeypatch, tmp_path):
    monkeypatch.setenv(FROST_ENV, "procedural")
    assert frost_photo_dir() is None and frost_source() == "procedural"
    draw = CORRUPTIONS.get("frost").sample(2, (32, 32), corruption_params("frost", 1, "cifar"), torch.Generator())
    assert set(draw) == {"texture"}
    monkeypatch.setenv(FROST_ENV, str(tmp_path))       # a folder without the photographs
    with pytest.raises(RobustvitError, match="frost1.png"):
        corrupt(torch.rand(1, 3, 32, 32), "frost", 1, seed=0)
