"""--precision, the forward micro-batch (--batch-size) apart from the unit (--chunk-size), CUDA out-of-memory
back-off, the device type in the fingerprint and --deterministic: on the CPU, where the causes show without a GPU."""

import json
import warnings

import pytest
import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites.adversarial import attack_memory, recheck_fp32
from robustvit.attacks import create_attack
from robustvit.models import create_model
from robustvit.models.wrapper import Normalized, computing_in, inference_settings
from robustvit.runs import UnitStore

DATA = "synthshapes:test,count=40,size=16"


@pytest.fixture
def checkpoint(sharp_vit_checkpoint):
    return sharp_vit_checkpoint


def _suites(res):
    return {k: {m: v for m, v in r.items() if m != "seconds"} for k, r in res["suites"].items()}


def test_micro_batch_keeps_each_image_logits_and_gradient(tiny_vit):
    x = torch.rand(13, 3, 16, 16)
    with torch.no_grad():
        whole = tiny_vit(x)
        with inference_settings(tiny_vit, micro_batch=4):
            cut = tiny_vit(x)
    assert torch.allclose(whole, cut, atol=1e-6, rtol=0)     # equal up to batch-size-dependent kernel rounding
    y = whole.argmax(1)

    def grad() -> torch.Tensor:
        xa = x.clone().requires_grad_(True)
        g, = torch.autograd.grad(nn.functional.cross_entropy(tiny_vit(xa), y), xa)
        return g
    full = grad()
    with inference_settings(tiny_vit, micro_batch=4):
        parts = grad()       # checkpointed micro-batches: the same gradient up to rounding
    assert torch.allclose(full, parts, atol=1e-9, rtol=1e-5)
    assert tiny_vit.micro_batch is None


def test_bf16_autocasts_inside_the_wrapper_only(tiny_vit):
    x = torch.rand(6, 3, 16, 16)
    seen = []
    tiny_vit.net.register_forward_hook(lambda m, i, o: seen.append(torch.is_autocast_enabled("cpu")))
    with torch.no_grad():
        ref = tiny_vit(x)
        with inference_settings(tiny_vit, precision="bf16"):
            low = tiny_vit(x)
    assert seen == [False, True] and low.dtype == torch.float32
    assert 0 < (low - ref).abs().max() < 0.05        # bfloat16 rounding: close, not equal
    assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(RobustvitError, match="precision must be one of"):
        with computing_in("fp16", x.device):
            pass


def test_eval_bf16_on_cpu_records_precision(checkpoint, tmp_path):
    suites = ["clean", "pgd:checks=0:steps=3"]
    low = run_eval(EvalConfig(models=[checkpoint], data=DATA, suites=suites, out=str(tmp_path / "b"), device="cpu",
                              precision="bf16", progress=False))["vit"]
    ref = run_eval(EvalConfig(models=[checkpoint], data=DATA, suites=suites, out=str(tmp_path / "f"), device="cpu",
                              progress=False))["vit"]
    assert low["run"]["precision"] == "bf16" and ref["run"]["precision"] == "auto"
    assert low["suites"]["clean"]["precision"] == "bf16" and ref["suites"]["clean"]["precision"] == "fp32"
    assert low["suites"]["clean"]["top1"] == pytest.approx(ref["suites"]["clean"]["top1"], abs=0.1)
    assert ref["suites"]["pgd:checks=0:steps=3"]["precision"] == "fp32"   # auto: attacks stay fp32 everywhere


