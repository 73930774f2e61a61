"""Bad files: images that are truncated, empty, tiny, 16-bit, grey, palette, CMYK, decompression bombs, symlink
loops; checkpoints whose weights or spec.json are corrupt, truncated or hostile. Each is read correctly, counted as
unreadable (``data.num_unreadable``), or refused with one line (exit 2) — never a traceback (issue 25)."""

from __future__ import annotations

import io
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.cli import main
from robustvit.data.base import FileImageDataset, Resize, load_image
from robustvit.errors import RobustvitError

RGB = np.array([[[200, 40, 10], [10, 220, 30]], [[0, 0, 250], [255, 255, 255]]], dtype=np.uint8)   # 2×2


def _png(arr: np.ndarray, path: Path, **kw) -> Path:
    Image.fromarray(arr).save(path, **kw)
    return path


def test_sixteen_bit_grey_is_scaled_not_clipped(tmp_path):
    a = np.array([[0, 257 * 10], [257 * 128, 65535]], dtype=np.uint16)
    x = load_image(_png(a, tmp_path / "g16.png"))
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    want = torch.tensor([[0, 10], [128, 255]], dtype=torch.float32) / 255     # v / 257 in 8 bits, as grey RGB
    assert torch.equal(x, want.expand(3, 2, 2))


def test_grey_palette_cmyk_and_alpha_modes_give_the_same_rgb(tmp_path):
    base = load_image(_png(RGB, tmp_path / "rgb.png"))
    assert torch.equal(base, torch.from_numpy(RGB).permute(2, 0, 1).float() / 255)
    grey = np.array([[0, 77], [150, 255]], dtype=np.uint8)
    assert torch.equal(load_image(_png(grey, tmp_path / "l.png")), torch.from_numpy(grey).float().div(255).expand(3, 2, 2))
    pal = Image.fromarray(RGB).quantize(colors=4)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "p.png", transparency=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # no "palette with transparency" warning per image
        p = load_image(tmp_path / "p.png")
    assert torch.equal(p, base)                             # 4 colours: the palette is exact
    rgba = np.concatenate([RGB, np.full((2, 2, 1), 7, np.uint8)], axis=2)
    assert torch.equal(load_image(_png(rgba, tmp_path / "a.png")), base)   # alpha dropped, colours kept
    Image.fromarray(RGB).convert("CMYK").save(tmp_path / "c.tiff")
    assert (load_image(tmp_path / "c.tiff") - base).abs().max() <= 1 / 255


def test_one_pixel_image_is_resized_to_the_model_input(tmp_path):
    x = load_image(_png(np.array([[[9, 99, 199]]], np.uint8), tmp_path / "one.png"), Resize(8, crop_pct=1.0))
    assert x.shape == (3, 8, 8)
    assert torch.allclose(x, torch.tensor([9, 99, 199.0]).div(255).view(3, 1, 1).expand(3, 8, 8), atol=1e-6)


@pytest.fixture
def bad_folder(tmp_path):
    """A 2-class ImageFolder: 3 good images and one of each bad kind."""
    root = tmp_path / "data"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
    for i, c in enumerate("aab"):
        _png(np.full((8, 8, 3), 40 * i, np.uint8), root / c / f"good{i}.png")
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    (root / "a" / "truncated.png").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    (root / "a" / "empty.jpg").write_bytes(b"")
    (root / "b" / "text.png").write_text("not an image")
    os.symlink("loop.png", root / "b" / "loop.png")                       # a symlink to itself
    os.symlink(root, root / "b" / "subloop")                             # a directory loop
    _bomb_png(root / "b" / "bomb.png", 30000, 30000)
    return root


