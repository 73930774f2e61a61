"""Attention stability (AFAT, arXiv:2306.07881) on Swin (different heads per stage), refusal of parallel
blocks, and the centre-patch picture against maps read from timm's own attention modules."""

import pytest
import torch

from robustvit.analysis import attention_stability, run_analyses
from robustvit.data import TensorImageDataset
from robustvit.errors import RobustvitError


@pytest.fixture
def data32():
    g = torch.Generator().manual_seed(1)
    return TensorImageDataset(torch.rand(6, 3, 32, 32, generator=g), torch.randint(0, 5, (6,), generator=g),
                              [str(i) for i in range(5)], spec="tensor:tiny32")


def _swin():
    from robustvit.models import create_model
    torch.manual_seed(0)
    return create_model("swin_tiny_patch4_window7_224", img_size=32, window_size=2, depths=(1, 1), embed_dim=16,
                        num_heads=(1, 2), num_classes=5).eval()


def test_swin_runs_with_a_ragged_head_count(data32):
    m = _swin()
    r = attention_stability(m, data32, rho=0.0, masks=2, images=2, batch_size=6)
    assert r["heads"] == [1, 2] and [len(c) for c in r["cosine"]] == [1, 2]
    assert r["cosine"] == [[1.0], [1.0, 1.0]] and r["mean"] == 1.0 and r["centre_patch"] is None
    r = attention_stability(m, data32, rho=0.5, masks=2, images=2, batch_size=6)
    flat = [v for row in r["cosine"] for v in row]
    assert all(0 < v < 1 for v in flat) and r["mean"] == pytest.approx(sum(flat) / 3)


def _timm_maps(model, x):
    """Softmax maps read at each timm Attention's ``attn_drop`` input with fused attention off."""
    maps, hs = [], []
    for b in model.net.blocks:
        b.attn.fused_attn = False
        hs.append(b.attn.attn_drop.register_forward_hook(lambda m, a, y: maps.append(a[0].detach())))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hs:
            h.remove()
    return maps


def test_centre_patch_maps_per_layer_clean_vs_occluded(cls_vit, tiny_data, tmp_path):
    r = attention_stability(cls_vit, tiny_data, rho=0.25, masks=2, images=2, batch_size=6)
    cp = r["centre_patch"]
    assert cp["patch"] == [2, 2] and len(cp["clean"]) == 3 and len(cp["clean"][0]) == 4
    x, _ = tiny_data.get_batch(torch.arange(2))
    want = [a[0, :, 1 + 2 * 4 + 2, 1:].mean(0).view(4, 4) for a in _timm_maps(cls_vit, x)]
    assert torch.allclose(torch.tensor(cp["clean"], dtype=torch.float32), torch.stack(want), atol=1e-5)
    occ = [a[0, :, 11, 1:].mean(0).view(4, 4) for a in _timm_maps(cls_vit, r["_occluded"])]
    assert torch.allclose(torch.tensor(cp["occluded"], dtype=torch.float32), torch.stack(occ), atol=1e-5)
    assert not torch.allclose(torch.stack(want), torch.stack(occ))
    from robustvit.analysis.stability import plot_stability
    files = plot_stability({**r, "model": "t"}, tmp_path)
    assert "attention_stability_maps.png" in files and (tmp_path / "attention_stability_maps.png").stat().st_size > 0


def test_stability_deviations_are_named(cls_vit, tiny_data):
    r = run_analyses(cls_vit, tiny_data, ["attention_stability:images=1:masks=100"], None, batch_size=12,
                     device="cpu")["attention_stability"]
    assert r["options"]["rho"] == 0.1 and r["protocol"]["comparable"] is True and r["protocol"]["deviations"] == []
    r = run_analyses(cls_vit, tiny_data, ["attention_stability:images=1:masks=3:rho=0.3"], None, batch_size=12,
                     device="cpu")["attention_stability"]
    assert r["protocol"]["comparable"] is False
    assert any("3 random masks" in n for n in r["protocol"]["deviations"]) and any("rho = 0.3" in n for n in r["protocol"]["deviations"])


def _cait():
    """The small CaiT of issue 35 (talking heads: maps mixed across heads after the softmax, may be < 0) with
    the zoo's non-trivial weights (``tests/conformance/families.perturb``: norms ~N(1, 0.5), LayerScale ~N(1, 0.5),
    constant-initialised parameters moved off their constant)."""
    import importlib.util
    import sys
    from pathlib import Path

    from robustvit.models import create_model

    spec = importlib.util.spec_from_file_location(
        "robustvit_zoo_families", Path(__file__).resolve().parents[1] / "conformance" / "families.py")
    zoo = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(zoo)
    torch.manual_seed(0)
    m = create_model("cait_xxs24_224", img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                     depth_token_only=1, num_classes=5)
    zoo.perturb(m.net, seed=0)
    return m.eval()


def test_cait_talking_heads_maps_give_a_full_histogram_and_a_picture(data32, tmp_path):
    m = _cait()
    r = run_analyses(m, data32, ["attention_stability:masks=2:images=1"], tmp_path, batch_size=6,
                     device="cpu")["attention_stability"]
    cp = torch.tensor(r["centre_patch"]["clean"])
    assert float(cp.min()) < 0                                      # negative talking-heads maps (the crash)
    h = r["histogram"]
    assert h["bins"][0] == -1.0 and h["bins"][-1] == 1.0 and sum(h["counts"]) == 6      # every image counted
    assert (tmp_path / "attention_stability" / "attention_stability_maps.png").is_file() or any(
        p.name == "attention_stability_maps.png" for p in tmp_path.rglob("*.png"))
    assert r["noise_space"] == "normalized"


def test_pixel_noise_is_recorded_and_noted(cls_vit, tiny_data):
    r = run_analyses(cls_vit, tiny_data, ["attention_stability:images=1:masks=100:noise_space=pixel"], None,
                     batch_size=12, device="cpu")["attention_stability"]
    assert r["noise_space"] == "pixel" and r["protocol"]["comparable"] is False and any("pixel space" in n for n in r["protocol"]["deviations"])
