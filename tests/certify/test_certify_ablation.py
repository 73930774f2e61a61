"""Derandomized smoothing (Levine & Feizi 2020; Salman et al. 2022) against closed forms: a base classifier that
votes 1 exactly when a bright column (or pixel) is retained gives known vote counts and a certificate with a closed
form; token dropping on a timm ViT equals an independent recomputation with timm's own modules, and is refused in
one line where it does not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustvit.certify.ablation import Ablation, AblatedModel, ablation_counts, patch_certificate
from robustvit.errors import RobustvitError
from robustvit.facade import wrap_module


class AnyBright(nn.Module):
    """Logits [0, Σx]: class 1 when any retained pixel is non-zero, else class 0 (ties go to class 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.zeros(len(x)), x.flatten(1).sum(1)], 1)


def model() -> nn.Module:
    return wrap_module(AnyBright(), mean=(0, 0, 0), std=(1, 1, 1), num_classes=2, input_size=32)


def test_keep_masks_wrap_and_cover():
    band = Ablation("column", 4)
    keep = band.keep(band.positions(8, 8), 8, 8)
    assert keep.shape == (8, 8, 8) and keep[:, 0].sum(1).tolist() == [4] * 8
    assert keep[6, 0].nonzero().flatten().tolist() == [0, 1, 6, 7]            # wraps around the edge
    assert keep.sum(0).unique().tolist() == [4]                               # every pixel kept by `size` bands
    block = Ablation("block", 3)
    kb = block.keep(block.positions(6, 6), 6, 6)
    assert kb.shape == (36, 6, 6) and kb.sum((1, 2)).unique().tolist() == [9] and kb.sum(0).unique().tolist() == [9]
    with pytest.raises(RobustvitError, match="stride 3 must divide"):
        Ablation("column", 4, stride=3).positions(8, 8)


@pytest.mark.parametrize("size", [1, 4, 7])
def test_column_votes_and_certificate_closed_form(size):
    """A bright column is retained by exactly `size` of the W bands: votes (W − s, s); certified against an m×m
    patch iff W − 2s > 2(m + s − 1)."""
    w = 32
    x = torch.zeros(2, 3, w, w)
    x[0, :, :, 5] = 1.0
    x[1, :, :, 30] = 1.0
    band = Ablation("column", size)
    counts = ablation_counts(AblatedModel(model(), "zero_fill"), x, band, 2, batch=40)
    assert counts.tolist() == [[w - size, size]] * 2
    for m in range(1, 20):
        pred, cert = patch_certificate(counts, band.delta(m, w, w))
        assert pred.tolist() == [0, 0]
        assert cert.tolist() == [w - 2 * size > 2 * (m + size - 1)] * 2, m


def test_block_votes_certificate_and_stride():
    h = 16
    x = torch.zeros(1, 3, h, h)
    x[0, 1, 3, 14] = 1.0
    band = Ablation("block", 2)
    counts = ablation_counts(AblatedModel(model(), "zero_fill"), x, band, 2, batch=100)
    assert counts.tolist() == [[h * h - 4, 4]]
    for m in (9, 10, 11):       # certified iff 256 − 8 > 2(m + 1)²  ⇔  m ≤ 10
        assert patch_certificate(counts, band.delta(m, h, h))[1].item() == (m <= 10)
    strided = Ablation("column", 4, stride=4)
    assert strided.delta(5, 32, 32) == 2 and strided.delta(6, 32, 32) == 3 and strided.delta(40, 32, 32) == 8


def test_certificate_margin_is_strict_and_ties_go_to_the_smaller_class():
    counts = torch.tensor([[10, 10, 0], [3, 13, 0], [0, 14, 3]])
    pred, cert = patch_certificate(counts, 5)
    assert pred.tolist() == [0, 1, 1] and cert.tolist() == [False, False, True]


def test_vit_drops_ablated_tokens_as_timm_computes_them(tiny_vit):
    """Dropping: the kept tokens (class token + tokens with a retained pixel) run through timm's own blocks."""
    net = tiny_vit.net
    torch.manual_seed(0)
    with torch.no_grad():
        net.head.weight.normal_(0, 1.0)
    x = torch.rand(3, 3, 16, 16)
    band = Ablation("column", 3)
    pos = torch.tensor([5])
    keep = band.keep(pos, 16, 16)
    ablated = AblatedModel(tiny_vit, "drop")
    with torch.no_grad():
        got = ablated(x, keep)[0]
        xa = x * keep[:, None].float()
        h = net._pos_embed(net.patch_embed((xa - tiny_vit.mean) / tiny_vit.std))
        cols = sorted({c // 4 for c in range(5, 8)})   # token columns holding the retained pixels 5..7
        idx = [0] + [1 + r * 4 + c for r in range(4) for c in cols]
        ref = net.forward_head(net.norm(net.blocks(h[:, idx])))
        zero = AblatedModel(tiny_vit, "zero_fill")(x, keep)[0]
    assert ablated.mode == "drop" and ablated.note is None
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    assert (got - zero).abs().max() > 1e-3                               # dropping is not zero-filling


def test_token_dropping_refused_where_it_does_not_apply(tiny_resnet):
    with pytest.raises(RobustvitError, match="cannot drop ablated tokens.*tokens=zero_fill"):
        AblatedModel(tiny_resnet, "drop")
    auto = AblatedModel(tiny_resnet)
    assert auto.mode == "zero_fill" and "zero-filled" in auto.note
