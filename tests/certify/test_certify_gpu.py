"""Certification on CUDA (skipped without a GPU): the noise is drawn on the device from the device's generator, the
counts stay there until the one host read, and the certificates follow the same closed forms as on the CPU."""

import numpy as np
import pytest
import torch
from scipy.stats import norm

from robustvit.certify.ablation import AblatedModel, Ablation, ablation_counts
from robustvit.certify.smoothing import certify
from robustvit.models import create_model

from test_certify_smoothing import Constant, Threshold, wrapped

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def test_constant_and_threshold_certificates_on_cuda():
    sigma, n, alpha = 0.5, 400, 0.001
    model = wrapped(Constant(2), 4).to(CUDA)
    cert = certify(model, torch.rand(3, 3, 4, 4, device=CUDA), sigma=sigma, n0=10, n=n, alpha=alpha, num_classes=4,
                   batch=256, generator=torch.Generator(CUDA).manual_seed(0))
    assert cert.predict.tolist() == [2, 2, 2]
    np.testing.assert_allclose(cert.radius, sigma * norm.ppf(alpha ** (1 / n)), rtol=1e-9)
    t, n = 0.3, 20_000
    x = torch.zeros(2, 3, 4, 4, device=CUDA)
    x[:, 0, 0, 0] = torch.tensor([0.45, 0.6], device=CUDA)
    cert = certify(wrapped(Threshold(t), 2).to(CUDA), x, sigma=0.25, n0=100, n=n, alpha=alpha, num_classes=2,
                   batch=20_000, generator=torch.Generator(CUDA).manual_seed(1))
    true = (x[:, 0, 0, 0] - t).cpu().numpy()
    assert cert.predict.tolist() == [1, 1] and np.all(cert.radius <= true) and np.all(cert.radius >= true - 0.02)


def test_dropped_token_votes_on_cuda_equal_the_cpu_votes():
    """ViT token dropping on the device: the same votes as on the CPU (up to argmax ties at rounding)."""
    torch.manual_seed(0)
    model = create_model("vit_cifar_micro", num_classes=10).eval()
    x, band = torch.rand(4, 3, 32, 32), Ablation("column", 4)
    cpu = ablation_counts(AblatedModel(model, "drop"), x, band, 10)
    gpu = ablation_counts(AblatedModel(model.to(CUDA), "drop"), x.to(CUDA), band, 10)
    assert gpu.device.type == "cuda" and cpu.sum() == gpu.sum()
    assert (cpu - gpu.cpu()).abs().sum() <= 2


def test_levine_feizi_input_and_threshold_votes_on_cuda_equal_the_cpu():
    """The 6-channel input is built on the device from a CPU-made mask; θ votes counted there equal the CPU's."""
    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5, in_chans=6).eval()
    x, band = torch.rand(3, 3, 32, 32), Ablation("column", 4)
    cpu = ablation_counts(AblatedModel(model, encoding="levine_feizi"), x, band, 5, threshold=0.2)
    gpu = ablation_counts(AblatedModel(model.to(CUDA), encoding="levine_feizi"), x.to(CUDA), band, 5, threshold=0.2)
    assert gpu.device.type == "cuda" and (cpu - gpu.cpu()).abs().sum() <= 2
    with torch.no_grad():
        keep = band.keep(torch.tensor([7]), 32, 32).expand(3, -1, -1)
        torch.testing.assert_close(model(x.to(CUDA), keep=keep.to(CUDA)).cpu(), model.cpu()(x, keep=keep),
                                   rtol=1e-4, atol=1e-4)


def test_smoothadv_attack_and_loss_on_cuda():
    """SmoothAdv's PGD on the device: the same adversarial images as on the CPU for the same noise, inside the
    L2 ball; one training step of the loss draws its noise with a device generator."""
    from robustvit.certify.smoothadv import smoothadv_pgd
    from robustvit.training.losses import create_loss

    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5).eval()
    x, y = torch.rand(4, 3, 32, 32), torch.randint(0, 5, (4,))
    noise = 0.25 * torch.randn(4, 2, 3, 32, 32)
    cpu = smoothadv_pgd(model, x, y, noise, 0.5, 3)
    gpu = smoothadv_pgd(model.to(CUDA), x.to(CUDA), y.to(CUDA), noise.to(CUDA), 0.5, 3,
                        torch.Generator(CUDA).manual_seed(0))
    assert gpu.device.type == "cuda" and ((gpu - x.to(CUDA)).flatten(1).norm(dim=1) <= 0.5 + 1e-5).all()
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-3, atol=1e-3)
    loss, logits, _ = create_loss("smoothadv", steps="2", m="2")(model.train(), x.to(CUDA), y.to(CUDA), 0)
    loss.backward()
    assert logits.device.type == "cuda" and torch.isfinite(loss)