def test_fp32_recheck_rejects_points_only_bf16_calls_robust():
    class SplitNet(nn.Module):
        """Class 0 in bfloat16, class 1 in float32: what bf16 rounding can do to a borderline image."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            low = torch.is_autocast_enabled("cpu")
            return torch.tensor([[1.0, 0.0] if low else [0.0, 1.0]]).repeat(len(x), 1) + 0 * x.mean()
    from robustvit.models.spec import ModelSpec

    m = Normalized(SplitNet(), ModelSpec(architecture="split", num_classes=2, input_size=(3, 4, 4)))
    x = torch.rand(3, 3, 4, 4)
    y = torch.zeros(3, dtype=torch.long)
    robust = torch.tensor([True, False, True])
    assert torch.equal(recheck_fp32(m, robust, x, x, y), robust)        # fp32 model: nothing re-checked
    with inference_settings(m, precision="bf16"):
        assert not recheck_fp32(m, robust, x, x, y).any()               # fp32 disagrees: not robust


def test_attack_memory_divides_the_micro_batch(tiny_vit):
    sizes = []
    tiny_vit.net.register_forward_hook(lambda m, i, o: sizes.append(len(i[0])))
    atk = create_attack("pgd", tiny_vit, eps="4/255", steps=1, restarts=4)
    x, y = torch.rand(8, 3, 16, 16), torch.zeros(8, dtype=torch.long)
    with inference_settings(tiny_vit, micro_batch=8), attack_memory(tiny_vit, atk, 5):
        assert tiny_vit.micro_batch == 2
        atk(x, y)
    assert tiny_vit.micro_batch is None and max(sizes) == 2     # 4 restarts × 8 images, 2 at a time


def test_resume_with_another_batch_size_gives_identical_results(checkpoint, tmp_path, monkeypatch):
    suites = ["clean", "pgd:checks=0:steps=3", "corruptions:severities=2:corruptions=gaussian_noise+jpeg_compression"]
    cfg = dict(models=[checkpoint], data=DATA, suites=suites, device="cpu", progress=False)
    whole = run_eval(EvalConfig(out=str(tmp_path / "a"), batch_size=16, **cfg))["vit"]
    assert 0 < whole["suites"]["clean"]["top1"] < 1
    assert whole["suites"]["pgd:checks=0:steps=3"]["accuracy"] < whole["suites"]["clean"]["top1"]
    put, calls = UnitStore.put, []

    def dying_put(self, *a, **k):
        calls.append(a)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return put(self, *a, **k)
    monkeypatch.setattr(UnitStore, "put", dying_put)
    with pytest.raises(KeyboardInterrupt):
        run_eval(EvalConfig(out=str(tmp_path / "b"), batch_size=16, **cfg))
    monkeypatch.setattr(UnitStore, "put", put)
    resumed = run_eval(EvalConfig(out=str(tmp_path / "b"), batch_size=5, **cfg))["vit"]
    assert resumed["run"]["chunk_size"] == 16 and resumed["run"]["batch_size"] == 5
    assert _suites(resumed) == _suites(whole)


def _oom_model(limit: int) -> Normalized:
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10)
    inner = m.model.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if len(x) > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return inner(x)
    m.model.forward = forward
    return m


def test_out_of_memory_halves_the_forward_batch_and_says_so_once(tmp_path):
    ref = run_eval(EvalConfig(models=[_oom_model(1000)], data=DATA, suites=["clean"], out=str(tmp_path / "r"),
                              batch_size=16, device="cpu", progress=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_eval(EvalConfig(models=[_oom_model(3)], data=DATA, suites=["clean"], out=str(tmp_path / "o"),
                                  batch_size=16, device="cpu", progress=False))
    said = [w for w in caught if "out of GPU memory" in str(w.message)]
    assert len(said) == 1 and "halved" in str(said[0].message)
    assert _suites(res["vit_cifar_tiny"]) == _suites(ref["vit_cifar_tiny"])
    with pytest.raises(RobustvitError, match="one image per forward pass"):
        run_eval(EvalConfig(models=[_oom_model(0)], data=DATA, suites=["clean"], out=str(tmp_path / "z"),
                            batch_size=4, device="cpu", progress=False))


def test_fingerprint_names_the_device_type(checkpoint, tmp_path):
    out = tmp_path / "e"
    run_eval(EvalConfig(models=[checkpoint], data=DATA, out=str(out), device="cpu", progress=False))
    with UnitStore(out) as store:
        fp = json.loads(store.fingerprint_text())
        assert fp["device"] == "cpu"
        fp["device"] = "cuda"       # as a shard computed on a GPU would have written it
        store.db.execute("UPDATE fingerprints SET value=? WHERE scope='run'", (json.dumps(fp),))
    with pytest.raises(RobustvitError, match="other settings \\(device\\)"):
        run_eval(EvalConfig(models=[checkpoint], data=DATA, out=str(out), device="cpu", progress=False))


def test_deterministic_turns_torch_deterministic_on_for_the_run_only(checkpoint, tmp_path, monkeypatch):
    from robustvit.evaluation.suites.clean import Clean

    seen = []
    run = Clean.run
    monkeypatch.setattr(Clean, "run", lambda self, *a: (seen.append(torch.are_deterministic_algorithms_enabled()),
                                                        run(self, *a))[1])
    run_eval(EvalConfig(models=[checkpoint], data=DATA, out=str(tmp_path / "d"), device="cpu", deterministic=True,
                        progress=False))
    assert seen and all(seen) and not torch.are_deterministic_algorithms_enabled()


def test_bad_precision_is_one_line(checkpoint, tmp_path):
    with pytest.raises(RobustvitError, match="--precision must be one of auto, fp32, tf32, bf16"):
        run_eval(EvalConfig(models=[checkpoint], data=DATA, out=str(tmp_path / "x"), precision="half"))
