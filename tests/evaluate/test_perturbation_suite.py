"""The ``perturbations`` suite end to end on tiny models, the CIFAR-P .npy reader and the report section."""

import json

import numpy as np
import pytest
import torch

from robustvit.data.perturbed import NpySequences, open_perturbation_source, perturbation_file_stem, read_video_frames
from robustvit.errors import RobustvitError
from robustvit.protocols import attach
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import create_suite
from robustvit.evaluation.suites.perturbations import parse_perturbations
from robustvit.corruptions import to_uint8
from robustvit.corruptions.perturbations import CIFAR_P_TEST_PERTURBATIONS, TEST_PERTURBATIONS, perturbation_sequence
from robustvit.data.perturbed import x264_roundtrip
from robustvit.metrics.perturbation import flip_probability, ranking, top5_distance
from robustvit.models import create_model, save_checkpoint

DATA = "synthshapes:test,count=6,size=16"


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10).eval()
    return str(save_checkpoint(m, tmp_path / "ck"))


def _eval(ckpt, out, spec, data=DATA, bs=8):
    cfg = EvalConfig(models=[ckpt], data=data, suites=[spec], out=str(out), batch_size=bs, device="cpu",
                     progress=False)
    res = run_eval(cfg)
    return next(iter(res.values()))["suites"][spec]


def test_options_and_errors():
    assert parse_perturbations("test") == list(TEST_PERTURBATIONS)
    assert parse_perturbations("rotate+translate+rotate") == ["rotate", "translate"]
    with pytest.raises(RobustvitError, match="did you mean"):
        create_suite("perturbations:perturbations=rotat")
    with pytest.raises(RobustvitError, match="difficulty"):
        create_suite("perturbations:difficulty=5")
    with pytest.raises(RobustvitError, match="baseline"):
        create_suite("perturbations:baseline=/nonexistent/results.json")
    with pytest.raises(RobustvitError, match="not a folder"):
        create_suite("perturbations:source=/nonexistent")


def test_suite_matches_direct_computation_and_normalises(tmp_path, ckpt):
    spec = "perturbations:perturbations=rotate+translate"
    r = _eval(ckpt, tmp_path / "a", spec)
    assert r["num_sequences"] == 6 and r["difficulty"] == 1 and r["preset"] == "cifar"
    assert r["num_frames"] == {"rotate": 31, "translate": 16}
    assert r["mfr"] is None and r["flip_rate"] is None and "baseline" in r["normalisation_reason"]
    assert r["mean_over"] == ["translate", "rotate"]
    fp = r["flip_probability"]
    assert r["mean_flip_probability"] == pytest.approx(sum(fp.values()) / 2)
    # deterministic sequences: recompute the rotate numbers by hand from the model and the frames
    from robustvit.data import create_dataset

    m = create_model(ckpt).eval()
    x, _ = create_dataset(DATA).get_batch(torch.arange(6))
    seq = to_uint8(perturbation_sequence(x, "rotate")).float() / 255          # 8-bit frames, as CIFAR-P stores them
    with torch.no_grad():
        logits = m(seq.reshape(-1, 3, 16, 16)).reshape(6, 31, -1)
    assert fp["rotate"] == pytest.approx(flip_probability(logits, noise=False))
    assert r["top5_distance"]["rotate"] == pytest.approx(top5_distance(ranking(logits), noise=False))
    assert 0 <= fp["translate"] <= 1 and 0 <= r["top5_distance"]["translate"] <= 15
    # the same model as its own baseline: every flip rate is 1 (where FP > 0); mFR needs all 10 test ones
    r2 = _eval(ckpt, tmp_path / "b", spec + f":baseline={tmp_path / 'a'}")
    assert r2["baseline"].endswith("results.json")
    for n, v in r2["flip_rate"].items():
        assert v == pytest.approx(1.0) if fp[n] > 0 else v is None
    assert r2["mfr"] is None and "missing" in r2["normalisation_reason"]
    # a baseline at another difficulty is refused with a reason
    r3 = _eval(ckpt, tmp_path / "c", f"perturbations:perturbations=rotate:difficulty=2:baseline={tmp_path / 'a'}")
    assert r3["flip_rate"] is None and "difficulty" in r3["normalisation_reason"]
    json.dumps(r3)


def _write_cifar_p(root, names, n=6, t=5, labels=True):
    root.mkdir()
    g = np.random.default_rng(0)
    for name in names:
        np.save(root / f"{name}.npy", g.integers(0, 256, (n, t, 16, 16, 3), dtype=np.uint8))
    if labels:
        np.save(root / "labels.npy", np.arange(n) % 12)


