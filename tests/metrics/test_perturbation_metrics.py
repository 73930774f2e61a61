"""Flip probability / top-5 distance / flip rate: hand-computed cases and a loop-by-loop oracle."""

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from robustvit.errors import RobustvitError
from robustvit.corruptions.perturbations import TEST_PERTURBATIONS
from robustvit.metrics.perturbation import (finalize_perturbation_stats, flip_probability,
                                            flip_rate, frame_pairs, mfr, mt5d, perturbation_stats, ranking,
                                            top5_distance, top5_distance_pairs)


def _onehot_seq(preds, c=4):
    """Logits (1, T, c) whose argmax follows ``preds``."""
    x = torch.zeros(1, len(preds), c)
    x[0, torch.arange(len(preds)), torch.tensor(preds)] = 1.0
    return x


def test_frame_pairs_follow_reference_loops():
    assert frame_pairs(4, noise=True) == ([0, 0, 0], [1, 2, 3])
    assert frame_pairs(4, noise=True, difficulty=3) == ([0, 0, 0], [1, 2, 3])   # noise ignores the stride
    assert frame_pairs(4, noise=False) == ([0, 1, 2], [1, 2, 3])
    # difficulty 2 on 5 frames: seq[0::2] = 0,2,4 and seq[1::2] = 1,3
    assert frame_pairs(5, noise=False, difficulty=2) == ([0, 2, 1], [2, 4, 3])
    with pytest.raises(RobustvitError):
        frame_pairs(1, noise=False)
    with pytest.raises(RobustvitError):
        frame_pairs(2, noise=False, difficulty=3)


def test_flip_probability_hand_computed():
    # predictions 0,1,1,0: consecutive pairs flip, same, flip -> 2/3; vs frame 0: 1,1,0 -> 2/3
    seq = _onehot_seq([0, 1, 1, 0])
    assert flip_probability(seq, noise=False) == pytest.approx(2 / 3)
    # predictions 0,1,0,0: consecutive 1,1,0 -> 2/3; vs frame 0: 1,0,0 -> 1/3
    seq2 = _onehot_seq([0, 1, 0, 0])
    assert flip_probability(seq2, noise=False) == pytest.approx(2 / 3)
    assert flip_probability(seq2, noise=True) == pytest.approx(1 / 3)
    # two sequences: mean of per-sequence means
    both = torch.cat([_onehot_seq([0, 0, 0, 0]), seq2])
    assert flip_probability(both, noise=True) == pytest.approx((0 + 1 / 3) / 2)
    # difficulty 2 on 0,1,0,0,1: pairs (0,2)=same,(2,4)=flip,(1,3)=flip -> 2/3
    assert flip_probability(_onehot_seq([0, 1, 0, 0, 1]), noise=False, difficulty=2) == pytest.approx(2 / 3)


def test_top5_distance_hand_computed():
    c = 8
    a = torch.tensor([[0, 1, 2, 3, 4]])
    assert top5_distance_pairs(a, a).item() == 0
    # swap ranks 1 and 2: |0-1| + |1-0| = 2
    assert top5_distance_pairs(a, torch.tensor([[1, 0, 2, 3, 4]])).item() == 2
    # class 4 (rank 5) drops out of the top-5: σ(5)-1 capped at 5 -> |4-5| = 1
    assert top5_distance_pairs(a, torch.tensor([[0, 1, 2, 3, 7]])).item() == 1
    # class 0 (rank 1) leaves, everything moves up: |0-5| + |1-0| + |2-1| + |3-2| + |4-3| = 9
    assert top5_distance_pairs(a, torch.tensor([[1, 2, 3, 4, 5]])).item() == 9
    # disjoint top-5s: 5+4+3+2+1 = 15
    assert top5_distance_pairs(a, torch.tensor([[5, 6, 7, 8, 9]])).item() == 15
    # through logits: frame 2 has class 1 first, then 0,2,3,4 -> 2; consecutive mean (2 + 2)/2 = 2
    f0 = torch.arange(c, 0, -1).float()
    f1 = f0.clone()
    f1[[0, 1]] = f1[[1, 0]]
    seq = torch.stack([f0, f1, f0]).unsqueeze(0)
    assert top5_distance(seq, noise=False) == pytest.approx(2.0)
    assert top5_distance(seq, noise=True) == pytest.approx(1.0)    # (2 + 0) / 2


