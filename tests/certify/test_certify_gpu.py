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
