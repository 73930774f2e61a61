"""CE / mCE / relative mCE / retention against published and hand-computed values."""

from __future__ import annotations

import pytest

from robustvit.corruptions import BENCHMARK_CORRUPTIONS, list_corruptions
from robustvit.errors import RobustvitError
from robustvit.metrics.corruption import (ALEXNET_CLEAN_ERROR, ALEXNET_ERRORS, ALEXNET_MEAN_ERRORS, corruption_error,
                                          mce, mean_or_none, relative_corruption_error, relative_mce, retention)

# Hendrycks & Dietterich (arXiv:1903.12261), Table: torchvision ResNet-50, CE (%) per benchmark corruption;
# reported mCE 76.7 (from the unrounded CEs), clean error 23.9.
RESNET50_CE = {"gaussian_noise": 80, "shot_noise": 82, "impulse_noise": 83, "defocus_blur": 75, "glass_blur": 89,
               "motion_blur": 78, "zoom_blur": 80, "snow": 78, "frost": 75, "fog": 66, "brightness": 57,
               "contrast": 71, "elastic_transform": 85, "pixelate": 77, "jpeg_compression": 77}


def test_table_covers_every_corruption_and_matches_official_means():
    assert set(ALEXNET_ERRORS) == set(list_corruptions())
    # the per-corruption means of hendrycks/robustness ImageNet-C/test.py
    assert ALEXNET_MEAN_ERRORS["gaussian_noise"] == pytest.approx(0.886428, abs=1e-6)
    assert ALEXNET_MEAN_ERRORS["jpeg_compression"] == pytest.approx(0.606500, abs=1e-6)
    assert ALEXNET_MEAN_ERRORS["saturate"] == pytest.approx(0.658248, abs=1e-6)
    assert ALEXNET_CLEAN_ERROR == 0.43478


def test_resnet50_mce_reproduced():
    errors = {n: [RESNET50_CE[n] / 100 * a for a in ALEXNET_ERRORS[n]] for n in BENCHMARK_CORRUPTIONS}
    for n in BENCHMARK_CORRUPTIONS:
        assert corruption_error(errors[n], ALEXNET_ERRORS[n]) == pytest.approx(RESNET50_CE[n] / 100)
    m = mce(errors, BENCHMARK_CORRUPTIONS)
    assert m == pytest.approx(1153 / 15)            # mean of the rounded CEs: 76.87
    assert abs(m - 76.7) < 0.2                      # the paper's value from unrounded CEs


def test_corruption_error_hand_case_and_key_forms():
    a = {1: 0.5, 2: 1.0}
    assert corruption_error({1: 0.25, 2: 0.5}, a) == pytest.approx(0.5)
    assert corruption_error({"1": 0.3, "2": 0.6}, a) == pytest.approx(0.6)
    assert corruption_error([0.3, 0.6], [0.5, 1.0, 9.0]) == pytest.approx(0.6)   # uses severities 1-2 only
    with pytest.raises(RobustvitError):
        corruption_error({6: 0.1}, a)


def test_relative_mce_hand_computed():
    clean = 0.2
    # model error = clean + k · (AlexNet error − AlexNet clean error) → relative CE = k
    ks = {n: 0.1 * (i + 1) for i, n in enumerate(BENCHMARK_CORRUPTIONS)}
    errors = {n: {s + 1: clean + ks[n] * (a - ALEXNET_CLEAN_ERROR) for s, a in enumerate(ALEXNET_ERRORS[n])}
              for n in BENCHMARK_CORRUPTIONS}
    assert relative_mce(errors, clean, BENCHMARK_CORRUPTIONS) == pytest.approx(100 * sum(ks.values()) / 15)
    # a fully hand-computed one: fog, errors .3 .4 .5 .6 .7, clean .1
    e = [0.3, 0.4, 0.5, 0.6, 0.7]
    num = sum(v - 0.1 for v in e)                                   # 2.0
    den = sum(a - 0.43478 for a in ALEXNET_ERRORS["fog"])           # 4.09662 − 2.1739 = 1.92272
    assert relative_corruption_error(e, 0.1, ALEXNET_ERRORS["fog"]) == pytest.approx(2.0 / 1.92272)
    assert num == pytest.approx(2.0) and den == pytest.approx(1.92272)
    assert relative_mce({"fog": e}, 0.1) == pytest.approx(100 * 2.0 / 1.92272)


def test_mce_unknown_corruption_and_retention():
    with pytest.raises(RobustvitError, match="unknown corruption"):
        mce({"gausian_noise": [0.5] * 5})
    assert retention(0.6, 0.8) == pytest.approx(0.75)
    assert retention(None, 0.8) is None and retention(0.5, 0.0) is None
    assert mean_or_none([1.0, 2.0]) == 1.5 and mean_or_none([]) is None and mean_or_none([1.0, None]) is None
