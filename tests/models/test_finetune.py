import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed

from robustvit.errors import RobustvitError
from robustvit.models import create_model, save_checkpoint
from robustvit.models.finetune import adapt_input, reset_head, resample_pos_embed

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2}


def test_pos_embed_resampling_is_the_identity_for_the_same_grid():
    pe = torch.randn(1, 1 + 64, 8)
    for mode in ("bicubic", "linear"):
        assert torch.equal(resample_pos_embed(pe, (8, 8), (8, 8), 1, mode), pe)


def test_bicubic_matches_timm_and_linear_keeps_corners():
    pe = torch.randn(1, 1 + 16, 8)
    ours = resample_pos_embed(pe, (6, 6), (4, 4), 1, "bicubic")
    assert torch.equal(ours, resample_abs_pos_embed(pe, [6, 6], [4, 4], num_prefix_tokens=1, antialias=False))
    lin = resample_pos_embed(pe, (7, 7), (4, 4), 1, "linear")
    assert lin.shape == (1, 1 + 49, 8) and torch.equal(lin[:, 0], pe[:, 0])       # CLS kept
    old, new = pe[0, 1:].view(4, 4, 8), lin[0, 1:].view(7, 7, 8)
    for (i, j), (k, m) in {(0, 0): (0, 0), (3, 3): (6, 6), (0, 3): (0, 6)}.items():
        assert torch.allclose(new[k, m], old[i, j], atol=1e-6)                     # aligned corners (scipy zoom)
    assert torch.allclose(new[0, 1], (old[0, 1] + old[0, 0]) / 2, atol=1e-6)       # new 1 ↔ old 0.5: mean of neighbours
    with pytest.raises(RobustvitError, match="interpolation"):
        resample_pos_embed(pe, (6, 6), (4, 4), 1, "nearest")


def test_zero_initialised_head():
    m = create_model("vit_cifar_micro", num_classes=10, **TINY)
    reset_head(m, 3)
    assert m.spec.num_classes == 3 and m.spec.kwargs["num_classes"] == 3
    out = m(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, 3) and torch.equal(out, torch.zeros(2, 3))


def test_new_resolution_and_patch_size_survive_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_micro", num_classes=4, **TINY)
    w = m.net.patch_embed.proj.weight.detach().clone()
    adapt_input(m, img_size=16, patch_size=2, interpolation="linear")
    assert m.net.pos_embed.shape[1] == 64 and m.spec.input_size == (3, 16, 16) and m.spec.patch_size == 2
    assert m.net.patch_embed.proj.weight.shape[-1] == 2
    from timm.layers import resample_patch_embed
    assert torch.allclose(m.net.patch_embed.proj.weight, resample_patch_embed(w, [2, 2]))
    x = torch.rand(2, 3, 16, 16)
    m.eval()
    save_checkpoint(m, tmp_path / "ck")
    again = create_model(str(tmp_path / "ck")).eval()
    assert torch.allclose(again(x), m(x))


def test_conv_stem_gets_stride_one():
    net = timm.create_model("xcit_nano_12_p16_224", num_classes=10)
    from robustvit.models.factory import spec_from_timm
    from robustvit.models.wrapper import Normalized

    m = Normalized(net, spec_from_timm("xcit_nano_12_p16_224", net, {}))
    adapt_input(m, img_size=32, patch_size=4)
    strides = [c.stride for c in m.net.patch_embed.proj.modules() if isinstance(c, torch.nn.Conv2d)]
    assert strides == [(1, 1), (1, 1), (2, 2), (2, 2)] and m.spec.patch_size == 4
    tokens, (hp, wp) = m.net.patch_embed(torch.rand(1, 3, 32, 32))
    assert (hp, wp) == (8, 8)
    with pytest.raises(RobustvitError, match="stem"):
        adapt_input(m, patch_size=3)


def test_finetune_command(tmp_path):
    from robustvit.cli import main
    from robustvit.training import TrainConfig, train

    src = train(TrainConfig(model="vit_cifar_micro", data="synthshapes:train,count=32,size=32,classes=4",
                            out=str(tmp_path / "src"), epochs=1, batch_size=16, model_kwargs=TINY, device="cpu"),
                progress=False)
    assert main(["finetune", "--model", str(src), "--data", "synthshapes:train,count=32,size=16,classes=3",
                 "--out", str(tmp_path / "ft"), "--epochs", "1", "--batch-size", "16", "--img-size", "16",
                 "--loss", "fgsm_rs", "--eps", "4/255", "--device", "cpu"]) == 0
    m = create_model(str(tmp_path / "ft" / "checkpoint"))
    assert m.spec.num_classes == 3 and m.spec.input_size == (3, 16, 16) and m.net.pos_embed.shape[1] == 16
    assert main(["finetune", "--model", "vit_cifar_micro", "--data", "synthshapes:train,count=8,size=16",
                 "--out", str(tmp_path / "x")]) == 2                                  # neither checkpoint nor --pretrained
    assert main(["finetune", "--model", "vit_cifar_micro", "--pretrained", "--data", "synthshapes:train,count=8,size=16",
                 "--out", str(tmp_path / "y"), "--device", "cpu"]) == 2               # no published weights: one-line error
