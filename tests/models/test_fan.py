"""FAN (Zhou et al., arXiv:2204.12451): sizes, shapes, the attention interface, the channel gate, checkpoints."""

import math

import pytest
import timm
import torch

from robustvit.cli import main
from robustvit.errors import RobustvitError
from robustvit.models import create_model, list_models, load_checkpoint, save_checkpoint
from robustvit.models.fan import FAN, ChannelProcessing, TokenMixing
from robustvit.models.probe import ViTProbe

# Parameter counts from the paper / NVlabs/FAN README (ImageNet-1k heads).
PAPER_PARAMS = {"fan_tiny_12_p16_224": 7.3e6, "fan_small_12_p16_224": 28.0e6, "fan_base_18_p16_224": 54.0e6,
                "fan_large_24_p16_224": 80.5e6, "fan_tiny_8_p4_hybrid": 7.4e6, "fan_small_12_p4_hybrid": 26.3e6,
                "fan_base_16_p4_hybrid": 50.4e6, "fan_large_16_p4_hybrid": 76.8e6}
CIFAR = ("fan_cifar_micro", "fan_cifar_tiny", "fan_cifar_small")


def _count(name: str) -> int:
    with torch.device("meta"):
        net = timm.create_model(name)
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "large" in n or "base" in n else n
                                  for n in PAPER_PARAMS])
def test_parameter_count_matches_paper(name):
    assert abs(_count(name) / PAPER_PARAMS[name] - 1) < 0.02


def test_registered_in_timm_and_listed():
    names = set(list_models("fan*"))
    assert set(PAPER_PARAMS) | set(CIFAR) <= names
    assert all(timm.is_model(n) for n in names)


@pytest.mark.parametrize("name,size,classes", [("fan_tiny_12_p16_224", 224, 1000), ("fan_tiny_8_p4_hybrid", 224, 1000),
                                               ("fan_cifar_micro", 32, 10), ("fan_cifar_tiny", 32, 10)])
def test_output_shapes_and_spec(name, size, classes):
    torch.manual_seed(0)
    m = create_model(name).eval()
    assert m.spec.input_size == (3, size, size) and m.spec.num_classes == classes
    assert m.spec.family == "fan" and m.spec.patch_size == (16 if size == 224 else 4)
    with torch.no_grad():
        out = m(torch.rand(2, 3, size, size))
        tokens = m.net.forward_features(torch.rand(2, 3, size, size))
    grid = size // m.spec.patch_size
    assert out.shape == (2, classes) and torch.isfinite(out).all()
    assert tokens.shape == (2, grid * grid, m.net.embed_dim)
    assert m.net.patch_embed.grid_size == (grid, grid)


def test_fourier_positions_need_no_interpolation():
    m = create_model("fan_cifar_micro", num_classes=3).eval()
    with torch.no_grad():
        assert m(torch.rand(1, 3, 64, 64)).shape == (1, 3)          # 16×16 tokens from a 32-px model
        assert m.net(torch.rand(1, 3, 32, 48)).shape == (1, 3)      # non-square grid through the model's forward


def test_cifar_patch4_embedding_has_two_stride2_convs():
    pe = create_model("fan_cifar_tiny").net.patch_embed
    convs = [m for m in pe.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.stride for c in convs] == [(2, 2), (2, 2)] and [c.out_channels for c in convs] == [96, 192]
    pe16 = timm.create_model("fan_tiny_12_p16_224").patch_embed
    assert [c.out_channels for c in pe16.modules() if isinstance(c, torch.nn.Conv2d)] == [24, 48, 96, 192]


def test_forward_with_attention_equals_forward():
    torch.manual_seed(0)
    attn = TokenMixing(32, num_heads=4).eval()
    x = torch.randn(3, 10, 32)
    out, a = attn.forward_with_attention(x)
    assert a.shape == (3, 4, 10, 10)
    torch.testing.assert_close(out, attn(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.sum(-1), torch.ones(3, 4, 10))
    assert (a >= 0).all()
    # a hand-written softmax(q kᵀ / √d) for head 0
    q, k, _ = attn.qkv(x).reshape(3, 10, 3, 4, 8).permute(2, 0, 3, 1, 4)
    torch.testing.assert_close(a[:, 0], torch.softmax(q[:, 0] @ k[:, 0].transpose(1, 2) / math.sqrt(8), -1))


def test_forward_with_attention_mask():
    attn = TokenMixing(16, num_heads=2).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[:, 3:] = False                      # nobody may attend to tokens 3 and 4
    _, a = attn.forward_with_attention(x, mask)
    assert (a[..., 3:] == 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 5))
    additive = torch.zeros(5, 5).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(attn.forward_with_attention(x, additive)[1], a)


