import math

import pytest
import torch

from robustvit.analysis import (attention_stability, correlation, grouping, lesion, pos_embed_similarity,
                                restricted_attention)
from robustvit.analysis.attention import attention_rollout, mean_attention_distance, patch_distances
from robustvit.analysis.correlation import cka_matrix, cka_stats, pearson_matrix, pearson_stats
from robustvit.analysis.grouping import significant_eigenvalues
from robustvit.analysis.lesion import random_subsets
from robustvit.analysis.restricted import cls_only_mask, full_mask, local_patch_mask, random_patch_mask
from robustvit.analysis.semantics import rescale_perturbation, topk_correct
from robustvit.models.probe import ViTProbe


def _accuracy(model, data):
    x, y = data.get_batch(torch.arange(len(data)))
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


# -- correlation ------------------------------------------------------------------------------------------
def test_pearson_from_streamed_sums_matches_numpy_on_chunks():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(40, generator=g) + 3.0
    b = 0.5 * a + torch.randn(40, generator=g)
    c = -a
    chunks = [pearson_stats([a[i:i + 10], b[i:i + 10], c[i:i + 10]]) for i in range(0, 40, 10)]
    tot = chunks[0]
    for ch in chunks[1:]:
        tot = {"n": tot["n"] + ch["n"], "sum": [u + v for u, v in zip(tot["sum"], ch["sum"])],
               "gram": [[u + v for u, v in zip(r, s)] for r, s in zip(tot["gram"], ch["gram"])]}
    rho = pearson_matrix(tot)
    import numpy as np
    ref = np.abs(np.corrcoef(np.stack([a.numpy(), b.numpy(), c.numpy()])))
    assert torch.allclose(rho, torch.tensor(ref), atol=1e-5)
    assert rho[0, 2] == pytest.approx(1.0, abs=1e-9)          # |ρ(a, −a)| = 1


def test_cka_is_invariant_to_rotation_and_scale():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 6, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    other = torch.randn(16, 6, generator=g, dtype=torch.float64)
    m = cka_matrix(cka_stats([x, 3.0 * x @ q, other]))
    assert m[0, 1] == pytest.approx(1.0, abs=1e-9)
    assert m[0, 2] < 0.9


def test_correlation_matrices_are_symmetric_with_unit_diagonal(cls_vit, tiny_data, tiny_resnet):
    for method in ("pearson", "cka"):
        r = correlation(cls_vit, tiny_data, method=method, batch_size=6)
        for key in ("all_tokens", "cls_token"):
            m = torch.tensor(r[key])
            assert m.shape == (3, 3)
            assert torch.equal(m, m.T) and torch.equal(m.diagonal(), torch.ones(3))
            assert (m >= 0).all() and (m <= 1).all()
    r = correlation(tiny_resnet, tiny_data, batch_size=6)     # CNN: stages, CKA
    assert r["method"] == "cka" and r["level"] == "stage" and len(r["all_tokens"]) == 4


# -- lesion -----------------------------------------------------------------------------------------------
def test_lesion_nothing_removed_is_clean_and_start_reuse_is_exact(cls_vit, tiny_data):
    r = lesion(cls_vit, tiny_data, samples=3, batch_size=5)
    assert r["clean_accuracy"] == _accuracy(cls_vit, tiny_data)
    assert len(r["single"]["block"]) == len(r["single"]["attention"]) == len(r["single"]["mlp"]) == 3
    for n, v in r["random"].items():
        assert v["min"] <= v["mean"] <= v["max"] and v["stderr"] >= 0
        assert all(0 not in s and len(s) == int(n) for s in v["blocks"])
    probe = ViTProbe(cls_vit)
    x = torch.rand(4, 3, 16, 16)
    with torch.no_grad():
        full = probe.run(x)
        assert torch.equal(probe.run(x, remove={}).logits, full.logits)
        restarted = probe.run(None, remove={2: "mlp"}, start=(2, full.tokens[1]))
        assert torch.equal(restarted.logits, probe.run(x, remove={2: "mlp"}).logits)


def test_random_subsets_keep_the_first_block_and_are_seeded():
    subs = random_subsets(12, 4, 25, seed=0)
    assert len(subs) == 25 and all(len(s) == 4 and min(s) >= 1 and max(s) <= 11 for s in subs)
    assert subs == random_subsets(12, 4, 25, seed=0) and subs != random_subsets(12, 4, 25, seed=1)