def test_cifar_p_reader(tmp_path):
    _write_cifar_p(tmp_path / "cp", ["rotate", "gaussian_noise_2"])
    src = open_perturbation_source(tmp_path / "cp", "rotate")
    assert isinstance(src, NpySequences) and len(src) == 6 and src.num_frames == 5
    x, y = src.get_sequences(torch.tensor([4, 1]))
    raw = np.load(tmp_path / "cp" / "rotate.npy")
    assert x.shape == (2, 5, 3, 16, 16) and torch.allclose(x[0, 2], torch.from_numpy(raw[4, 2]).permute(2, 0, 1) / 255)
    assert y.tolist() == [4, 1]
    assert perturbation_file_stem("gaussian_noise", 2) == "gaussian_noise_2"
    assert perturbation_file_stem("rotate", 2) == "rotate"
    assert len(open_perturbation_source(tmp_path / "cp", "gaussian_noise", 2)) == 6
    with pytest.raises(RobustvitError, match="neither"):
        open_perturbation_source(tmp_path / "cp", "tilt")
    np.save(tmp_path / "cp" / "tilt.npy", np.zeros((2, 3, 16, 16), np.uint8))
    with pytest.raises(RobustvitError, match="uint8"):
        open_perturbation_source(tmp_path / "cp", "tilt")


def test_suite_reads_a_cifar_p_folder(tmp_path, ckpt):
    _write_cifar_p(tmp_path / "cp", ["rotate", "gaussian_noise"], labels=False)
    spec = f"perturbations:perturbations=rotate+gaussian_noise:source={tmp_path / 'cp'}:limit=5"
    r = _eval(ckpt, tmp_path / "e", spec, bs=3)
    assert r["num_sequences"] == 5 and r["num_frames"] == {"rotate": 5, "gaussian_noise": 5}
    assert r["source"] == str(tmp_path / "cp") and r["preset"] is None
    m = create_model(ckpt).eval()
    frames = torch.from_numpy(np.load(tmp_path / "cp" / "rotate.npy")[:5]).permute(0, 1, 4, 2, 3).float() / 255
    with torch.no_grad():
        logits = m(frames.reshape(-1, 3, 16, 16)).reshape(5, 5, -1)
    assert r["flip_probability"]["rotate"] == pytest.approx(flip_probability(logits, noise=False))


def test_video_reader_says_what_to_install(tmp_path, monkeypatch):
    from robustvit.data import perturbed

    monkeypatch.setattr(perturbed, "_decoders", lambda: [])
    with pytest.raises(RobustvitError, match="pip install av"):
        read_video_frames(tmp_path / "x.mp4")


def test_suite_reads_an_imagenet_p_folder(tmp_path, ckpt):
    """ImageNet-P layout ROOT/<perturbation>/<wnid>/<id>.mp4: the suite decodes every video and scores it."""
    from robustvit.data.perturbed import encode_x264

    torch.manual_seed(0)
    frames = (torch.rand(4, 31, 3, 1, 1) * 255).to(torch.uint8).expand(4, 31, 3, 16, 16)
    for i in range(4):
        f = tmp_path / "ip" / "rotate" / f"n0000000{i // 2}" / f"{i}.mp4"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(encode_x264(frames[i], noise=False))
    r = _eval(ckpt, tmp_path / "o", f"perturbations:perturbations=rotate:source={tmp_path / 'ip'}")
    assert r["num_sequences"] == 4 and r["benchmark"] == "imagenet-p" and r["encoding"] is None
    decoded = torch.stack([read_video_frames(f) for f in sorted((tmp_path / "ip" / "rotate").rglob("*.mp4"))])
    assert decoded.shape == (4, 31, 3, 16, 16) and float((decoded.float() - frames.float()).abs().mean()) < 4
    m = create_model(ckpt).eval()
    with torch.no_grad():
        logits = m(decoded.float().div(255).reshape(-1, 3, 16, 16)).reshape(4, 31, -1)
    assert r["flip_probability"]["rotate"] == pytest.approx(flip_probability(logits, noise=False))


