"""Layer correlation (Bhojanapalli et al., arXiv:2103.14586): CNNs per residual block (their Fig. 33, linear
CKA) against an independent unbiased-HSIC computation on hooked block outputs; CLS vs pooled token."""

import numpy as np
import pytest
import torch

from robustvit.analysis import correlation, run_analyses


def _hsic_u(k: np.ndarray, l: np.ndarray) -> float:
    """Song et al. (2012) unbiased HSIC, written from the formula."""
    n = k.shape[0]
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0), np.fill_diagonal(l, 0)
    one = np.ones(n)
    return float((np.trace(k @ l) + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
                  - 2 / (n - 2) * one @ k @ l @ one) / (n * (n - 3)))


def test_cnn_level_block_is_cka_between_residual_block_outputs(tiny_resnet, tiny_data):
    r = correlation(tiny_resnet, tiny_data, level="block", batch_size=6)
    from robustvit.models.probe import find_blocks
    kind, blocks, stages = find_blocks(tiny_resnet.net)
    assert kind == "cnn" and len(stages) == 4 and len(blocks) > 4
    assert r["method"] == "cka" and r["level"] == "block" and len(r["all_tokens"]) == len(blocks)
    x, _ = tiny_data.get_batch(torch.arange(12))
    hsic = np.zeros((len(blocks), len(blocks)))
    for c in range(2):
        outs = []
        hs = [b.register_forward_hook(lambda m, a, y: outs.append(y.detach().flatten(1).double().numpy()))
              for b in blocks]
        with torch.no_grad():
            tiny_resnet(x[c * 6:(c + 1) * 6])
        for h in hs:
            h.remove()
        grams = [o @ o.T for o in outs]
        hsic += np.array([[_hsic_u(a, b) for b in grams] for a in grams])
    d = np.sqrt(np.diag(hsic))
    want = np.clip(hsic / np.outer(d, d), -1, 1)
    np.fill_diagonal(want, 1.0)
    assert np.allclose(np.array(r["all_tokens"]), want, atol=1e-5)
    stage = run_analyses(tiny_resnet, tiny_data, ["correlation"], None, batch_size=6, device="cpu")["correlation"]
    assert stage["level"] == "stage" and any("level=block" in n for n in stage["protocol"]["deviations"])


def test_cls_token_vs_pooled_patch_tokens(cls_vit, tiny_data):
    from robustvit.models import create_model
    r = run_analyses(cls_vit, tiny_data, ["correlation"], None, batch_size=6, device="cpu")["correlation"]
    assert not any("CLS" in n for n in r["notes"])
    torch.manual_seed(0)      # registers, no CLS: the pooled token must leave the register tokens out
    reg = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=5,
                       class_token=False, reg_tokens=2, global_pool="avg").eval()
    r = correlation(reg, tiny_data, batch_size=6)
    x, _ = tiny_data.get_batch(torch.arange(12))
    outs = []
    hs = [b.register_forward_hook(lambda m, a, y: outs.append(y[:, 2:].mean(1).detach().double())) for b in reg.net.blocks]
    with torch.no_grad():
        reg(x)
    for h in hs:
        h.remove()
    a, b = outs[0].flatten().numpy(), outs[1].flatten().numpy()
    assert r["cls_token"][0][1] == pytest.approx(abs(np.corrcoef(a, b)[0, 1]), abs=1e-5)