def test_ranking_breaks_ties_like_rankdata_ordinal():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0]])
    r = ranking(x).tolist()[0]
    ranks = rankdata(-x[0].numpy(), method="ordinal")
    assert r == list(np.argsort(ranks)[:5])
    assert r == [1, 2, 4, 5, 0]


def _oracle(logits, noise, d):
    """Straight loops as in the reference evaluation (ranks from scipy's ordinal rankdata)."""
    cap = np.minimum(np.arange(logits.shape[-1]), 5)
    fp = t5 = 0.0
    for vid in logits.numpy():
        preds = vid.argmax(1)
        ranks = [rankdata(-f, method="ordinal") for f in vid]
        flips, dists = [], []
        step = 1 if noise else d
        for i in range(step):
            p0, r0 = preds[i], ranks[i]
            for j in range(i + step, len(vid), step):
                flips.append(int(p0 != preds[j]))
                sigma = ranks[j][np.argsort(r0)]
                dists.append(np.abs(cap[:5] - cap[sigma - 1][:5]).sum())
                if not noise:
                    p0, r0 = preds[j], ranks[j]
        fp += np.mean(flips) / len(logits)
        t5 += np.mean(dists) / len(logits)
    return fp, t5


@pytest.mark.parametrize("noise,d", [(True, 1), (False, 1), (False, 2), (False, 3)])
def test_matches_loop_oracle_with_ties(noise, d):
    g = torch.Generator().manual_seed(d + 10 * noise)
    logits = torch.randint(0, 4, (6, 11, 10), generator=g).float()   # many ties
    fp, t5 = _oracle(logits, noise, d)
    s = perturbation_stats(logits, noise=noise, difficulty=d)
    r = finalize_perturbation_stats(s)
    assert r["flip_probability"] == pytest.approx(fp) and r["top5_distance"] == pytest.approx(t5)
    assert r["num_sequences"] == 6
    # additive across chunks, and integer rankings give the same numbers as logits
    parts = [perturbation_stats(logits[:2], noise=noise, difficulty=d),
             perturbation_stats(ranking(logits[2:]), noise=noise, difficulty=d)]
    total = {k: parts[0][k] + parts[1][k] for k in parts[0]}
    assert finalize_perturbation_stats(total)["flip_probability"] == pytest.approx(fp)
    assert finalize_perturbation_stats(total)["top5_distance"] == pytest.approx(t5)


def test_flip_rate_and_means():
    assert flip_rate(0.1, 0.2) == pytest.approx(0.5)
    assert flip_rate(0.1, 0.0) is None and flip_rate(None, 0.2) is None
    fp = {n: 0.1 * (i + 1) for i, n in enumerate(TEST_PERTURBATIONS)}
    base = {n: 0.2 * (i + 1) for i, n in enumerate(TEST_PERTURBATIONS)}
    assert mfr(fp, base, TEST_PERTURBATIONS) == pytest.approx(0.5)
    assert mt5d({n: 1.0 for n in TEST_PERTURBATIONS}, {n: 4.0 for n in TEST_PERTURBATIONS}, TEST_PERTURBATIONS) == pytest.approx(0.25)
    assert mfr(fp, {k: v for k, v in base.items() if k != "snow"}, TEST_PERTURBATIONS) is None
    assert mfr({"rotate": 0.3, "tilt": 0.1}, {"rotate": 0.6, "tilt": 0.4}, names=["rotate", "tilt"]) == pytest.approx(0.375)
    assert finalize_perturbation_stats({})["flip_probability"] is None


def test_bad_shape_is_one_line_error():
    with pytest.raises(RobustvitError, match="N, T, C"):
        perturbation_stats(torch.zeros(3, 4), noise=True)
