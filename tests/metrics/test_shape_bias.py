
import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.metrics.shape_bias import (geirhos_categories, imagenet_to_16, shape_bias_counts, shape_bias_summary,
                                          texture_from_filename)


def test_mapping_is_model_vs_human():
    cats = geirhos_categories()
    assert list(cats) == sorted(["knife", "keyboard", "elephant", "bicycle", "airplane", "clock", "oven", "chair",
                                 "bear", "boat", "cat", "bottle", "truck", "car", "bird", "dog"])
    assert cats["knife"] == (499,) and cats["oven"] == (766,) and cats["airplane"] == (404,)
    assert cats["cat"] == (281, 282, 283, 284, 285, 286) and len(cats["dog"]) == 109 and len(cats["bird"]) == 49
    flat = [i for v in cats.values() for i in v]
    assert len(flat) == len(set(flat)) == 207 and all(0 <= i < 1000 for i in flat)


def test_imagenet_to_16_averages_probabilities():
    probs = torch.full((1, 1000), 1e-6)
    probs[0, list(geirhos_categories()["dog"])[:10]] = 0.05     # dog: sum 0.5, mean over 109 ≈ 0.0046
    probs[0, 499] = 0.02                                         # knife: one index, mean 0.02
    probs /= probs.sum()
    scores = imagenet_to_16(probs.log())
    cats = list(geirhos_categories())
    assert cats[int(scores.argmax())] == "knife"                # mean, not sum, decides
    assert scores[0, cats.index("dog")].item() == pytest.approx(probs[0, list(geirhos_categories()["dog"])].mean().item(), rel=1e-4)
    with pytest.raises(RobustvitError, match="1000"):
        imagenet_to_16(torch.zeros(2, 10))


@pytest.mark.parametrize("name,tex", [("airplane1-bicycle2.png", "bicycle"), ("XXX_dog10-bird2.png", "bird"),
                                      ("cat3-cat1.png", "cat")])
def test_texture_from_filename(name, tex):
    assert texture_from_filename(name) == tex


def test_counts_and_summary_hand_computed():
    # shape, texture, decision → shape / texture / other / excluded
    shape = torch.tensor([0, 0, 1, 1, 2, 2, 0])
    texture = torch.tensor([1, 2, 0, 2, 0, 2, 1])
    dec = torch.tensor([0, 2, 0, 0, 1, 2, 1])
    c = shape_bias_counts(dec, shape, texture, 3)
    # img0 shape, img1 texture, img2 texture, img3 other, img4 other, img5 excluded, img6 texture
    assert c == {"shape": [1, 0, 0], "texture": [2, 1, 0], "other": [0, 1, 1], "excluded": [0, 0, 1]}
    s = shape_bias_summary(c, ["a", "b", "c"])
    assert s["shape_bias"] == pytest.approx(1 / 4) and s["num_stimuli"] == 6 and s["excluded"] == 1
    assert (s["shape_decisions"], s["texture_decisions"], s["other_decisions"]) == (1, 3, 2)
    assert s["shape_accuracy"] == pytest.approx(1 / 7) and s["texture_accuracy"] == pytest.approx(3 / 7)
    assert s["per_category"]["a"]["shape_bias"] == pytest.approx(1 / 3) and s["per_category"]["b"]["shape_bias"] == 0.0
    assert s["per_category"]["c"]["shape_bias"] is None and s["per_category"]["c"]["other"] == 1


def test_no_decisions_gives_none():
    c = shape_bias_counts(torch.tensor([2]), torch.tensor([0]), torch.tensor([1]), 3)
    assert shape_bias_summary(c, ["a", "b", "c"])["shape_bias"] is None
