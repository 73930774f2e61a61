"""Each model sees the data through its own preprocessing: timm's evaluation transform (resize the shorter side
to size / crop_pct with the model's interpolation, centre crop), per model in one run; class maps."""

import json

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config

from robustvit.data import dataset_for_model
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.models import create_model, save_checkpoint


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Two classes of non-square RGB images (smooth colour fields, so resampling differences show)."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for c, shape in (("a", (200, 300)), ("b", (260, 180))):
        (root / c).mkdir()
        for i in range(2):
            small = rng.random((6, 9, 3))
            img = Image.fromarray((small * 255).astype(np.uint8)).resize(shape[::-1], Image.BICUBIC)
            img.save(root / c / f"{i}.png")
    return root


@pytest.mark.parametrize("name, overlay", [
    ("vit_tiny_patch16_224", {}),                                           # crop 0.9, bicubic
    ("resnet18", {}),                                                       # crop 0.95, bicubic
    ("resnet18", {"crop_pct": 0.875, "interpolation": "bilinear", "input_size": (3, 160, 160)}),
])
def test_file_images_match_timms_eval_transform(photos, name, overlay):
    model = create_model(name, num_classes=2, pretrained_cfg_overlay=overlay)
    net = timm.create_model(name, num_classes=2, pretrained_cfg_overlay=overlay)
    cfg = resolve_data_config({}, model=net)
    assert (model.spec.crop_pct, model.spec.interpolation) == (cfg["crop_pct"], cfg["interpolation"])
    ref_tf = create_transform(**cfg, is_training=False)
    mean, std = torch.tensor(cfg["mean"]).view(3, 1, 1), torch.tensor(cfg["std"]).view(3, 1, 1)
    ds = dataset_for_model(f"folder:{photos}", model.spec)
    x, _ = ds.get_batch(torch.arange(len(ds)))
    assert x.shape[-2:] == cfg["input_size"][1:]
    for i, (path, _) in enumerate(ds.samples):
        ref = ref_tf(Image.open(path).convert("RGB")) * std + mean       # timm's tensor before its Normalize
        assert torch.allclose(x[i], ref, atol=1e-5)


def _tiny(size: int, tmp_path, classes: int = 2) -> str:
    torch.manual_seed(size)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=1, num_heads=2, img_size=size, num_classes=classes)
    return str(save_checkpoint(m.eval(), tmp_path / f"ck{size}"))


def test_two_models_with_different_input_sizes_in_one_run(photos, tmp_path, monkeypatch):
    seen: dict[int, set] = {}
    forward = torch.nn.Module.__call__

    def spy(self, *args, **kwargs):
        if hasattr(self, "spec") and args:
            seen.setdefault(self.spec.image_size, set()).add(tuple(args[0].shape[-2:]))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__call__", spy)
    cfg = EvalConfig(models=[_tiny(16, tmp_path), _tiny(32, tmp_path)], data=f"folder:{photos}", suites=["clean"],
                     out=str(tmp_path / "out"), device="cpu", progress=False)
    res = run_eval(cfg)
    assert seen == {16: {(16, 16)}, 32: {(32, 32)}}
    sizes = sorted(r["model"]["preprocessing"]["input_size"][-1] for r in res.values())
    assert sizes == [16, 32] and all(r["data"]["num_images"] == 4 for r in res.values())


def test_in_memory_images_are_resized_to_the_model(tmp_path):
    x = (np.random.default_rng(1).random((4, 32, 32, 3)) * 255).astype(np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 0, 1]))
    model = create_model(_tiny(16, tmp_path))
    ds = dataset_for_model(f"npz:{tmp_path / 'd.npz'}", model.spec)
    xb, _ = ds.get_batch(torch.arange(4))
    ref = torch.nn.functional.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255, size=(16, 16),
                                          mode="bilinear", align_corners=False, antialias=True)
    assert xb.shape == (4, 3, 16, 16) and torch.allclose(xb, ref.clamp(0, 1), atol=1e-6)


def test_class_count_mismatch_needs_a_class_map(photos, tmp_path):
    ck = _tiny(16, tmp_path, classes=5)                 # a 5-class model on 2-class data
    cfg = dict(models=[ck], data=f"folder:{photos}", suites=["clean"], device="cpu", progress=False)
    with pytest.raises(RobustvitError, match="class-map"):
        run_eval(EvalConfig(out=str(tmp_path / "a"), **cfg))
    (tmp_path / "map.json").write_text(json.dumps({"a": 3, "b": [0, 4]}))
    res = run_eval(EvalConfig(out=str(tmp_path / "b"), class_map=str(tmp_path / "map.json"), **cfg))
    r = next(iter(res.values()))
    assert r["model"]["class_map"].endswith("map.json") and r["model"]["spec"]["num_classes"] == 2
    m = create_model(ck).eval()
    ds = dataset_for_model(f"folder:{photos}", m.spec)
    x, y = ds.get_batch(torch.arange(4))
    with torch.no_grad():
        z = m(x)
    mapped = torch.stack([z[:, 3], torch.maximum(z[:, 0], z[:, 4])], 1)
    assert r["suites"]["clean"]["top1"] == pytest.approx((mapped.argmax(1) == y).float().mean().item())
    (tmp_path / "bad.json").write_text(json.dumps([1]))
    with pytest.raises(RobustvitError, match="one entry per data class"):
        run_eval(EvalConfig(out=str(tmp_path / "c"), class_map=str(tmp_path / "bad.json"), **cfg))


def test_transfer_needs_one_preprocessing(photos, tmp_path):
    cfg = EvalConfig(models=[_tiny(16, tmp_path), _tiny(32, tmp_path)], data=f"folder:{photos}",
                     suites=["transfer:steps=1"], out=str(tmp_path / "t"), device="cpu", progress=False)
    with pytest.raises(RobustvitError, match="same images"):
        run_eval(cfg)
