"""The shared Registry: registration, pattern listing, close-match errors and keyword checking."""

import pytest

from robustvit.errors import RobustvitError
from robustvit.registry import Registry, accepted_keywords


def make() -> Registry:
    reg: Registry = Registry("widget", hint="see `robustvit list widgets`")

    @reg.register
    class Blue:
        name = "blue"

        def __init__(self, depth: int = 1) -> None:
            if depth < 0:
                raise TypeError("depth must be >= 0")  # an error raised *inside* the constructor
            self.depth = depth

    @reg.register
    class DeepBlue(Blue):
        name = "deep-blue"

        def __init__(self, width: int = 2, **kwargs) -> None:
            super().__init__(**kwargs)
            self.width = width

    @reg.register("green")
    def green(size: int = 3) -> int:
        return size

    return reg


def test_list_get_and_create() -> None:
    reg = make()
    assert reg.list() == ["blue", "deep-blue", "green"]
    assert reg.list("*blue") == ["blue", "deep-blue"]
    assert reg.create("blue", depth=4).depth == 4
    deep = reg.create("deep-blue", width=5, depth=7)
    assert (deep.width, deep.depth) == (5, 7)
    assert reg.create("green", size=9) == 9
    assert "green" in reg and "red" not in reg and len(reg) == 3


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(RobustvitError, match=r"unknown widget 'bleu'; did you mean blue.*see `robustvit list"):
        make().get("bleu")


def test_unknown_keyword_names_the_accepted_ones() -> None:
    reg = make()
    with pytest.raises(RobustvitError, match=r"widget 'deep-blue' takes no option 'colour'; its options: depth, width"):
        reg.create("deep-blue", colour=1)


def test_type_error_inside_constructor_is_not_an_unknown_keyword() -> None:
    with pytest.raises(TypeError, match="depth must be >= 0"):
        make().create("blue", depth=-1)


def test_duplicate_names_and_nameless_objects_are_rejected() -> None:
    reg = make()
    with pytest.raises(ValueError, match="already registered"):
        reg.register("blue")(object())
    with pytest.raises(ValueError, match="no string `name`"):
        reg.register(object())


def test_package_modules_are_imported_once_on_first_lookup(tmp_path, monkeypatch) -> None:
    """A registry built with its package name imports every module of it (sub-packages too, ``_private``
    ones not) before the first lookup, and only then: a new file is picked up with no list to edit."""
    import sys

    pkg = tmp_path / "rvt_plugins"
    (pkg / "nested").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from rvt_plugins.base import REG\n")
    (pkg / "base.py").write_text("from robustvit.registry import Registry\n"
                                 "REG = Registry('gadget', package='rvt_plugins')\nCALLS = []\n")
    body = "from rvt_plugins.base import REG, CALLS\nCALLS.append({n!r})\n@REG.register\nclass G:\n    name = {n!r}\n"
    (pkg / "alpha.py").write_text(body.format(n="alpha"))
    (pkg / "nested" / "__init__.py").write_text("")
    (pkg / "nested" / "beta.py").write_text(body.format(n="beta"))
    (pkg / "_private.py").write_text(body.format(n="private"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    import rvt_plugins.base as base

    assert base.CALLS == []                                   # nothing imported before a lookup
    assert base.REG.list() == ["alpha", "beta"]
    assert base.REG.get("beta").name == "beta" and sorted(base.CALLS) == ["alpha", "beta"]   # once each


def test_corruption_groups_follow_the_registry() -> None:
    """A corruption registered after import is in its group and in ``all`` — for ``--corruptions all``
    (``parse_corruptions``) as for ``list_corruptions`` — and leaves with it."""
    from robustvit.corruptions import CORRUPTION_GROUPS, CORRUPTIONS, Corruption, list_corruptions, register_corruption
    from robustvit.corruptions.params import BENCHMARK_CORRUPTIONS, parse_corruptions

    before = parse_corruptions("all")
    assert before == list_corruptions("all") == list(CORRUPTION_GROUPS["all"])
    assert before[:15] == list(BENCHMARK_CORRUPTIONS) and len(before) == 19
    register_corruption(Corruption("_dim", "_test_group", ("k",), {"imagenet": [(.1,)] * 5, "cifar": [(.1,)] * 5},
                                   apply_fn=lambda x, p, d: x * (1 - p.k)))
    try:
        assert parse_corruptions("all") == list_corruptions("all") == before + ["_dim"]
        assert parse_corruptions("_test_group") == ["_dim"] == list(CORRUPTION_GROUPS["_test_group"])
        assert "_dim" not in parse_corruptions("benchmark")
    finally:
        CORRUPTIONS._items.pop("_dim")
    assert parse_corruptions("all") == before and "_test_group" not in CORRUPTION_GROUPS


def test_accepted_keywords_open_signature() -> None:
    def anything(**kwargs):
        return kwargs
    assert accepted_keywords(anything) is None
    assert accepted_keywords(lambda a, *, b=1: a) == {"a", "b"}
