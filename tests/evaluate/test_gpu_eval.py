"""Evaluation on CUDA (skipped without a GPU): bf16 with the fp32 re-check, auto precision, out-of-memory back-off
under a capped memory fraction, a resumed run with another --batch-size, and --decode gpu against the CPU decode."""

import warnings

import pytest
import torch

from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import adversarial
from robustvit.models import create_model, save_checkpoint

pytestmark = pytest.mark.gpu
DATA = "synthshapes:test,count=64,size=16"


@pytest.fixture
def checkpoint(sharp_vit_checkpoint):
    return sharp_vit_checkpoint


def _run(checkpoint, out, **kw):
    return run_eval(EvalConfig(models=[checkpoint], data=DATA, out=str(out), device="cuda", progress=False,
                               **kw))["vit"]


def test_auto_precision_is_bf16_for_plain_accuracy_only(checkpoint, tmp_path):
    res = _run(checkpoint, tmp_path / "a", suites=["clean", "pgd:checks=0:steps=3"])
    assert res["suites"]["clean"]["precision"] == "bf16"
    assert res["suites"]["pgd:checks=0:steps=3"]["precision"] == "fp32"


@pytest.mark.parametrize("suite", ["pgd:checks=0:steps=5:eps=0.002", "apgd:checks=0:steps=10:eps=0.002"])
def test_attacks_in_bf16_recheck_robust_points_in_fp32(checkpoint, tmp_path, monkeypatch, suite):
    rechecked = []
    real = adversarial.recheck_fp32

    def spy(model, robust, *a):
        out = real(model, robust, *a)
        rechecked.append((int(robust.sum()), int(out.sum()), model.precision))
        return out
    monkeypatch.setattr(adversarial, "recheck_fp32", spy)
    low = _run(checkpoint, tmp_path / "b", suites=[suite], precision="bf16")["suites"][suite]
    ref = _run(checkpoint, tmp_path / "f", suites=[suite], precision="fp32")["suites"][suite]
    assert low["precision"] == "bf16" and ref["precision"] == "fp32"
    assert any(p == "bf16" and n > 0 for n, _, p in rechecked)            # robust points were re-run in fp32
    assert all(after <= before for before, after, _ in rechecked)
    assert low["accuracy"] <= low["clean_accuracy"]
    assert abs(low["accuracy"] - ref["accuracy"]) <= 0.1


def test_out_of_memory_backs_off_under_a_memory_cap(tmp_path):
    torch.manual_seed(0)
    m = create_model("resnet_cifar18", num_classes=10)
    path = save_checkpoint(m, tmp_path / "r")
    data = "synthshapes:test,count=256,size=96"
    cfg = dict(models=[str(path)], data=data, suites=["clean"], device="cuda", precision="fp32", progress=False)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_reserved()             # what other tests of this process still hold
    ref = run_eval(EvalConfig(out=str(tmp_path / "ref"), batch_size=16, chunk_size=256, **cfg))
    run16 = torch.cuda.max_memory_reserved() - base     # the run with forward passes of 16 images
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, (base + 3 * run16) / total))   # 256 at once do not fit
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = run_eval(EvalConfig(out=str(tmp_path / "cap"), batch_size=256, chunk_size=256, **cfg))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    said = [w for w in caught if "out of GPU memory" in str(w.message)]
    assert len(said) == 1
    key = next(iter(ref))
    assert got[key]["suites"]["clean"]["top1"] == ref[key]["suites"]["clean"]["top1"]


def test_decode_gpu_against_the_cpu_decode(tmp_path):
    """The top-1 agreement of a model reading nvjpeg-decoded and libjpeg-decoded images of the same files."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(40):
        d = tmp_path / "data" / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize((80, 72), Image.BILINEAR).save(d / f"{i}.jpg", quality=90)
    torch.manual_seed(0)
    m = create_model("resnet_cifar18", num_classes=4)
    path = save_checkpoint(m, tmp_path / "m")
    cfg = dict(models=[str(path)], data=f"folder:{tmp_path / 'data'}", suites=["clean"], device="cuda",
               precision="fp32", progress=False)
    cpu = run_eval(EvalConfig(out=str(tmp_path / "cpu"), decode="cpu", **cfg))
    gpu = run_eval(EvalConfig(out=str(tmp_path / "gpu"), decode="gpu", **cfg))
    key = next(iter(cpu))
    assert gpu[key]["suites"]["clean"]["top1"] == pytest.approx(cpu[key]["suites"]["clean"]["top1"], abs=0.1)
