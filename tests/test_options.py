"""The one options parser (robustvit.options) and registry aliases."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from robustvit.errors import RobustvitError
from robustvit.options import Eps, Literal, describe, option, options_dict, parse_options, parse_spec
from robustvit.registry import Registry


@dataclass
class Opts:
    eps: Eps = 4 / 255
    steps: int = option(10, min=1, help="iterations")
    rate: float = option(0.5, min=0.0, max=1.0)
    norm: Literal["linf", "l2"] = "linf"
    shots: tuple[int, ...] = (1, 5)
    names: list[str] | None = None
    flag: bool = False
    seed: int | None = None


def test_strings_become_typed_values() -> None:
    o = parse_options(Opts, {"eps": "8/255", "steps": "20", "rate": "0.25", "norm": "l2", "shots": "1+5+10",
                             "names": "a+b", "flag": "yes", "seed": "none"}, what="suite x")
    assert o.eps == pytest.approx(8 / 255) and o.steps == 20 and o.rate == 0.25 and o.norm == "l2"
    assert o.shots == (1, 5, 10) and o.names == ["a", "b"] and o.flag is True and o.seed is None
    assert options_dict(o)["shots"] == [1, 5, 10]


def test_typed_values_pass_and_dashes_become_underscores() -> None:
    @dataclass
    class D:
        max_steps: int = 3
    assert parse_options(D, {"max-steps": 7}).max_steps == 7


@pytest.mark.parametrize("raw, words", [
    ({"stepz": "3"}, ["no option 'stepz'", "did you mean steps", "its options: eps, steps"]),
    ({"steps": ""}, ["steps=''", "integer"]),
    ({"steps": "-3"}, ["steps='-3'", ">= 1"]),
    ({"steps": "0"}, [">= 1"]),
    ({"rate": "nan"}, ["rate='nan'", "finite"]),
    ({"rate": "inf"}, ["finite"]),
    ({"rate": "1.5"}, ["<= 1.0"]),
    ({"eps": "4/0"}, ["eps='4/0'", "fraction"]),
    ({"norm": "l3"}, ["linf, l2"]),
    ({"flag": "maybe"}, ["true or false"]),
    ({"shots": "1+x"}, ["shots='1+x'"]),
])
def test_bad_values_are_one_line_errors_that_name_key_and_value(raw: dict, words: list[str]) -> None:
    with pytest.raises(RobustvitError) as e:
        parse_options(Opts, raw, what="suite 'x'")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("suite 'x'")
    for w in words:
        assert w in msg, msg


def test_required_option_and_describe() -> None:
    @dataclass
    class R:
        model: str
        depth: int = option(2, help="blocks")
    with pytest.raises(RobustvitError, match="needs option 'model'"):
        parse_options(R, {}, what="x")
    assert describe(R)[1] == {"name": "depth", "type": "int", "default": 2, "help": "blocks"}
    assert not math.isnan(parse_options(Opts, {"rate": 0}).rate)


def test_spec_grammar() -> None:
    assert parse_spec(" pgd : eps = 1/255 :max-steps=3", "suite") == ("pgd", {"eps": "1/255", "max_steps": "3"})
    for bad in ("", ":a=1", "pgd:eps", "pgd:=3", "pgd:a=1:a=2"):
        with pytest.raises(RobustvitError):
            parse_spec(bad, "suite")


def test_registry_aliases_resolve_but_are_not_listed() -> None:
    reg: Registry[object] = Registry("widget")

    @dataclass
    class O:
        depth: int = option(1, min=0)

    class PatchFool:
        name = "patch_fool"
        aliases = ("patch-fool",)
        Options = O
    reg.register(PatchFool)
    assert reg.get("patch-fool") is PatchFool and "patch-fool" in reg and reg.list() == ["patch_fool"]
    assert reg.canonical("patch-fool") == "patch_fool"
    assert reg.parse_options("patch-fool", {"depth": "3"}).depth == 3
    with pytest.raises(RobustvitError, match="widget 'patch_fool': depth='-1'"):
        reg.parse_options("patch_fool", {"depth": "-1"})
    with pytest.raises(ValueError):
        reg.alias("patch-fool", "other")