def test_lesion_stats_are_mean_stderr_min_max(cls_vit, tiny_data):
    r = lesion(cls_vit, tiny_data, samples=4, batch_size=12)
    from robustvit.analysis.base import make_context
    ctx = make_context(cls_vit, tiny_data)
    probe = ViTProbe(cls_vit)
    x, y = ctx.batch(0, 12)
    accs = []
    with torch.no_grad():
        for s in r["random"]["2"]["blocks"]:
            accs.append((probe.run(x, remove={b: "block" for b in s}).logits.argmax(1) == y).float().mean().item())
    t = torch.tensor(accs, dtype=torch.float64)
    assert r["random"]["2"]["mean"] == pytest.approx(float(t.mean()))
    assert r["random"]["2"]["stderr"] == pytest.approx(float(t.std()) / 2)
    assert r["random"]["2"]["min"] == pytest.approx(min(accs)) and r["random"]["2"]["max"] == pytest.approx(max(accs))


# -- restricted attention ---------------------------------------------------------------------------------
def test_local_mask_by_hand():
    m = local_patch_mask((3, 3), 1)
    assert m[4].all()                                  # the centre patch sees all 9
    assert int(m[0].sum()) == 4                        # a corner sees itself and 3 neighbours
    assert int((~local_patch_mask((3, 3), 0)).sum()) == 72 and local_patch_mask((3, 3), 2).all()


def test_random_baseline_masks_as_many_pairs_and_never_the_diagonal():
    for d in range(4):
        local = local_patch_mask((4, 4), d)
        rand = random_patch_mask(16, int((~local).sum()), seed=3)
        assert int((~rand).sum()) == int((~local).sum())
        assert rand.diagonal().all()
    full = full_mask(local_patch_mask((4, 4), 0), 1)
    assert full[0].all() and full[:, 0].all()          # CLS free both ways
    only = cls_only_mask(16, 1)
    assert only[1:, 0].all() and not only[1:, 1:].any()


def test_restricted_attention_invariants(cls_vit, tiny_data):
    r = restricted_attention(cls_vit, tiny_data, batch_size=6)
    clean = _accuracy(cls_vit, tiny_data)
    assert r["clean_accuracy"] == clean
    assert r["local"]["3"] == clean and r["random"]["3"] == clean and r["masked_pairs"]["3"] == 0
    assert r["cls_only_first"]["0"] == clean and r["cls_only_last"]["0"] == clean
    assert r["cls_only_first"]["3"] == r["cls_only_last"]["3"]
    probe = ViTProbe(cls_vit)
    with torch.no_grad():
        out = probe.run(torch.rand(2, 3, 16, 16), attentions=True, attn_mask={0: cls_only_mask(16, 1)})
    a = out.attentions[0]
    assert torch.allclose(a[:, :, 1:, 0], torch.ones(2, 2, 16))  # patches attend only to CLS


def test_restricted_attention_batched_variants_equal_single_runs(cls_vit, tiny_data):
    """Variants stacked along the batch give the same accuracies as one variant at a time."""
    a = restricted_attention(cls_vit, tiny_data, distances=[0, 1], batch_size=12)
    from robustvit.analysis.base import make_context
    from robustvit.analysis.restricted import RestrictedOptions, compute_restricted
    b = compute_restricted(make_context(cls_vit, tiny_data, name="restricted_attention", batch_size=12),
                           RestrictedOptions(distances=[0, 1], group=1))
    assert a["local"] == b["local"] and a["random"] == b["random"] and a["cls_only_last"] == b["cls_only_last"]


# -- attention --------------------------------------------------------------------------------------------
def test_attention_distance_of_uniform_and_identity_attention():
    grid, ps = (2, 2), 1
    uniform = torch.full((1, 1, 4, 4), 0.25)
    assert mean_attention_distance(uniform, grid, ps, 0).item() == pytest.approx((2 + math.sqrt(2)) / 4)
    # with a CLS token: uniform over 5 tokens, patch keys carry 4/5 of the mass
    u5 = torch.full((1, 1, 5, 5), 0.2)
    assert mean_attention_distance(u5, grid, ps, 1).item() == pytest.approx(0.8 * (2 + math.sqrt(2)) / 4)
    eye = torch.eye(5).expand(1, 3, 5, 5)
    assert torch.equal(mean_attention_distance(eye, grid, 16, 1), torch.zeros(1, 3, dtype=torch.float64))
    d = patch_distances((3, 3), 16)
    assert d[0, 8].item() == pytest.approx(32 * math.sqrt(2))


