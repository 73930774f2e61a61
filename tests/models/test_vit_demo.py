"""``vit_cifar_demo``: a ViT on a convolutional stem (Xiao et al., arXiv:2106.14881) that the ViT tools accept."""

import pytest
import torch

from robustvit.models import create_model, load_checkpoint, save_checkpoint
from robustvit.models.cifar import ConvStemPatchEmbed
from robustvit.models.probe import ViTProbe


def test_conv_stem_keeps_the_vit_token_grid():
    pe = ConvStemPatchEmbed(img_size=32, patch_size=4, embed_dim=24, stem_width=8)
    assert pe.grid_size == (8, 8) and pe.patch_size == (4, 4)
    convs = [m for m in pe.stem if isinstance(m, torch.nn.Conv2d)] + [pe.proj]
    assert [(c.kernel_size, c.stride, c.out_channels) for c in convs] == [((3, 3), (2, 2), 8), ((3, 3), (2, 2), 16),
                                                                         ((1, 1), (1, 1), 24)]
    assert pe(torch.rand(2, 3, 32, 32)).shape == (2, 64, 24)
    with pytest.raises(ValueError, match="power-of-2"):
        ConvStemPatchEmbed(patch_size=6)


def test_demo_vit_probe_and_checkpoint(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_demo", depth=2).eval()
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        out = ViTProbe(m).run(x, attentions=True)
        torch.testing.assert_close(out.logits, m(x), atol=1e-5, rtol=1e-5)
    assert out.attentions[0].shape == (3, 4, 64, 64)          # no CLS token: global average pooling
    assert m.spec.patch_size == 4 and m.spec.family == "vit"
    save_checkpoint(m, tmp_path / "ck")
    with torch.no_grad():
        torch.testing.assert_close(load_checkpoint(tmp_path / "ck").eval()(x), m(x))
