import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.data import create_dataset, parse_data_spec
from robustvit.errors import RobustvitError


def _folder(tmp_path, bad=False):
    root = tmp_path / "imgs"
    for c, colour in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        (root / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (20, 20), colour).save(root / c / f"{i}.png")
    if bad:
        (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    return root


def test_parse_spec():
    assert parse_data_spec("synthshapes:train,size=64,count=5") == ("synthshapes", "train", {"size": "64", "count": "5"})
    assert parse_data_spec("folder:/a,b/c") == ("folder", "/a,b/c", {})
    with pytest.raises(RobustvitError, match="SOURCE:ARG"):
        parse_data_spec("synthshapes")
    with pytest.raises(RobustvitError, match="did you mean synthshapes"):
        create_dataset("synthshape:test")


def test_folder_layout_and_resize(tmp_path):
    ds = create_dataset(f"folder:{_folder(tmp_path)}")
    assert ds.classes == ["cat", "dog"] and len(ds) == 6
    x, y = ds[0]
    assert y == 0 and x.shape == (3, 20, 20) and torch.allclose(x[0], torch.ones(20, 20))
    x, y = create_dataset(f"folder:{_folder(tmp_path / 'b')}", image_size=16)[4]
    assert y == 1 and x.shape == (3, 16, 16) and torch.allclose(x[2], torch.ones(16, 16), atol=1e-3)


def test_corrupt_files_are_counted_or_fatal(tmp_path):
    root = _folder(tmp_path, bad=True)
    ds = create_dataset(f"folder:{root}")
    labels = []
    with pytest.warns(UserWarning, match="unreadable"):
        labels = [ds[i][1] for i in range(len(ds))]
    assert labels.count(-1) == 1
    strict = create_dataset(f"folder:{root}", strict=True)
    with pytest.raises(RobustvitError, match="cannot read image .*broken.jpg"):
        [strict[i] for i in range(len(strict))]


def test_npz(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 2, 1, 0]))
    ds = create_dataset(f"npz:{tmp_path / 'd.npz'}")
    img, label = ds[3]
    assert label == 1 and torch.allclose(img, torch.from_numpy(x[3]).permute(2, 0, 1).float() / 255)
    np.savez(tmp_path / "bad.npz", x=x.astype(np.float32), y=np.zeros(5))
    with pytest.raises(RobustvitError, match="uint8"):
        create_dataset(f"npz:{tmp_path / 'bad.npz'}")


def test_missing_paths(tmp_path):
    with pytest.raises(RobustvitError, match="does not exist"):
        create_dataset(f"folder:{tmp_path / 'nope'}")
    with pytest.raises(RobustvitError, match="does not exist"):
        create_dataset(f"npz:{tmp_path / 'nope.npz'}")


def test_shared_cifar_folder_if_present(shared_data):
    SHARED_DATA = shared_data
    if not (SHARED_DATA / "cifar10-jpg.tar.gz").is_file():
        pytest.skip("../shared/data/cifar10-jpg.tar.gz is absent (development data only)")
    import tarfile, tempfile  # noqa: E401
    with tempfile.TemporaryDirectory() as d, tarfile.open(SHARED_DATA / "cifar10-jpg.tar.gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(("test/airplane/000", "test/truck/000")) or m.isdir()]
        tar.extractall(d, members=[m for m in members if m.name.count("/") <= 2], filter="data")
        ds = create_dataset(f"folder:{d}/test")
        assert "airplane" in ds.classes and ds[0][0].shape == (3, 32, 32)
