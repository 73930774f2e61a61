"""FAN's grouping (arXiv:2204.12451) against an independent numpy computation: raw affinity of the
softmax-normalised patch tokens, eigenvalues above an absolute threshold, insignificant count, noise decay."""

import numpy as np
import pytest
import torch

from robustvit.models.wrapper import range_check_off

from robustvit.analysis import grouping, run_analyses
from robustvit.analysis.grouping import significant_eigenvalues
from robustvit.utils import derive_seed


def _np_counts(z: np.ndarray, thr: float, relative: bool = False) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    out = []
    for pi in p:
        ev = np.linalg.eigvalsh(pi @ pi.T)
        out.append(int((ev > (thr * ev.max() if relative else thr)).sum()))
    return np.array(out)


def _block_tokens(model, x):
    """Per-block outputs of the timm ViT through forward hooks (independent of the probe)."""
    outs = []
    hs = [b.register_forward_hook(lambda m, a, y: outs.append(y.detach())) for b in model.net.blocks]
    try:
        with torch.no_grad(), range_check_off(model):
            model(x)
    finally:
        for h in hs:
            h.remove()
    return outs


def test_absolute_and_relative_counts_match_numpy_on_fixed_tokens():
    g = torch.Generator().manual_seed(5)
    z = torch.randn(3, 12, 6, generator=g, dtype=torch.float64) * 3.0
    z[1] = z[1, :1]                                             # image 1: identical tokens, rank 1
    for thr in (1e-3, 1e-2, 0.1):
        assert significant_eigenvalues(z, thr, relative=False).tolist() == _np_counts(z.numpy(), thr).tolist()
        assert significant_eigenvalues(z, thr).tolist() == _np_counts(z.numpy(), thr, relative=True).tolist()
    assert significant_eigenvalues(z, 1e-6, relative=False)[1] == 1
    # absolute and relative differ on the same spectrum (the threshold is not rescaled)
    big = z * 0 + torch.eye(12, 6, dtype=torch.float64) * 50   # near one-hot rows: eigenvalues ≈ row counts
    assert significant_eigenvalues(big, 1.5, relative=False).tolist() == _np_counts(big.numpy(), 1.5).tolist()


def test_grouping_default_is_fan_and_matches_hooked_tokens(cls_vit, tiny_data):
    r = grouping(cls_vit, tiny_data, images=2, batch_size=6)
    assert r["convention"] == "fan" and r["threshold_kind"] == "absolute" and r["eig_threshold"] == 1e-3
    x, y = tiny_data.get_batch(torch.arange(12))
    sig = np.zeros(3)
    decay = np.zeros(3)
    for c in range(2):
        xc = x[c * 6:(c + 1) * 6]
        clean = _block_tokens(cls_vit, xc)
        g = torch.Generator().manual_seed(derive_seed(0, "grouping", "noise", c))
        std = cls_vit.std.view(1, -1, 1, 1)
        noisy = _block_tokens(cls_vit, xc + 1.0 * std * torch.randn(xc.shape, generator=g))   # N(0, 1), unclipped
        for i, (a, b) in enumerate(zip(clean, noisy)):
            pa, pb = a[:, 1:].double().numpy(), b[:, 1:].double().numpy()      # patch tokens (CLS dropped)
            sig[i] += _np_counts(pa, 1e-3).sum()
            decay[i] += (np.linalg.norm((pb - pa).reshape(6, -1), axis=1) / np.linalg.norm(pa.reshape(6, -1), axis=1)).sum()
    assert r["significant_eigenvalues"] == pytest.approx((sig / 12).tolist(), abs=1e-9)
    assert r["insignificant_eigenvalues"] == pytest.approx((16 - sig / 12).tolist(), abs=1e-9)
    assert r["noise_decay"] == pytest.approx((decay / 12).tolist(), rel=1e-4)
    assert all(v > 0 for v in r["noise_decay"])


def test_relative_convention_keeps_the_old_numbers_and_is_not_comparable(cls_vit, tiny_data):
    r = run_analyses(cls_vit, tiny_data, ["grouping:convention=relative:images=2"], None, batch_size=6,
                     device="cpu")["grouping"]
    assert r["eig_threshold"] == 0.05 and r["threshold_kind"] == "relative"
    assert r["protocol"]["comparable"] is False and any("convention relative" in n for n in r["protocol"]["deviations"])
    x, _ = tiny_data.get_batch(torch.arange(12))
    toks = _block_tokens(cls_vit, x)
    want = [_np_counts(t[:, 1:].double().numpy(), 0.05, relative=True).mean() for t in toks]
    assert r["significant_eigenvalues"] == pytest.approx(want, abs=1e-9)
    fan = run_analyses(cls_vit, tiny_data, ["grouping:images=2"], None, batch_size=6, device="cpu")["grouping"]
    assert fan["protocol"]["comparable"] is True and fan["protocol"]["deviations"] == []
    sig = run_analyses(cls_vit, tiny_data, ["grouping:images=2:sigma=0.1"], None, batch_size=6, device="cpu")["grouping"]
    assert sig["protocol"]["comparable"] is False and sig["sigma"] == 0.1 and any("σ = 0.1" in n for n in sig["protocol"]["deviations"])
    assert fan["sigma"] == 1.0
