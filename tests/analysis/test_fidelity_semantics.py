"""Perturbation semantics (Debenedetti, arXiv:2209.07399): the classifier needs weights (refusal, random
only on request and then not comparable, provenance recorded) and the L2 visualisation ε scales with the
resolution."""

import math

import pytest
import torch

from robustvit.analysis import run_analyses
from robustvit.analysis.semantics import scaled_vis_eps
from robustvit.errors import RobustvitError

FAST = "perturbation_semantics:steps=1:vis_steps=2:classes=2"


def _run(model, data, spec):
    return run_analyses(model, data, [spec], None, batch_size=12, device="cpu", limit=4)["perturbation_semantics"]


def test_a_bare_classifier_name_is_refused_in_one_line(cls_vit, tiny_data):
    with pytest.raises(RobustvitError, match="classifier_pretrained=1") as e:
        _run(cls_vit, tiny_data, FAST + ":classifier=vit_cifar_tiny")
    assert "\n" not in str(e.value) and "classifier_weights=FILE" in str(e.value)
    with pytest.raises(RobustvitError, match="not a file"):
        _run(cls_vit, tiny_data, FAST + ":classifier=vit_cifar_tiny:classifier_weights=/nonexistent.pth")


def test_random_classifier_only_on_request_and_not_comparable(cls_vit, tiny_data):
    r = _run(cls_vit, tiny_data, FAST.replace("vis_steps=2", "vis_steps=100") + ":classifier=vit_cifar_tiny:allow_random=1")
    assert r["protocol"]["comparable"] is False and r["classifier_weights"]["source"] == "random"
    assert any("random weights" in n for n in r["protocol"]["deviations"])
    assert any("resized from 16×16" in n for n in r["protocol"]["deviations"])          # vit_cifar_tiny takes 32 px


def test_classifier_weights_from_a_file_and_a_checkpoint_folder(cls_vit, tiny_data, tmp_path):
    from robustvit.models import create_model
    from robustvit.models.factory import file_sha256, save_checkpoint

    torch.manual_seed(3)
    clf = create_model("vit_cifar_tiny", num_classes=5)
    torch.save(clf.net.state_dict(), tmp_path / "clf.pth")
    r = _run(cls_vit, tiny_data, FAST + f":classifier=vit_cifar_tiny:classifier_weights={tmp_path / 'clf.pth'}")
    assert r["classifier_weights"]["source"] == f"file:{tmp_path / 'clf.pth'}"
    assert r["classifier_weights"]["sha256"] == file_sha256(tmp_path / "clf.pth")
    assert not any("random weights" in n for n in r["protocol"]["deviations"])
    save_checkpoint(clf, tmp_path / "ckpt")
    r = _run(cls_vit, tiny_data, FAST + f":classifier={tmp_path / 'ckpt'}")
    assert r["classifier_weights"]["source"] == f"checkpoint:{tmp_path / 'ckpt'}"
    with pytest.raises(RobustvitError, match="checkpoint folder with its own weights"):
        _run(cls_vit, tiny_data, FAST + f":classifier={tmp_path / 'ckpt'}:classifier_pretrained=1")


def test_visualisation_eps_scales_with_resolution_and_deviations_are_named(cls_vit, tiny_data):
    assert scaled_vis_eps(15.0, 224, 224) == 15.0
    assert scaled_vis_eps(15.0, 32, 32) == pytest.approx(15.0 * 32 / 224)
    assert scaled_vis_eps(15.0, 112, 448) == pytest.approx(15.0 * math.sqrt(112 * 448 * 3 / (224 * 224 * 3)))
    r = _run(cls_vit, tiny_data, FAST)
    v = r["visualisation"]
    assert v["eps_l2"] == pytest.approx(15.0 * 16 / 224) and v["eps_l2_at_224"] == 15.0 and v["eps_scaled"] is True
    assert r["classifier"] == "self" and r["protocol"]["comparable"] is False
    assert any("analysed model itself" in n for n in r["protocol"]["deviations"])
    assert any("2 targeted PGD steps" in n for n in r["protocol"]["deviations"])
    r = _run(cls_vit, tiny_data, FAST + ":vis_scale=0:eps=8/255")
    assert r["visualisation"]["eps_l2"] == 15.0
    assert any("unscaled" in n for n in r["protocol"]["deviations"]) and any("eps = 8/255" in n for n in r["protocol"]["deviations"])