def test_channel_processing_matches_the_per_head_formula():
    """gate[h, c] = sigmoid(Σ_t softmax_t(q)[t, h, c] · mean_c' softmax_t(x)[t, h, c']) · τ_h; out = gate ⊙ v."""
    torch.manual_seed(0)
    cp = ChannelProcessing(8, num_heads=2, mlp_ratio=2.0).eval()
    with torch.no_grad():
        cp.temperature.copy_(torch.tensor([0.5, 2.0]))
    x = torch.randn(2, 9, 8)
    q = cp.q(x)
    v = cp.norm_v(cp.mlp_v(x, (3, 3)))
    expect = torch.empty_like(v)
    for b in range(2):
        for h in range(2):
            cols = slice(4 * h, 4 * h + 4)
            qs = torch.softmax(q[b, :, cols], dim=0)                 # (T, c) softmax over tokens
            kbar = torch.softmax(x[b, :, cols], dim=0).mean(1)       # (T,) token prototype
            gate = torch.sigmoid(qs.T @ kbar) * cp.temperature[h]    # (c,)
            expect[b, :, cols] = v[b, :, cols] * gate
    torch.testing.assert_close(cp(x, (3, 3)), expect)
    torch.testing.assert_close(cp(x), expect)                         # square grid inferred
    with pytest.raises(RobustvitError, match="grid"):
        cp(torch.randn(1, 6, 8))


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    m = create_model("fan_cifar_micro", depth=2, num_classes=4).train()
    loss = torch.nn.functional.cross_entropy(m(torch.rand(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_layerscale_drop_path_and_weight_decay_defaults():
    net = timm.create_model("fan_cifar_micro")
    for blk in net.blocks:
        assert torch.equal(blk.ls1.gamma, torch.ones(128)) and torch.equal(blk.ls2.gamma, torch.ones(128))
        assert isinstance(blk.drop_path1, torch.nn.Identity) and isinstance(blk.drop_path2, torch.nn.Identity)
        assert blk.norm1.eps == 1e-6 and blk.mlp.norm_v.eps == 1e-5
    net = timm.create_model("fan_cifar_micro", drop_path_rate=0.1)
    assert {blk.drop_path1.drop_prob for blk in net.blocks} == {0.1}   # the same rate in every block
    assert "blocks.3.mlp.temperature" in net.weight_decay_vectors() and "blocks.3.mlp.temperature" not in net.no_weight_decay()
    assert net.blocks[3].mlp.temperature.ndim == 1   # decayed as NVlabs/FAN does (timm's default no-decay rule)
    assert net.num_prefix_tokens == 0 and isinstance(net.norm, torch.nn.Identity)


def test_large_hybrid_head_is_scaled_down():
    with torch.device("meta"):
        net = FAN(embed_dim=48, depth=1, num_heads=2, hybrid_depths=(1, 1), head_init_scale=1e-3)
    assert net.head.weight.shape == (1000, 48)
    net = FAN(img_size=64, embed_dim=48, depth=1, num_heads=2, num_classes=10, hybrid_depths=(1, 1),
              head_init_scale=1e-3)
    assert 0 < net.head.weight.abs().max() < 1e-4        # N(0, 0.02) × 0.001


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    m = create_model("fan_cifar_micro", num_classes=5, depth=2).eval()
    with torch.no_grad():                        # non-default BN statistics must survive too
        m.net.patch_embed.proj[0][1].running_mean.add_(0.3)
    save_checkpoint(m, tmp_path / "ck")
    m2 = load_checkpoint(tmp_path / "ck").eval()
    assert m2.spec.architecture == "fan_cifar_micro" and m2.spec.kwargs["depth"] == 2 and m2.spec.num_classes == 5
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), m(x))
    assert isinstance(create_model(str(tmp_path / "ck")).net, FAN)


def test_probe_runs_fan():
    torch.manual_seed(0)
    m = create_model("fan_cifar_micro", depth=2).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        out = ViTProbe(m).run(x, attentions=True)
        torch.testing.assert_close(out.logits, m(x), atol=1e-5, rtol=1e-5)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (2, 4, 64, 64)


def test_errors():
    with pytest.raises(RobustvitError, match="pretrained"):
        create_model("fan_cifar_micro", pretrained=True)
    with pytest.raises(RobustvitError, match="power of 2"):
        FAN(img_size=30, patch_size=6, embed_dim=32, depth=1, num_heads=2)
    with pytest.raises(RobustvitError, match="divisible"):
        FAN(img_size=32, patch_size=4, embed_dim=30, depth=1, num_heads=4)


def test_train_and_eval_cli(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--model", "fan_cifar_tiny", "--model-kwargs", '{"depth": 1, "embed_dim": 32, "num_heads": 2}',
                 "--data", "synthshapes:train,count=32", "--epochs", "1", "--batch-size", "16", "--out", str(out)])
    assert code == 0 and (out / "checkpoint" / "model.safetensors").is_file()
    code = main(["eval", "--model", str(out / "checkpoint"), "--data", "synthshapes:test,count=20",
                 "--suite", "clean", "--out", str(tmp_path / "ev")])
    assert code == 0
