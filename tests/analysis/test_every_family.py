"""Every analysis on every analysis family it claims — ViT, DeiT (distilled), CaiT (read as vit), XCiT, Swin, FAN,
CNN — two configurations each (depths, token counts, prefix tokens), with non-trivial weights (every norm's gain
~N(1, 0.5) and bias ~N(0, 0.3), LayerScale gains ~N(1, 0.5), a N(0, 1) head): the result has no NaN or infinity
anywhere, no internal error escapes (a refusal is a one-line RobustvitError), and attention_stability's figures,
which draw the attention maps themselves (CaiT's talking-heads maps can be negative), are drawn
(``test_contract`` draws every figure on a ViT, a CNN and a FAN)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from robustvit.analysis import analyses_for, family_of, get_analysis
from robustvit.data import TensorImageDataset
from robustvit.errors import RobustvitError
from robustvit.models import create_model

#: (id, model name, constructor keywords, image size, analysis family)
CONFIGS = [
    ("vit_cls_d2", "vit_cifar_tiny", dict(embed_dim=32, depth=2, num_heads=2, img_size=16), 16, "vit"),
    ("vit_gap_d3_64tok", "vit_cifar_micro", dict(embed_dim=24, depth=3, num_heads=2, img_size=32), 32, "vit"),
    ("deit_dist_d1", "deit_tiny_distilled_patch16_224", dict(embed_dim=32, depth=1, num_heads=2, img_size=32,
                                                             patch_size=8), 32, "deit"),
    ("deit3_d2_layerscale", "deit3_small_patch16_224", dict(embed_dim=32, depth=2, num_heads=2, img_size=16,
                                                            patch_size=4), 16, "deit"),
    ("cait_d2_t1", "cait_xxs24_224", dict(embed_dim=48, depth=2, num_heads=2, img_size=32, patch_size=8,
                                          depth_token_only=1), 32, "vit"),
    ("cait_d1_t2_64tok", "cait_xxs24_224", dict(embed_dim=32, depth=1, num_heads=2, img_size=32, patch_size=4,
                                                depth_token_only=2), 32, "vit"),
    ("xcit_d1", "xcit_nano_12_p16_224", dict(embed_dim=32, depth=1, num_heads=2, img_size=32, patch_size=16), 32,
     "xcit"),
    ("xcit_d2_p8", "xcit_nano_12_p16_224", dict(embed_dim=32, depth=2, num_heads=2, img_size=32, patch_size=8), 32,
     "xcit"),
    ("swin_2stages", "swin_tiny_patch4_window7_224", dict(embed_dim=16, depths=(1, 1), num_heads=(1, 2),
                                                          window_size=4, img_size=32), 32, "swin"),
    ("swin_3stages", "swin_tiny_patch4_window7_224", dict(embed_dim=16, depths=(2, 1, 1), num_heads=(1, 2, 2),
                                                          window_size=2, img_size=32), 32, "swin"),
    ("fan_d2", "fan_tiny_12_p16_224", dict(embed_dim=32, depth=2, num_heads=2, img_size=32), 32, "fan"),
    ("fan_d1_p8", "fan_tiny_12_p16_224", dict(embed_dim=32, depth=1, num_heads=2, img_size=32, patch_size=8), 32,
     "fan"),
    ("resnet_cifar", "resnet_cifar18", dict(width_mult=0.0625), 16, "cnn"),
    ("resnet18_1111", "resnet18", dict(layers=(1, 1, 1, 1)), 32, "cnn"),
]
_LAYERSCALE = re.compile(r"(gamma\w*|ls\d*\.gamma|ls\d+)$")
#: Smoke options where an analysis class does not state its own (``smoke``).
SMOKE = {"lesion": {"samples": 1}, "attention_stability": {"masks": 2, "images": 1},
         "grouping": {"images": 1, "clusters": 2}, "attention_maps": {"images": 1},
         "perturbation_semantics": {"steps": 1, "classes": 1, "vis_steps": 1}, "restricted_attention": {"distances": [0, 1]}}


def perturb(net: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)

    def normal(t: torch.Tensor, mean: float, std: float) -> None:
        t.copy_(torch.randn(t.shape, generator=g) * std + mean)

    with torch.no_grad():
        done = set()
        for mod in net.modules():
            if isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) or "norm" in type(mod).__name__.lower():
                for name, mean, std in (("weight", 1.0, 0.5), ("bias", 0.0, 0.3)):
                    p = getattr(mod, name, None)
                    if isinstance(p, torch.Tensor) and p.is_floating_point():
                        normal(p, mean, std)
                        done.add(id(p))
        for name, p in net.named_parameters():
            if id(p) not in done and _LAYERSCALE.search(name):
                normal(p, 1.0, 0.5)
        head = net.get_classifier()
        if isinstance(head, nn.Linear):
            normal(head.weight, 0.0, 1.0)


def _finite(x, where: str = "result") -> None:
    if isinstance(x, float):
        assert math.isfinite(x), f"{where} = {x}"
    elif isinstance(x, torch.Tensor) and x.is_floating_point():
        assert torch.isfinite(x).all(), f"{where} has NaN/inf"
    elif isinstance(x, dict):
        for k, v in x.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _finite(v, f"{where}[{i}]")


@pytest.mark.parametrize("cid,name,kwargs,size,family", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_every_analysis_is_finite_on_every_family(cid, name, kwargs, size, family, tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    torch.manual_seed(0)
    model = create_model(name, num_classes=5, **kwargs)
    perturb(model.net, seed=len(cid))
    model.eval()
    assert family_of(model) == family
    g = torch.Generator().manual_seed(1)
    data = TensorImageDataset(torch.rand(4, 3, size, size, generator=g), torch.randint(0, 5, (4,), generator=g),
                              [str(i) for i in range(5)], spec="tensor:families")
    for aname in analyses_for(family):
        a = get_analysis(aname)
        opts = dict(getattr(a, "smoke", None) or SMOKE.get(aname, {}))
        try:
            r = a.apply(model, data, batch_size=4, **opts)
        except RobustvitError as e:                              # a refusal: one line, never an internal error
            assert "\n" not in str(e), f"{aname} on {cid}: {e}"
            continue
        _finite({k: v for k, v in r.items() if k != "_images"}, f"{aname}[{cid}]")
        if aname == "attention_stability":
            files = a.plot(r, tmp_path)
            assert files and all((tmp_path / Path(f).name).is_file() for f in files), f"{aname} on {cid}: figures {files}"
