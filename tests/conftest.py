import os
import sys
from pathlib import Path

import pytest
import torch

# Two threads on the CI machine's 2 cores, shared by the test processes (`make test` runs pytest-xdist workers);
# OMP_NUM_THREADS=1 when the cores are shared with other jobs.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", max(1, min(2, os.cpu_count() or 1) // _WORKERS))))
# frost's source must not depend on whether imagecorruptions happens to be installed (tests set it explicitly)
os.environ.setdefault("ROBUSTVIT_FROST_DIR", "procedural")

# ``import families``: the conformance suite's tiny configurations of timm's families, for every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "conformance"))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (real images for development; absent on most machines: tests skip)."""
    return SHARED_DATA


#: The slowest test files (minutes on the CI machine's cores), run first: under ``--dist loadfile`` a worker takes
#: each while the others share the rest, rather than one of them running alone at the end.
SLOW_FIRST = ("test_demo.py", "test_readme.py", "test_first_hour.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: SLOW_FIRST.index(item.path.name) if item.path.name in SLOW_FIRST else len(SLOW_FIRST))
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


@pytest.fixture
def tiny_vit16() -> torch.nn.Module:
    """A bare seeded timm ViT for 3×16×16 inputs, for attacks that need attention maps (patch 4, width 32, 4 blocks, 2 heads, CLS token, mean-pooled)."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=4, num_heads=2, num_classes=10,
                            global_pool="avg").eval()
    with torch.no_grad():
        vit.head.weight.normal_(0, 1.0)    # timm's tiny head init makes a random ViT nearly constant
    return vit
