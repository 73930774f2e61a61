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


# -- BlockProbe: XCiT, Swin, FAN-like stand-ins, CNNs --------------------------------------------------------
def _stand_in_fan():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "analysis" / "standins.py"
    spec = importlib.util.spec_from_file_location("robustvit_test_standins", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.stand_in_fan()


def test_forward_with_attention_modules_are_probed_generically():
    from robustvit.models.probe import BlockProbe, make_probe
    m = _stand_in_fan()
    probe = make_probe(m)
    assert isinstance(probe, BlockProbe) and probe.family == "fan" and probe.maskable
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        out = probe.run(x, attentions=True)
        assert torch.allclose(out.logits, m(x), atol=1e-6)
        assert len(out.attentions) == 3 and out.attentions[0].shape == (2, 2, 16, 16)
        eye = torch.eye(16, dtype=torch.bool)
        masked = probe.run(x, attentions=True, attn_mask=eye)
        assert torch.allclose(masked.attentions[1], eye.float().expand(2, 2, 16, 16))
        # removing the attention branch: the block adds only its MLP
        blk = m.net.blocks[0]
        no_attn = probe.run(x, remove={0: "attn"})
        h = m.net.patch_embed((x - m.mean) / m.std)
        assert torch.allclose(no_attn.tokens[0], h + blk.gamma2 * blk.mlp(blk.norm2(h)), atol=1e-5)
    assert "forward" not in m.net.blocks[0].attn.__dict__           # the override is undone


def test_block_probe_on_xcit_and_swin_restores_fused_attention():
    from robustvit.models import create_model
    from robustvit.models.probe import make_probe
    torch.manual_seed(0)
    for name, kw in (("xcit_nano_12_p16_224", dict(img_size=32, depth=2)),
                     ("swin_tiny_patch4_window7_224", dict(img_size=56, depths=(2, 2), num_heads=(2, 4), embed_dim=16))):
        m = create_model(name, num_classes=5, **kw).eval()
        probe = make_probe(m)
        for a in probe.attn_modules:
            a.fused_attn = True
        x = torch.rand(2, 3, m.spec.image_size, m.spec.image_size)
        with torch.no_grad():
            out = probe.run(x, attentions=True)
            assert torch.allclose(out.logits, m(x), atol=1e-4)
        assert all(a.fused_attn for a in probe.attn_modules)
        assert len(out.attentions) == probe.num_blocks
        for a in out.attentions:
            assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-5)
    assert probe.family == "swin" and out.attentions[0].shape == (2, 2, 14 * 14, 49)


def test_cnn_residual_block_removal(tiny_resnet):
    from robustvit.models.probe import make_probe
    probe = make_probe(tiny_resnet)
    assert probe.family == "cnn" and probe.remove_modes == ("block",) and [len(s) for s in probe.stages] == [2, 2, 2, 2]
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        full = probe.run(x)
        out = probe.run(x, remove={1: "block"})       # an identity-shortcut block: output = input
        assert torch.equal(out.tokens[1], full.tokens[0])
        blk = tiny_resnet.net.stages[1][0]             # a downsampling block: projection shortcut + ReLU
        inp = full.tokens[1].transpose(1, 2).reshape(2, -1, 32, 32)
        out = probe.run(x, remove={2: "block"})
        ref = torch.relu(blk.shortcut(inp)).flatten(2).transpose(1, 2)
        assert torch.allclose(out.tokens[2], ref, atol=1e-6)
    with pytest.raises(RobustvitError, match="modes block"):
        probe.run(x, remove={1: "attn"})


def test_probe_of_a_six_channel_network_sees_what_its_forward_sees():
    """A derandomized-smoothing ViT (6 input channels, Levine & Feizi's encoding): the probe embeds the same
    network input as the wrapper's forward, so its logits and the analyses' self-check agree."""
    from robustvit.models import create_model

    torch.manual_seed(0)
    m = create_model("vit_cifar_micro", in_chans=6, num_classes=10).eval()
    x = torch.rand(3, 3, 32, 32)
    assert m.network_input(x).shape == (3, 6, 32, 32)
    with torch.no_grad():
        got = ViTProbe(m).run(x).logits
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-4)
