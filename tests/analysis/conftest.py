import pytest
import torch

from robustvit.data import TensorImageDataset


@pytest.fixture
def tiny_data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(12, 3, 16, 16, generator=g)
    y = torch.randint(0, 5, (12,), generator=g)
    return TensorImageDataset(x, y, [str(i) for i in range(5)], spec="tensor:tiny")


@pytest.fixture
def cls_vit():
    """A seeded robustvit-wrapped timm ViT with a CLS token (16 px, patch 4, 3 blocks) and a non-trivial head."""
    from robustvit.models import create_model

    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=3, num_heads=2, img_size=16, num_classes=5).eval()
    with torch.no_grad():
        m.net.head.weight.normal_(0, 1.0)
    m.weights = {"pretrained": True, "source": "file:seeded-test-weights"}   # stands for a trained model here:
    return m                                                                # the tests judge the protocol labels


def _standins():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("robustvit_test_standins", Path(__file__).with_name("standins.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def stand_in_fan():
    return _standins().stand_in_fan()
