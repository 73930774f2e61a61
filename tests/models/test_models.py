import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model, list_models, load_checkpoint, save_checkpoint
from robustvit.models.factory import OWN_MODELS

TINY = {"vit_cifar_micro": dict(embed_dim=32, depth=2, num_heads=2), "vit_cifar_demo": dict(embed_dim=32, depth=2, num_heads=2), "vit_cifar_tiny": dict(embed_dim=32, depth=2, num_heads=2), "vit_cifar_small": dict(embed_dim=32, depth=2, num_heads=2),
        "resnet_cifar18": dict(width_mult=0.0625),
        **{name: dict(embed_dim=32, depth=1, num_heads=2, img_size=32) for name in OWN_MODELS if name.startswith("fan_")}}


@pytest.mark.parametrize("name", OWN_MODELS)
def test_own_models_forward_backward(name):
    torch.manual_seed(0)
    m = create_model(name, num_classes=7, **TINY[name])
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    out = m(x)
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)
    assert m.spec.num_classes == 7 and m.spec.input_size == (3, 32, 32)


def test_own_models_visible_to_timm_and_listed():
    import timm

    for name in OWN_MODELS:
        assert timm.is_model(name)
        assert name in list_models("*cifar*" if "cifar" in name else "fan_*")
    assert "vit_small_patch16_224" in list_models("vit_small*")


def test_timm_model_spec_and_normalisation():
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, num_classes=3).eval()
    assert m.spec.family == "vit" and m.spec.patch_size == 8 and m.spec.input_size == (3, 32, 32)
    x = torch.rand(2, 3, 32, 32)
    mean = torch.tensor(m.spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(m.spec.std).view(1, 3, 1, 1)
    assert torch.allclose(m(x), m.net((x - mean) / std), atol=1e-6)
    r = create_model("resnet18", num_classes=4)
    assert r.spec.family == "resnet" and r.spec.patch_size is None


def test_checkpoint_round_trip_identical_logits(tmp_path, tiny_vit):
    x = torch.rand(3, 3, 16, 16)
    save_checkpoint(tiny_vit, tmp_path / "ck")
    for loaded in (create_model(checkpoint=tmp_path / "ck"), create_model(str(tmp_path / "ck")), load_checkpoint(tmp_path / "ck")):
        loaded.eval()
        assert torch.equal(loaded(x), tiny_vit(x))
        assert loaded.spec == tiny_vit.spec


def test_checkpoint_errors(tmp_path, tiny_resnet):
    save_checkpoint(tiny_resnet, tmp_path / "ck")
    with pytest.raises(RobustvitError, match="holds a 'resnet_cifar18' model, not 'vit_cifar_tiny'"):
        create_model("vit_cifar_tiny", checkpoint=tmp_path / "ck")
    with pytest.raises(RobustvitError, match="does not exist"):
        create_model("resnet_cifar18", checkpoint=tmp_path / "nope")
    # a state-dict file for another class count
    torch.save(tiny_resnet.net.state_dict(), tmp_path / "w.pth")
    with pytest.raises(RobustvitError, match="do not fit architecture"):
        create_model("resnet_cifar18", width_mult=0.0625, num_classes=9, checkpoint=tmp_path / "w.pth")
    ok = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5, checkpoint=tmp_path / "w.pth").eval()
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(ok(x), tiny_resnet(x))
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(RobustvitError, match="cannot read weights"):
        create_model("resnet_cifar18", checkpoint=tmp_path / "bad.pth")


def test_pickled_code_is_not_executed(tmp_path):
    class Evil:
        def __reduce__(self):
            return (exec, ("open('%s', 'w').write('pwned')" % (tmp_path / "pwned"),))

    torch.save({"fc.weight": Evil()}, tmp_path / "evil.pth")
    with pytest.raises(RobustvitError):
        create_model("resnet_cifar18", checkpoint=tmp_path / "evil.pth")
    assert not (tmp_path / "pwned").exists()


def test_unknown_model_suggests_close_names():
    with pytest.raises(RobustvitError, match="did you mean.*vit_cifar_tiny"):
        create_model("vit_cifar_tiyn")


def test_wrong_input_gets_clear_error(tiny_resnet):
    with pytest.raises(RobustvitError, match=r"shape \(N, 3, H, W\)"):
        tiny_resnet(torch.rand(3, 32, 32))
    with pytest.raises(RobustvitError, match="float"):
        tiny_resnet(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))
