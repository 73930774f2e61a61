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


class Scores(nn.Module):
    """Log-probabilities p0 when no retained pixel is bright, p1 when one is (softmax gives them back)."""

    def __init__(self, p0: list[float], p1: list[float]) -> None:
        super().__init__()
        self.register_buffer("l0", torch.tensor(p0).log())
        self.register_buffer("l1", torch.tensor(p1).log())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bright = (x.flatten(1).amax(1) > 0).float()[:, None]
        return self.l0 + (self.l1 - self.l0) * bright


@pytest.mark.parametrize("theta, votes", [(None, [28, 4, 0]), (0.25, [28, 32, 4]), (0.4, [28, 4, 4]),
                                          (0.6, [0, 0, 0])])
def test_threshold_votes_closed_form(theta, votes):
    """Levine & Feizi's θ voting: a position votes for every class with softmax ≥ θ (several or none). With
    p0 = (0.5, 0.3, 0.2) on the 28 bands missing the bright column and p1 = (0.1, 0.45, 0.45) on the 4 holding it,
    the counts are (28·[0.5 ≥ θ] + 4·[0.1 ≥ θ], …); the certificate compares the top two counts."""
    net = wrap_module(Scores([0.5, 0.3, 0.2], [0.1, 0.45, 0.45]), mean=(0, 0, 0), std=(1, 1, 1), num_classes=3,
                      input_size=32)
    x = torch.zeros(1, 3, 32, 32)
    x[0, :, :, 9] = 1.0
    band = Ablation("column", 4)
    counts = ablation_counts(AblatedModel(net, "zero_fill"), x, band, 3, batch=64, threshold=theta)
    assert counts[0].tolist() == votes
    top = sorted(votes, reverse=True)
    pred, cert = patch_certificate(counts, band.delta(1, 32, 32))          # Δ = 4
    assert pred.item() == votes.index(top[0]) and cert.item() == (top[0] - top[1] > 8)


def lf_reference(z: torch.Tensor, pos: int, size: int) -> torch.Tensor:
    """alevine0/patchSmoothing's ``utils_band.py`` column input, as they write it: channels z and 1 − z on the band
    pos … pos + size − 1 (wrapping), 0 elsewhere."""
    w = z.shape[-1]
    c1, c2 = torch.zeros_like(z), torch.zeros_like(z)
    if pos + size > w:
        c1[..., pos:], c2[..., pos:] = z[..., pos:], 1. - z[..., pos:]
        c1[..., :pos + size - w], c2[..., :pos + size - w] = z[..., :pos + size - w], 1. - z[..., :pos + size - w]
    else:
        c1[..., pos:pos + size], c2[..., pos:pos + size] = z[..., pos:pos + size], 1. - z[..., pos:pos + size]
    return torch.cat([c1, c2], 1)


def test_levine_feizi_six_channel_input_matches_their_code():
    """A CNN built with in_chans=6 gets Levine & Feizi's input (normalised image z, then z and 1 − z kept on the
    band); the un-ablated image is cat(z, 1 − z); 3-channel models refuse the encoding in one line."""
    from robustvit.models import create_model

    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5, in_chans=6).eval()
    ablated = AblatedModel(model, encoding="levine_feizi")
    assert (ablated.encoding, ablated.mode, ablated.note) == ("levine_feizi", "zero_fill", None)
    x, band = torch.rand(2, 3, 16, 16), Ablation("column", 4)
    z = (x - model.mean) / model.std
    with torch.no_grad():
        got = ablated(x, band.keep(torch.tensor([3, 14]), 16, 16))
        ref = torch.stack([model.net(lf_reference(z, p, 4)) for p in (3, 14)])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(x), model.net(torch.cat([z, 1 - z], 1)), rtol=1e-5, atol=1e-6)
        model.micro_batch = 3                                                 # keep is cut with the images
        torch.testing.assert_close(ablated(x, band.keep(torch.tensor([3, 14]), 16, 16)), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(RobustvitError, match=r"keep must be the retained pixels \(N, H, W\) = \(2, 16, 16\)"):
        model(x, keep=torch.ones(2, 16, 15, dtype=torch.bool))
    with pytest.raises(RobustvitError, match="cannot drop ablated tokens: it takes Levine & Feizi's 6-channel"):
        AblatedModel(model, "drop")
    with pytest.raises(RobustvitError, match=r"encoding=rgb needs a network with 3 input channels; .* takes 6"):
        AblatedModel(model, encoding="rgb")
    with pytest.raises(RobustvitError, match=r"^encoding=levine_feizi needs a network with 6 input channels; this "
                                             r"model's takes 3 \(build it with in_chans=6"):
        AblatedModel(create_model("resnet_cifar18", width_mult=0.0625, num_classes=5), encoding="levine_feizi")
