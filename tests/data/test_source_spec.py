"""The one data spec grammar (``SOURCE:ARG:key=value``, the comma form kept) and the data source convention
(registered class, ``Options`` dataclass, aliases, one-line errors)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from PIL import Image

from robustvit.data import SOURCES, DataSource, TensorImageDataset, create_dataset, list_sources, parse_data_spec
from robustvit.data.shift import imagenet_wnids
from robustvit.data.sources import register_source
from robustvit.errors import RobustvitError
from robustvit.options import describe


@pytest.mark.parametrize("spec,expected", [
    ("synthshapes:train:count=100:masks=1", ("synthshapes", "train", {"count": "100", "masks": "1"})),
    ("synthshapes:train,count=100,masks=1", ("synthshapes", "train", {"count": "100", "masks": "1"})),
    ("synthshapes:train:count=100,masks=1", ("synthshapes", "train", {"count": "100", "masks": "1"})),
    ("synthshapes:count=5", ("synthshapes", "", {"count": "5"})),
    ("synthshapes:test", ("synthshapes", "test", {})),
    ("synthshapes:test,count=3,size=8,count=3", ("synthshapes", "test", {"count": "3", "size": "8"})),
    ("folder:/a,b/c", ("folder", "/a,b/c", {})),
    ("folder:/data/x:y/imgs:size=64", ("folder", "/data/x:y/imgs", {"size": "64"})),
    ("folder:/d/a=b/imgs,crop-pct=1", ("folder", "/d/a=b/imgs", {"crop_pct": "1"})),   # dashes read as underscores
    ("imagenet_r:root=/data/r", ("imagenet_r", "", {"root": "/data/r"})),
    ("imagenet_c:/d/C:corruption=fog:severity=3", ("imagenet_c", "/d/C", {"corruption": "fog", "severity": "3"})),
])
def test_grammar(spec, expected):
    assert parse_data_spec(spec) == expected


def test_colon_and_comma_forms_build_the_same_data():
    a = create_dataset("synthshapes:test:count=6:size=16:classes=3")
    b = create_dataset("synthshapes:test,count=6,size=16,classes=3")
    assert a.spec == b.spec == "synthshapes:test,size=16,count=6,seed=1,classes=3,texture_correlation=0.5"
    assert torch.equal(a.get_batch(torch.arange(6))[0], b.get_batch(torch.arange(6))[0])


@pytest.mark.parametrize("spec,match", [
    ("synthshapes", "SOURCE:ARG"),
    ("synthshapes:train:count=1:count=2", "'count' is given twice with different values"),
    ("synthshape:test", "did you mean synthshapes"),
    ("synthshapes:train:colour=1", "no option 'colour'.*its options: size, count"),
    ("synthshapes:train:cont=5", "did you mean count"),
    ("synthshapes:train:count=many", r"count='many' is not valid \(expected an integer\)"),
    ("synthshapes:train:masks=maybe", "masks='maybe' is not valid"),
    ("npz:/x.npz:size=3", "data source 'npz' has no option 'size'; its options: none"),
    ("imagenet_c:/nowhere:corruption=fog:severity=9", "severity='9' is out of range"),
    ("imagenet_c:/nowhere:sev=2", "no option 'sev'.*corruption, severity"),
    ("folder:/x:crop_pct=2", "crop_pct='2' is out of range"),
])
def test_errors_are_one_line(spec, match):
    with pytest.raises(RobustvitError, match=match) as e:
        create_dataset(spec)
    assert "\n" not in str(e.value)


def test_every_source_declares_its_options():
    for name in list_sources():
        opts = SOURCES.options_class(name)
        assert isinstance(describe(opts), list)
    assert [o["name"] for o in describe(SOURCES.options_class("synthshapes"))] == [
        "size", "count", "seed", "classes", "texture_correlation", "masks", "boxes"]
    assert SOURCES.parse_options("synthshapes", {"masks": "yes", "count": "7"}).masks is True
    assert {o["name"] for o in describe(SOURCES.options_class("imagenet_c"))} == {"corruption", "severity"}


def test_sources_take_typed_options(tmp_path):
    """Options parsed once (``SOURCES.parse_options``) build the same data as the spec's strings."""
    opts = SOURCES.parse_options("synthshapes", {"count": "5", "size": "16"})
    a = SOURCES.get("synthshapes")("test", opts)
    b = create_dataset("synthshapes:test:count=5:size=16")
    assert a.spec == b.spec and torch.equal(a.get_batch(torch.arange(5))[0], b.get_batch(torch.arange(5))[0])
    (tmp_path / imagenet_wnids()[3]).mkdir()
    Image.new("RGB", (10, 10), (200, 0, 0)).save(tmp_path / imagenet_wnids()[3] / "a.png")
    ds = SOURCES.get("imagenet_sketch")(str(tmp_path), SOURCES.parse_options("imagenet_sketch", {}), None, False)
    assert len(ds) == 1 and ds[0][1] == 3


def test_a_registered_source_class_with_options_and_an_alias():
    @register_source
    class Ramp(DataSource):
        """``ramp_test:N[:levels=K]`` — N grey images, label = grey level."""

        name = "ramp_test"
        aliases = ("ramp-test",)

        @dataclass
        class Options:
            levels: int = 4

        def build(self, arg, options, resize, strict):
            n = int(arg or 8)
            y = torch.arange(n) % options.levels
            x = (y.float() / max(options.levels - 1, 1)).view(-1, 1, 1, 1).expand(n, 3, 4, 4)
            return TensorImageDataset(x.contiguous(), y, [str(i) for i in range(options.levels)], f"ramp_test:{n}")

    try:
        assert "ramp_test" in list_sources() and "ramp-test" not in list_sources()
        ds = create_dataset("ramp-test:5:levels=3")
        x, y = ds.get_batch(torch.arange(5))
        assert y.tolist() == [0, 1, 2, 0, 1] and torch.allclose(x[:, :, 0, 0], (y.float() / 2)[:, None].expand(5, 3))
        with pytest.raises(RobustvitError, match="data source 'ramp_test' has no option 'level'; did you mean levels"):
            create_dataset("ramp_test:5:level=3")
    finally:
        SOURCES._items.pop("ramp_test")
        SOURCES._aliases.pop("ramp-test")


def test_a_source_function_still_registers_by_name():
    seen = {}

    def tiny(arg, options, resize, strict):
        seen.update(options)
        return TensorImageDataset(torch.zeros(2, 3, 4, 4), torch.tensor([0, 1]), ["a", "b"], f"tiny_test:{arg}")

    register_source("tiny_test")(tiny)
    try:
        assert len(create_dataset("tiny_test:x:anything=1")) == 2 and seen == {"anything": "1"}
    finally:
        SOURCES._items.pop("tiny_test")