def _bomb_png(path: Path, width: int, height: int) -> Path:
    """A 100-byte PNG declaring ``width`` × ``height`` grey pixels (a decompression bomb's header)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


BAD = {"truncated.png", "empty.jpg", "text.png", "loop.png", "bomb.png"}


def test_folder_counts_every_bad_file_and_reads_the_good_ones(bad_folder):
    from robustvit.data import create_dataset

    ds = create_dataset(f"folder:{bad_folder},size=8")
    names = {Path(p).name for p, _ in ds.samples}
    assert BAD <= names and {"good0.png", "good1.png", "good2.png"} <= names
    with pytest.warns(UserWarning, match="skipping unreadable image") as rec:
        items = {Path(p).name: ds[i] for i, (p, _) in enumerate(ds.samples)}
    assert {n for n, (_, y) in items.items() if y == -1} == BAD | ({n for n in names if n not in BAD and "good" not in n})
    assert all(y >= 0 and x.shape == (3, 8, 8) for n, (x, y) in items.items() if n.startswith("good"))
    assert any("bomb.png" in str(w.message) and "decompression bomb" in str(w.message) for w in rec)   # says why


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_bomb_is_refused_before_decoding(tmp_path, monkeypatch):
    _png(np.zeros((40, 40, 3), np.uint8), tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)      # 1,600 pixels: over the limit, under 2× (a warning only)
    with pytest.raises(ValueError, match="exceed Pillow's limit of 1000"):
        load_image(tmp_path / "big.png")
    ds = FileImageDataset([(str(tmp_path / "big.png"), 0)], ["x"], strict=True)
    with pytest.raises(RobustvitError, match="big.png.*MAX_IMAGE_PIXELS.*--strict"):
        ds[0]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)      # the user lifted the limit
    assert load_image(tmp_path / "big.png").shape == (3, 40, 40)


def _ckpt(tmp_path, name="ck", classes=3) -> Path:
    from robustvit.models import create_model
    from robustvit.models.factory import save_checkpoint

    torch.manual_seed(0)
    return save_checkpoint(create_model("vit_cifar_micro", num_classes=classes, img_size=8, patch_size=4),
                           tmp_path / name)


def _eval(capsys, model: Path | str, data: str, out: Path, *extra: str, batch: int = 64) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["eval", "--model", str(model), "--data", data, "--out", str(out), "--device", "cpu",
                 "--no-progress", "--batch-size", str(batch), *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and "warning:" not in ln]
    return code, err


def test_eval_counts_bad_images_and_strict_refuses_in_one_line(tmp_path, bad_folder, capsys):
    ck = _ckpt(tmp_path, classes=2)
    data = f"folder:{bad_folder},size=8"
    code, err = _eval(capsys, ck, data, tmp_path / "ok")
    assert code == 0, err
    res = json.loads((tmp_path / "ok" / "results.json").read_text())
    assert res["data"]["num_unreadable"] == len(BAD) and res["data"]["num_images"] == 3
    assert {Path(f).name for f in res["data"]["unreadable_files"]} == BAD
    code, err = _eval(capsys, ck, data, tmp_path / "strict", "--strict")
    assert code == 2 and len(err) == 1 and "cannot read image" in err[0] and "--strict" in err[0], err


def test_bad_images_spread_over_several_chunks_are_counted(tmp_path, bad_folder, capsys):
    ck = _ckpt(tmp_path, classes=2)
    code, err = _eval(capsys, ck, f"folder:{bad_folder},size=8", tmp_path / "ok", batch=3)
    assert code == 0, err
    res = json.loads((tmp_path / "ok" / "results.json").read_text())
    assert res["data"]["num_unreadable"] == len(BAD) and res["data"]["num_images"] == 3


def test_bad_images_are_counted_once_over_shards_resume_and_merge(tmp_path, bad_folder, capsys):
    ck = _ckpt(tmp_path, classes=2)
    data = f"folder:{bad_folder},size=8"
    shards = [tmp_path / f"s{k}" for k in (1, 2)]
    for k, d in enumerate(shards, 1):       # chunks of 2 images: the bad files fall in both shards
        assert _eval(capsys, ck, data, d, "--shard", f"{k}/2", batch=2)[0] == 0
    assert _eval(capsys, ck, data, shards[0], "--shard", "1/2", batch=2)[0] == 0      # resumed: nothing to run
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "m"), "--no-progress"]) == 0
    res = json.loads((tmp_path / "m" / "results.json").read_text())
    assert res["data"]["num_unreadable"] == len(BAD) and res["data"]["num_images"] == 3
    assert sorted(Path(f).name for f in res["data"]["unreadable_files"]) == sorted(BAD)
    assert res["suites"]["clean"]["num_images"] == 3


def _spec(ck: Path) -> dict:
    return json.loads((ck / "spec.json").read_text())


HOSTILE = [
    ("not json", lambda m: "{this is not json", "not a valid robustvit spec file"),
    ("a list", lambda m: json.dumps([1, 2]), "no 'spec' object"),
    ("unknown architecture", lambda m: {**m, "spec": {**m["spec"], "architecture": "vit_from_mars"}}, "does not know"),
    ("architecture not a string", lambda m: {**m, "spec": {**m["spec"], "architecture": ["vit"]}}, "'architecture'"),
    ("classes a string", lambda m: {**m, "spec": {**m["spec"], "num_classes": "3"}}, "'num_classes'"),
    ("negative classes", lambda m: {**m, "spec": {**m["spec"], "num_classes": -3}}, "'num_classes'"),
    ("std zero", lambda m: {**m, "spec": {**m["spec"], "std": [0, 1, 1]}}, "'std'"),
    ("mean NaN", lambda m: {**m, "spec": {**m["spec"], "mean": [float("nan"), 0, 0]}}, "'mean'"),
    ("kwargs a list", lambda m: {**m, "spec": {**m["spec"], "kwargs": [1]}}, "'kwargs'"),
    ("kwargs loads a file", lambda m: {**m, "spec": {**m["spec"], "kwargs": {**m["spec"]["kwargs"],
                                       "checkpoint_path": "/etc/passwd"}}}, "checkpoint_path"),
    ("kwargs huge depth", lambda m: {**m, "spec": {**m["spec"], "kwargs": {**m["spec"]["kwargs"], "depth": 10**9}}},
     "out of range"),
    ("kwargs wrong type", lambda m: {**m, "spec": {**m["spec"], "kwargs": {**m["spec"]["kwargs"], "depth": "two"}}},
     "does not build"),
    ("adaptation unknown", lambda m: {**m, "spec": {**m["spec"], "adaptations": [{"op": "rm -rf"}]}}, "rm -rf"),
    ("adaptations not objects", lambda m: {**m, "spec": {**m["spec"], "adaptations": ["x"]}}, "'adaptations'"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_malformed_or_hostile_spec_json_is_refused_in_one_line(tmp_path, capsys, case):
    from robustvit.models import create_model

    _, edit, needle = case
    ck = _ckpt(tmp_path)
    new = edit(_spec(ck))
    (ck / "spec.json").write_text(new if isinstance(new, str) else json.dumps(new))
    with pytest.raises(RobustvitError, match="ck") as e:
        create_model(str(ck))
    assert needle in str(e.value) and "\n" not in str(e.value)
    code, err = _eval(capsys, ck, "synthshapes:test,count=4,size=8,classes=3", tmp_path / "o")
    assert code == 2 and len(err) == 1 and err[0].startswith("robustvit: error:"), err


@pytest.mark.parametrize("damage", ["truncated", "empty", "flipped header", "garbage"])
def test_corrupt_weights_are_refused_in_one_line(tmp_path, capsys, damage):
    from robustvit.models import create_model

    ck = _ckpt(tmp_path)
    w = ck / "model.safetensors"
    raw = w.read_bytes()
    w.write_bytes({"truncated": raw[: len(raw) * 2 // 3], "empty": b"", "garbage": os.urandom(len(raw)),
                   "flipped header": (len(raw) * 4).to_bytes(8, "little") + raw[8:]}[damage])
    with pytest.raises(RobustvitError, match="cannot read weights from .*model.safetensors"):
        create_model(str(ck))
    code, err = _eval(capsys, ck, "synthshapes:test,count=4,size=8,classes=3", tmp_path / "o")
    assert code == 2 and len(err) == 1, err


def test_a_valid_checkpoint_still_loads_with_the_same_logits(tmp_path):
    from robustvit.models import create_model

    ck = _ckpt(tmp_path)
    torch.manual_seed(0)
    ref = create_model("vit_cifar_micro", num_classes=3, img_size=8, patch_size=4).eval()
    x = torch.rand(2, 3, 8, 8)
    assert torch.equal(create_model(str(ck)).eval()(x), ref(x))
