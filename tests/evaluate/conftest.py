import pytest
import torch

from robustvit.models import create_model, save_checkpoint


@pytest.fixture(scope="module")
def sharp_vit_checkpoint(tmp_path_factory) -> str:
    """A seeded tiny ViT (16 px, 10 classes) with a sharp head, so that predictions vary and attacks flip some,
    saved as a checkpoint folder."""
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10)
    with torch.no_grad():
        m.net.head.weight.normal_(0, 3.0)
    path = tmp_path_factory.mktemp("ck") / "vit"
    save_checkpoint(m, path)
    return str(path)
