import pytest
import torch

from robustvit.models import create_model

TINY_VIT = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}


@pytest.fixture
def tiny_vit():
    torch.manual_seed(0)
    return create_model("vit_cifar_micro", num_classes=4, **TINY_VIT)


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(1)
    return torch.rand(16, 3, 16, 16, generator=g), torch.randint(0, 4, (16,), generator=g)