def test_rollout_of_identity_is_identity():
    eye = torch.eye(5).expand(2, 3, 5, 5)
    r = attention_rollout([eye, eye, eye])
    assert torch.equal(r, torch.eye(5, dtype=torch.float64).expand(2, 5, 5))


def test_attention_rows_sum_to_one(cls_vit, stand_in_fan):
    from robustvit.models.probe import make_probe
    for m in (cls_vit, stand_in_fan):
        with torch.no_grad():
            out = make_probe(m).run(torch.rand(2, 3, 16, 16), attentions=True)
        for a in out.attentions:
            assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-5)


def test_pos_embed_similarity_is_symmetric_with_unit_diagonal(cls_vit):
    s = torch.tensor(pos_embed_similarity(cls_vit)["similarity"])
    assert s.shape == (16, 16) and torch.equal(s.diagonal(), torch.ones(16))
    assert torch.allclose(s, s.T) and (s.abs() <= 1 + 1e-6).all()


# -- stability, grouping, semantics ----------------------------------------------------------------------
def test_stability_of_an_unoccluded_input_is_exactly_one(cls_vit, stand_in_fan, tiny_data):
    for m in (cls_vit, stand_in_fan):
        r = attention_stability(m, tiny_data, rho=0.0, masks=3, images=2, batch_size=6)
        c = torch.tensor(r["cosine"])
        assert c.shape == (3, 2) and torch.equal(c, torch.ones(3, 2))
        assert torch.equal(torch.tensor(r["mask_distribution"]), torch.ones(2, 3))
        assert sum(r["histogram"]["counts"]) == 12
    r = attention_stability(cls_vit, tiny_data, rho=0.5, masks=2, images=2, batch_size=6)
    assert all(v < 1 for row in r["cosine"] for v in row)


def test_significant_eigenvalues_and_noise_decay(cls_vit, tiny_data):
    same = torch.randn(1, 1, 8).expand(2, 9, 8)             # identical tokens: affinity of rank 1
    assert significant_eigenvalues(same, 0.01).tolist() == [1, 1]
    r = grouping(cls_vit, tiny_data, sigma=0.0, images=2, batch_size=6)
    assert r["noise_decay"] == [0.0, 0.0, 0.0]
    assert len(r["significant_eigenvalues"]) == 3 and all(1 <= v <= 16 for v in r["significant_eigenvalues"])
    assert torch.tensor(r["clusters"]).shape == (2, 4, 4)


def test_rescaled_perturbation_and_topk():
    eps = 4 / 255
    d = torch.tensor([-eps, 0.0, eps])
    assert torch.allclose(rescale_perturbation(d, eps), torch.tensor([0.0, 0.5, 1.0]))
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.2]])
    y = torch.tensor([0, 2])
    assert topk_correct(logits, y, 1) == 0 and topk_correct(logits, y, 2) == 2 and topk_correct(logits, y, 5) == 2


def test_cls_only_readings(cls_vit, tiny_data):
    """cls_only=cls: no patch↔patch pair at all; cls_self: CLS and the patch itself, i.e. the d = 0 local mask."""
    only, itself = cls_only_mask(16, 1), cls_only_mask(16, 1, itself=True)
    assert not only[1:, 1:].any() and torch.equal(itself, full_mask(local_patch_mask((4, 4), 0), 1))
    a = restricted_attention(cls_vit, tiny_data, distances=[0], batch_size=12)
    b = restricted_attention(cls_vit, tiny_data, distances=[0], batch_size=12, cls_only="cls_self")
    assert a["cls_only"] == "cls" and b["cls_only"] == "cls_self" and a["local"] == b["local"]
    assert b["cls_only_first"]["0"] == a["cls_only_first"]["0"]
    probe = ViTProbe(cls_vit)
    with torch.no_grad():
        out = probe.run(torch.rand(2, 3, 16, 16), attentions=True, attn_mask={0: itself})
    att = out.attentions[0][:, :, 1:]                                # patch queries
    diag = att[:, :, torch.arange(16), 1 + torch.arange(16)]
    assert torch.allclose(att[..., 0] + diag, torch.ones_like(diag)) and (diag > 0).all()
