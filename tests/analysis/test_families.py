"""The one model-family taxonomy (robustvit.models.families): architecture family → analysis family, the
probe deciding only where the architecture does not, and a probe built at most once."""

import dataclasses

import pytest
from torch import nn

from robustvit.analysis import FAMILIES as ANALYSIS_FAMILIES
from robustvit.analysis import family_of as analysis_family_of
from robustvit.models.families import (ANALYSIS_FAMILY, ARCHITECTURE_FAMILIES, FAMILIES, architecture_family,
                                       family_of)


def test_one_taxonomy_everywhere():
    assert ANALYSIS_FAMILIES is FAMILIES and analysis_family_of is family_of
    assert set(ANALYSIS_FAMILY) <= set(ARCHITECTURE_FAMILIES) and set(ANALYSIS_FAMILY.values()) <= set(FAMILIES)


def test_spec_family_decides_without_a_probe(tiny_vit, tiny_resnet):
    calls = []

    def probe():
        calls.append(1)
        raise AssertionError("no probe is needed when the architecture decides")

    assert family_of(tiny_vit, probe) == "vit" and family_of(tiny_resnet, probe) == "cnn"
    assert not calls


def test_the_probe_decides_other_architectures_and_is_built_once(tiny_vit):
    from robustvit.models.probe import make_probe

    cait_like = dataclasses.replace(tiny_vit.spec, family="cait")
    tiny_vit.spec = cait_like
    built = []

    def probe():
        built.append(make_probe(tiny_vit))
        return built[-1]

    assert family_of(tiny_vit, probe) == "vit" and len(built) == 1        # the ViT probe reproduces it
    assert family_of(tiny_vit, built[0]) == "vit" and len(built) == 1     # a built probe is used as is
    assert family_of(tiny_vit) == "vit"                                    # else one is built


def test_a_model_no_probe_reads_is_other():
    from robustvit.models import ModelSpec, Normalized

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))
    m = Normalized(net, ModelSpec(architecture="plain_cnn", num_classes=5, input_size=(3, 16, 16))).eval()
    assert m.spec.family == "other" and family_of(m) == "other"


@pytest.mark.parametrize("name,cls,expected", [
    ("vit_small_patch16_224", "VisionTransformer", "vit"), ("deit_tiny_patch16_224", "VisionTransformer", "deit"),
    ("cait_xxs24_224", "Cait", "cait"), ("xcit_nano_12_p16_224", "Xcit", "xcit"),
    ("swin_tiny_patch4_window7_224", "SwinTransformer", "swin"), ("fan_tiny_12_p16_224", "Fan", "fan"),
    ("beit_base_patch16_224", "Beit", "beit"), ("eva02_tiny_patch14_224", "Eva", "eva"),
    ("resnet50", "ResNet", "resnet"), ("convnext_tiny", "ConvNeXt", "convnext"), ("wide_resnet50_2", "ResNet", "resnet"),
    ("efficientnet_b0", "EfficientNet", "other"), ("my_net", "VisionTransformer", "vit"),
])
def test_architecture_family_agrees_with_the_model_factory(name, cls, expected):
    from robustvit.models.factory import model_family

    net = type(cls, (nn.Module,), {})()
    assert architecture_family(name, net) == expected == model_family(name, net)   # factory uses the taxonomy


def test_family_of_a_probe_that_fails_lazily_is_other(tiny_resnet):
    from robustvit.errors import RobustvitError

    tiny_resnet.spec = dataclasses.replace(tiny_resnet.spec, family="other")

    def probe():
        raise RobustvitError("no probe")

    assert family_of(tiny_resnet, probe) == "other"
    assert family_of(tiny_resnet) == "cnn"                                  # the block probe reads a ResNet
