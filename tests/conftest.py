import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (real images for development; absent on most machines: tests skip)."""
    return SHARED_DATA


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def tiny_vit():
    from robustvit.models import create_model

    torch.manual_seed(0)
    return create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=5).eval()


@pytest.fixture
def tiny_resnet():
    from robustvit.models import create_model

    torch.manual_seed(0)
    return create_model("resnet_cifar18", width_mult=0.0625, num_classes=5).eval()
