import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe


def test_probe_matches_plain_forward_and_attention_is_stochastic(tiny_vit):
    x = torch.rand(3, 3, 16, 16)
    probe = ViTProbe(tiny_vit)
    out = probe.run(x, attentions=True)
    assert torch.allclose(out.logits, tiny_vit(x), atol=1e-5)
    net = tiny_vit.net
    h = net.norm_pre(net._pos_embed(net.patch_embed((x - tiny_vit.mean) / tiny_vit.std)))
    for blk, tok in zip(net.blocks, out.tokens):
        h = blk(h)
        assert torch.allclose(tok, h, atol=1e-5)
    assert len(out.attentions) == 2
    a = out.attentions[0]
    assert a.shape == (3, 2, 17, 17) and (a >= 0).all()
    assert torch.allclose(a.sum(-1), torch.ones(3, 2, 17), atol=1e-5)
    assert probe.num_tokens == 17 and probe.grid_size == (4, 4) and probe.patch_size == 4


def test_probe_does_not_change_the_model(tiny_vit):
    fused = [b.attn.fused_attn for b in tiny_vit.net.blocks]
    ViTProbe(tiny_vit).run(torch.rand(1, 3, 16, 16), attentions=True)
    assert [b.attn.fused_attn for b in tiny_vit.net.blocks] == fused


def test_removals(tiny_vit):
    x = torch.rand(2, 3, 16, 16)
    probe = ViTProbe(tiny_vit)
    full = probe.run(x)
    no_block = probe.run(x, remove={1: "block"})
    # removing the last block: its output equals the previous block's output
    assert torch.allclose(no_block.tokens[1], full.tokens[0], atol=1e-6)
    both = probe.run(x, remove={1: "attn"})
    blk = tiny_vit.net.blocks[1]
    expected = full.tokens[0] + blk.ls2(blk.mlp(blk.norm2(full.tokens[0])))
    assert torch.allclose(both.tokens[1], expected, atol=1e-5)
    no_mlp = probe.run(x, remove={0: "mlp"})
    assert not torch.allclose(no_mlp.logits, full.logits)
    with pytest.raises(RobustvitError, match="invalid"):
        probe.run(x, remove={5: "block"})


def test_attention_mask(tiny_vit):
    x = torch.rand(2, 3, 16, 16)
    probe = ViTProbe(tiny_vit)
    eye = torch.eye(probe.num_tokens, dtype=torch.bool)
    out = probe.run(x, attentions=True, attn_mask=eye)
    for a in out.attentions:
        assert torch.allclose(a, eye.float().expand_as(a), atol=1e-6)
    only_first = probe.run(x, attentions=True, attn_mask={0: eye})
    assert torch.allclose(only_first.attentions[0], eye.float().expand_as(only_first.attentions[0]))
    assert not torch.allclose(only_first.attentions[1], eye.float().expand_as(only_first.attentions[1]))
    # an all-True mask changes nothing
    assert torch.allclose(probe.run(x, attn_mask=torch.ones_like(eye)).logits, tiny_vit(x), atol=1e-5)


def test_unsupported_model_error(tiny_resnet):
    with pytest.raises(RobustvitError, match="supports timm VisionTransformer"):
        ViTProbe(tiny_resnet)
