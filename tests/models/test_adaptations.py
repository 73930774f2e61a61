"""Checkpoints record every adaptation (new head, resolution, patch size, convolutional-stem strides), so that a
reloaded model is the same network: identical logits and identical stem strides (issue 21, item 5)."""

from __future__ import annotations

import json

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model, load_checkpoint, save_checkpoint
from robustvit.models.finetune import adapt_input, reset_head

XCIT = {"depth": 2, "embed_dim": 32, "num_heads": 2, "img_size": 32}


def _strides(model) -> list[tuple[int, int]]:
    return [tuple(c.stride) for c in model.net.patch_embed.proj.modules() if isinstance(c, torch.nn.Conv2d)]


def _perturb(model, seed: int = 3) -> None:
    """Non-trivial weights everywhere (a zero-initialised head would hide a wrong stem)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


@pytest.fixture
def adapted_xcit():
    torch.manual_seed(0)
    m = create_model("xcit_nano_12_p16_224", num_classes=7, **XCIT)
    adapt_input(m, img_size=32, patch_size=4)
    reset_head(m, 5)
    _perturb(m)
    return m.eval()


def test_adapted_xcit_reloads_as_the_same_network(tmp_path, adapted_xcit):
    m = adapted_xcit
    assert _strides(m) == [(1, 1), (1, 1), (2, 2), (2, 2)]
    save_checkpoint(m, tmp_path / "ck")
    rec = json.loads((tmp_path / "ck" / "spec.json").read_text())["spec"]["adaptations"]
    assert [a["op"] for a in rec] == ["adapt_input", "reset_head"]
    assert rec[0]["stem_strides"]["patch_embed.proj.0.0"] == [1, 1] and rec[0]["patch_size"] == 4
    again = load_checkpoint(tmp_path / "ck").eval()
    assert _strides(again) == _strides(m) and again.spec.patch_size == 4
    assert again.net.patch_embed.patch_size == 4
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(again(x), m(x))
        tokens, grid = again.net.patch_embed(x)
    assert grid == (8, 8)                           # 32 / 4, not 32 / 16


def test_a_spec_without_its_adaptations_is_refused(tmp_path, adapted_xcit):
    save_checkpoint(adapted_xcit, tmp_path / "ck")
    path = tmp_path / "ck" / "spec.json"
    meta = json.loads(path.read_text())
    del meta["spec"]["adaptations"]                 # the stem's strides are no longer recorded
    path.write_text(json.dumps(meta))
    with pytest.raises(RobustvitError, match="describes patch size 4 but the rebuilt"):
        load_checkpoint(tmp_path / "ck")


def test_an_adaptation_that_cannot_be_reapplied_is_refused(tmp_path, adapted_xcit):
    save_checkpoint(adapted_xcit, tmp_path / "ck")
    path = tmp_path / "ck" / "spec.json"
    good = path.read_text()
    meta = json.loads(good)
    meta["spec"]["adaptations"][0]["stem_strides"] = {"patch_embed.proj.9": [1, 1]}
    path.write_text(json.dumps(meta))
    with pytest.raises(RobustvitError, match="not a convolution") as e:
        load_checkpoint(tmp_path / "ck")
    assert "\n" not in str(e.value)
    meta = json.loads(good)
    meta["spec"]["adaptations"].append({"op": "warp_drive"})
    path.write_text(json.dumps(meta))
    with pytest.raises(RobustvitError, match="cannot re-apply"):
        load_checkpoint(tmp_path / "ck")
    meta = json.loads(good)
    meta["spec"]["adaptations"][0]["stem_strides"]["patch_embed.proj.0.0"] = [2, 2]   # strides give patch 8, spec 4
    path.write_text(json.dumps(meta))
    with pytest.raises(RobustvitError, match="patch size 4"):
        load_checkpoint(tmp_path / "ck")


def test_adapted_vit_reloads_with_identical_logits(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_micro", num_classes=10, embed_dim=32, depth=2, num_heads=2, img_size=32)
    adapt_input(m, img_size=48, interpolation="linear")
    reset_head(m, 3)
    _perturb(m)
    m.eval()
    save_checkpoint(m, tmp_path / "ck")
    again = create_model(str(tmp_path / "ck")).eval()
    assert again.net.pos_embed.shape == m.net.pos_embed.shape and tuple(again.net.patch_embed.grid_size) == (12, 12)
    x = torch.rand(2, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(again(x), m(x))
    assert [a["op"] for a in again.spec.adaptations] == ["adapt_input", "reset_head"]


def test_class_mapped_model_is_not_saved(tmp_path, tiny_resnet):
    tiny_resnet.map_classes([[0, 1], [2]])
    with pytest.raises(RobustvitError, match="class map"):
        save_checkpoint(tiny_resnet, tmp_path / "ck")
