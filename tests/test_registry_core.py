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


def test_loader_runs_once_on_first_lookup() -> None:
    calls = []
    reg: Registry = Registry("thing", loader=lambda: calls.append(reg.add("x", 1)))
    assert calls == []
    assert reg.list() == ["x"] and reg.get("x") == 1
    assert len(calls) == 1


def test_accepted_keywords_open_signature() -> None:
    def anything(**kwargs):
        return kwargs
    assert accepted_keywords(anything) is None
    assert accepted_keywords(lambda a, *, b=1: a) == {"a", "b"}
