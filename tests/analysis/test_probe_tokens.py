"""The analyses that read the probe's prefix tokens: registers are never CLS, patch-token analyses exclude
them, and parallel-block ViTs either run correctly or refuse in one line (never IndexError/RuntimeError)."""

from __future__ import annotations


import pytest
import torch

from robustvit.analysis.attention import attention_distance, attention_maps, attention_rollout, patch_distances
from robustvit.analysis.base import make_context
from robustvit.analysis.restricted import RestrictedOptions, compute_restricted, variants
from robustvit.analysis.stability import attention_stability
from robustvit.data import TensorImageDataset
from robustvit.errors import RobustvitError
from robustvit.models.probe import BlockProbe, ViTProbe


import families as FAM  # noqa: E402  (tests/conformance, on the path by tests/conftest.py)


def data(n: int = 4, size: int = 32) -> TensorImageDataset:
    g = torch.Generator().manual_seed(0)
    return TensorImageDataset(torch.rand(n, 3, size, size, generator=g), torch.randint(0, 7, (n,), generator=g),
                              [str(i) for i in range(7)], spec="tensor:probe")


def real_maps(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The model's own attention maps (fused attention off, read at every ``attn_drop``), per block, with
    parallel branches concatenated along the heads — computed here, not by the probe."""
    maps: list[list[torch.Tensor]] = [[] for _ in model.net.blocks]
    hooks, flags = [], []
    for i, blk in enumerate(model.net.blocks):
        srcs = [b.attn for b in blk.attns] if hasattr(blk, "attns") else [blk] if hasattr(blk, "in_proj") else [blk.attn]
        for s in srcs:
            flags.append((s, s.fused_attn))
            s.fused_attn = False
            hooks.append(s.attn_drop.register_forward_hook(lambda m, a, y, i=i: maps[i].append(a[0])))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    for s, f in flags:
        s.fused_attn = f
    return [torch.cat(m, 1) for m in maps]


def test_registers_without_cls_are_not_cls_in_rollout_and_masks():
    model = FAM.build("vit_reg_gap")           # 4 registers, no CLS token
    ds = data()
    res = attention_maps(model, ds, images=2)
    assert res["rollout_source"] == "mean over patch queries"
    assert res["has_class_token"] is False and res["num_registers"] == 4 and res["num_prefix_tokens"] == 4
    x, _ = ds.get_batch(torch.arange(2))
    roll = attention_rollout(real_maps(model, x))              # (N, T, T) over 4 registers + 16 patches
    expected = roll[:, 4:, 4:].mean(1)                        # patch queries → patch keys; no register row
    torch.testing.assert_close(torch.tensor(res["rollout"]).view(2, 16).double(), expected, atol=1e-5, rtol=0)
    probe = ViTProbe(model)
    only = variants(probe, [], 0)["first:1"][0]                 # CLS-only: no CLS → patches attend to themselves
    assert torch.equal(only[4:, 4:], torch.eye(16, dtype=torch.bool)) and not only[4:, :4].any()
    assert only[:4].all()                                       # registers attend freely


def test_cls_only_mask_with_cls_and_registers_allows_only_cls():
    model = FAM.build("vit_reg_cls")           # CLS + 4 registers
    probe = ViTProbe(model)
    only = variants(probe, [], 0)["last:1"][probe.num_blocks - 1]
    assert only[1:, 0].all() and not only[5:, 1:].any()         # patch rows: CLS only (no registers, no patches)
    res = compute_restricted(make_context(model, data(), name="restricted_attention"), RestrictedOptions([0]))
    assert res["num_registers"] == 4 and res["has_class_token"] is True


def test_distillation_token_counts_as_a_class_token():
    probe = ViTProbe(FAM.build("deit_distilled"))
    only = variants(probe, [], 0)["first:1"][0]
    assert probe.num_prefix_tokens == 2 and probe.num_registers == 0
    assert only[2:, :2].all() and not only[2:, 2:].any()


@pytest.mark.parametrize("key", ["vit_parallel", "vit_xp"])
def test_attention_distance_and_stability_on_parallel_block_vits(key):
    """``vit_small_patch16_18x2_224``- and ``vit_base_patch16_xp_224``-style models: attention distance equals
    the one computed from the model's own maps; stability runs; a block probe refuses in one line."""
    model = FAM.build(key)
    ds = data()
    res = attention_distance(model, ds)
    x, _ = ds.get_batch(torch.arange(4))
    dist = patch_distances((4, 4), 8)
    expected = torch.stack([(a[:, :, 1:, 1:].double() * dist).sum(-1).mean(-1) for a in real_maps(model, x)], 1)
    torch.testing.assert_close(torch.tensor(res["distance"], dtype=torch.float64), expected.mean(0), atol=1e-4, rtol=0)
    heads = 4 if key == "vit_parallel" else 2                  # two parallel attentions × 2 heads
    assert res["num_heads"] == heads and torch.tensor(res["distance"]).shape == (2, heads)
    st = attention_stability(model, ds, masks=2, images=2)
    assert torch.tensor(st["cosine"]).shape == (2, heads)
    ctx = make_context(model, ds, name="attention_distance")
    ctx._probe = BlockProbe(model)
    from robustvit.analysis.attention import compute_attention_distance
    with pytest.raises(RobustvitError, match="no attention map to read in block 0"):
        compute_attention_distance(ctx)


def test_cait_restricted_attention_refuses():
    model = FAM.build("cait")
    with pytest.raises(RobustvitError, match="restricted attention needs"):
        compute_restricted(make_context(model, data(), name="restricted_attention"), RestrictedOptions([0]))


def test_cait_attention_distance_and_maps_refuse_mixed_maps():
    """CaiT's talking-heads maps are mixed across heads after the softmax (rows need not be distributions, entries
    may be negative): distances and maps computed from them would leave the image, so both refuse in one line."""
    model = FAM.build("cait")
    for fn in (attention_distance, attention_maps):
        with pytest.raises(RobustvitError, match="softmax attention maps") as e:
            fn(model, data())
        assert "\n" not in str(e.value)
