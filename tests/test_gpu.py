"""CUDA checks (skipped without a GPU): the same numbers on the device as on the CPU."""

import pytest
import torch

from robustvit.models import create_model
from robustvit.models.probe import ViTProbe
from robustvit.training.augment import random_crop_flip

pytestmark = pytest.mark.gpu


def test_model_and_probe_agree_with_cpu(tiny_vit):
    x = torch.rand(4, 3, 16, 16)
    cpu = ViTProbe(tiny_vit).run(x, attentions=True)
    gpu_model = tiny_vit.cuda()
    gpu = ViTProbe(gpu_model).run(x.cuda(), attentions=True)
    assert torch.allclose(gpu.logits.cpu(), cpu.logits, atol=1e-4)
    assert torch.allclose(gpu.attentions[-1].cpu(), cpu.attentions[-1], atol=1e-4)


def test_augmentation_on_device_is_seeded():
    x = torch.rand(8, 3, 16, 16, device="cuda")
    a = random_crop_flip(x, torch.Generator("cuda").manual_seed(3))
    b = random_crop_flip(x, torch.Generator("cuda").manual_seed(3))
    assert torch.equal(a, b) and a.device.type == "cuda"


def test_train_and_eval_on_cuda(tmp_path):
    from robustvit.evaluation.runner import EvalConfig, run_eval
    from robustvit.training import TrainConfig, train

    ck = train(TrainConfig(model="resnet_cifar18", data="synthshapes:train,count=256,size=16", out=str(tmp_path / "t"),
                           epochs=1, batch_size=64, model_kwargs={"width_mult": 0.125}, device="cuda"), progress=False)
    res = run_eval(EvalConfig(models=[str(ck)], data="synthshapes:test,count=64,size=16", out=str(tmp_path / "e"),
                              device="cuda", progress=False))
    cpu = run_eval(EvalConfig(models=[str(ck)], data="synthshapes:test,count=64,size=16", out=str(tmp_path / "c"),
                              device="cpu", progress=False))
    (name, got), (_, ref) = next(iter(res.items())), next(iter(cpu.items()))     # keyed by the run's model name
    assert got["suites"]["clean"]["top1"] == pytest.approx(ref["suites"]["clean"]["top1"], abs=1 / 32), name
    assert create_model(str(ck)).spec.architecture == "resnet_cifar18"
