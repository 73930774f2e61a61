"""FAN architectures (Zhou et al. 2022, arXiv:2204.12451): parameter counts, shapes, the explicit-attention
path, gradients and checkpoints."""

import pytest
import timm
import torch

from robustvit.models import create_model, load_checkpoint, save_checkpoint
from robustvit.models.fan import ChannelProcessing, FourierPositions, TokenMixing

#: The paper's Table (millions of parameters, 1000 classes); ours must be within 2 %.
PAPER_PARAMS = {"fan_tiny_12_p16_224": 7.3, "fan_small_12_p16_224": 28.0, "fan_base_18_p16_224": 54.0,
                "fan_large_24_p16_224": 80.5, "fan_tiny_8_p4_hybrid": 7.4, "fan_small_12_p4_hybrid": 26.3,
                "fan_base_16_p4_hybrid": 50.4, "fan_large_16_p4_hybrid": 76.8}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_parameter_count_matches_the_paper(name):
    with torch.device("meta"):
        net = timm.create_model(name)
    millions = sum(p.numel() for p in net.parameters()) / 1e6
    assert abs(millions - PAPER_PARAMS[name]) / PAPER_PARAMS[name] <= 0.02, millions


def test_imagenet_variant_shapes_and_spec():
    m = create_model("fan_tiny_12_p16_224").eval()
    assert m.spec.family == "fan" and m.spec.patch_size == 16 and m.spec.input_size == (3, 224, 224)
    with torch.no_grad():
        assert m(torch.rand(1, 3, 224, 224)).shape == (1, 1000)


def test_cifar_variant_trains_and_round_trips(tmp_path):
    torch.manual_seed(0)
    m = create_model("fan_cifar_tiny", num_classes=10, depth=2)
    x, y = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    torch.nn.functional.cross_entropy(m(x), y).backward()
    grads = {n: p.grad for n, p in m.net.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["blocks.0.mlp.temperature"].abs().sum() > 0 and grads["blocks.0.attn.q.weight"].abs().sum() > 0
    m.eval()
    save_checkpoint(m, tmp_path / "ck")
    again = load_checkpoint(tmp_path / "ck").eval()
    with torch.no_grad():
        assert torch.equal(m(x), again(x))


def test_forward_with_attention_matches_the_fused_forward():
    torch.manual_seed(0)
    attn = TokenMixing(32, num_heads=4).eval()
    x = torch.randn(2, 10, 32)
    out, a = attn.forward_with_attention(x)
    assert torch.allclose(out, attn(x), atol=1e-5)
    assert a.shape == (2, 4, 10, 10) and torch.allclose(a.sum(-1), torch.ones(2, 4, 10), atol=1e-6)
    # a mask letting every token attend only to itself makes the map the identity
    eye = torch.eye(10, dtype=torch.bool)
    _, a_eye = attn.forward_with_attention(x, eye)
    assert torch.equal(a_eye, eye.float().expand(2, 4, 10, 10))


def test_channel_processing_gate_is_the_papers_formula():
    """out = σ(softmaxₜ(q)ᵀ · mean_c softmaxₜ(k)) · τ ⊙ v, per head and channel (no output projection)."""
    torch.manual_seed(0)
    cp = ChannelProcessing(8, num_heads=2, mlp_ratio=2).eval()
    x = torch.randn(1, 4, 8)
    out = cp(x, 2, 2)
    q = cp.q(x).reshape(1, 4, 2, 4).transpose(1, 2)[0]          # (heads, N, c)
    k = x.reshape(1, 4, 2, 4).transpose(1, 2)[0]
    v = cp.norm_v(cp.mlp_v(x, 2, 2)).reshape(1, 4, 2, 4).transpose(1, 2)[0]
    for h in range(2):
        proto = k[h].softmax(0).mean(1)                           # (N,)
        gate = torch.sigmoid(q[h].softmax(0).T @ proto)           # (c,)
        expected = v[h] * gate                                    # (N, c)
        assert torch.allclose(out[0, :, h * 4:(h + 1) * 4], expected, atol=1e-6)


def test_fourier_positions_any_grid_and_no_weight_decay():
    pe = FourierPositions(16)
    assert pe(2, 3, 5).shape == (2, 16, 3, 5) and pe(1, 7, 7).shape == (1, 16, 7, 7)
    net = create_model("fan_cifar_tiny", depth=1).net
    assert "cls_token" in net.no_weight_decay() and "blocks.0.mlp.temperature" in net.no_weight_decay()