def test_report_section(tmp_path):
    from robustvit.report.sections.perturbations import perturbations_section

    s = {"flip_probability": {"rotate": 0.1, "tilt": 0.2}, "top5_distance": {"rotate": 1.0, "tilt": 2.0},
         "mean_flip_probability": 0.15, "mean_top5_distance": 1.5, "mfr": None, "mt5d": None, "difficulty": 1,
         "num_sequences": 10, "preset": "cifar", "source": None, "normalisation_reason": "no baseline given",
         "benchmark": "cifar-p", "encoding": "8-bit", "approximations": ["sequences at 16 px, not 32"]}
    res = [attach({"model": {"name": "a"}, "suites": {"perturbations": s}}),
           attach({"model": {"name": "b"}, "suites": {"perturbations": {**s, "flip_probability": {"rotate": 0.3}}}})]
    sec = perturbations_section("perturbations", res)
    assert "a FP" in sec.markdown and "b T5D" in sec.markdown and "0.3000" in sec.markdown
    assert "no baseline given" in sec.markdown and len(sec.figures) == 1 and sec.figures[0].name == "perturbations"
    assert "CIFAR-10-P test perturbations" in sec.markdown and "not comparable" in sec.markdown and "16 px" in sec.markdown
    import matplotlib.pyplot as plt

    plt.close(sec.figures[0].fig)


def test_cifar_p_test_set_and_protocol_labels(tmp_path, ckpt):
    """32-px-preset sequences use CIFAR-10-P's test set (spatter, not snow) and 8-bit frames; a 16-px run is
    labelled approximate."""
    r = _eval(ckpt, tmp_path / "a", "perturbations:limit=2")
    assert r["benchmark"] == "cifar-p" and r["perturbations"] == list(CIFAR_P_TEST_PERTURBATIONS)
    assert "spatter" in r["mean_over"] and "snow" not in r["mean_over"]
    assert r["encoding"] == "8-bit" and not r["protocol"]["comparable"] and "16 px, not 32" in r["approximations"][0]


def test_imagenet_p_sequences_are_encoded_as_h264(tmp_path, ckpt):
    spec = "perturbations:perturbations=rotate:preset=imagenet:encode=x264"
    r = _eval(ckpt, tmp_path / "v", spec)
    assert r["benchmark"] == "imagenet-p" and r["encoding"] == "x264"
    m = create_model(ckpt).eval()
    from robustvit.data import create_dataset

    x, _ = create_dataset(DATA).get_batch(torch.arange(6))
    seq = to_uint8(perturbation_sequence(x, "rotate", preset="imagenet"))
    videos = torch.stack([x264_roundtrip(s, noise=False) for s in seq]).float() / 255
    assert videos.shape == (6, 31, 3, 16, 16) and 0 < float((videos - seq.float() / 255).abs().mean()) < 0.05
    with torch.no_grad():
        logits = m(videos.reshape(-1, 3, 16, 16)).reshape(6, 31, -1)
    assert r["flip_probability"]["rotate"] == pytest.approx(flip_probability(logits, noise=False))


def test_imagenet_p_geometry_warps_the_wider_image_then_crops(tmp_path):
    """Image files + imagenet preset: the sequences are made from the images read at 256/224 of the model's
    size and centre-cropped after the warp (no black border where the wider image has content)."""
    from PIL import Image

    from robustvit.data import Resize, create_dataset

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / "img" / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray((rng.random((70, 90, 3)) * 255).astype(np.uint8)).save(tmp_path / "img" / c / f"{i}.png")
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=1, num_heads=2, img_size=32, num_classes=2).eval()
    ck = str(save_checkpoint(m, tmp_path / "ck"))
    spec = "perturbations:perturbations=translate:preset=imagenet:encode=none"
    r = _eval(ck, tmp_path / "o", spec, data=f"folder:{tmp_path / 'img'}")
    assert not any("Resize(256)" in a for a in r["approximations"])
    wide = create_dataset(f"folder:{tmp_path / 'img'}", image_size=Resize(37, 1.0, "bilinear"))   # round(32·256/224)
    x, _ = wide.get_batch(torch.arange(4))
    seq = to_uint8(perturbation_sequence(x, "translate", preset="imagenet", crop=32)).float() / 255
    assert seq.shape == (4, 41, 3, 32, 32)
    assert float(seq[:, 0, :, :, :2].amax()) > 0          # shifted 20·32/224 px: the margin comes from the wider image
    with torch.no_grad():
        logits = create_model(ck).eval()(seq.reshape(-1, 3, 32, 32)).reshape(4, 41, -1)
    assert r["flip_probability"]["translate"] == pytest.approx(flip_probability(logits, noise=False))
    # in-memory images cannot be widened: the result says so
    r2 = _eval(ck, tmp_path / "o2", spec, data="synthshapes:test,count=4,size=32,classes=2")
    assert any("Resize(256)" in a for a in r2["approximations"]) and not r2["protocol"]["comparable"]
