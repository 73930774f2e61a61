"""Typed options: every registered component declares its options as a dataclass, and one parser turns the
``name:key=value:key=value`` grammar (or a dict from YAML / Python) into it.

>>> from dataclasses import dataclass
>>> @dataclass
... class PGDOptions:
...     eps: Eps = 4 / 255
...     steps: int = option(10, min=1, help="iterations")
...     norm: Literal["linf", "l2"] = "linf"
>>> parse_options(PGDOptions, {"eps": "8/255", "steps": "20"}, what="attack pgd").steps
20
>>> parse_spec("pgd:eps=8/255:steps=20", "suite")
('pgd', {'eps': '8/255', 'steps': '20'})

Field types the parser knows: ``int``, ``float``, ``Eps`` (a float that also reads fractions such as
``4/255``), ``bool`` (``1/0``, ``true/false``, ``yes/no``, ``on/off``), ``str``, ``Literal[...]`` (choices),
``X | None`` (``none`` or an empty value gives None), ``list[X]`` / ``tuple[X, ...]`` (items joined by ``+``,
or a list) and ``dict`` (a mapping, from YAML or Python). ``option(default, min=, max=, help=)`` adds bounds
and a help line. NaN and infinities are refused for numbers. Every error is one line that names the
component, the key, the value and what is valid.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from fractions import Fraction
from typing import Any, Literal, TypeVar, Union

from robustvit.errors import RobustvitError

T = TypeVar("T")

__all__ = ["Eps", "Literal", "NoOptions", "describe", "option", "option_names", "options_dict", "parse_options",
           "parse_spec"]


class Eps(float):
    """A float option that also reads fractions (``4/255``); kept as the float's value."""


@dataclass
class NoOptions:
    """The options of a component that takes none."""


def option(default: Any = MISSING, *, min: float | None = None, max: float | None = None, help: str = "",
           default_factory: Any = MISSING) -> Any:
    """A dataclass field with bounds (inclusive) and a help line for the CLI's listing."""
    meta = {"min": min, "max": max, "help": help}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def parse_spec(spec: str, kind: str) -> tuple[str, dict[str, str]]:
    """``"pgd:eps=1/255:steps=20"`` → ``("pgd", {"eps": "1/255", "steps": "20"})``; dashes in keys become
    underscores. The one spec grammar of suites, analyses, data sources, corruptions and lists."""
    name, *opts = spec.strip().split(":")
    if not name.strip():
        raise RobustvitError(f"{kind} spec {spec!r} has no name; write name[:key=value…]")
    options: dict[str, str] = {}
    for opt in opts:
        if "=" not in opt:
            raise RobustvitError(f"{kind} option {opt!r} in {spec!r} must look like key=value")
        k, v = opt.split("=", 1)
        key = k.strip().replace("-", "_")
        if not key:
            raise RobustvitError(f"{kind} option {opt!r} in {spec!r} has no key; write key=value")
        if key in options:
            raise RobustvitError(f"{kind} option {key!r} is given twice in {spec!r}")
        options[key] = v.strip()
    return name.strip(), options


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(map(str, typing.get_args(tp)))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None)) + " | none"
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"{_type_name(args[0]) if args else 'value'}+…"
    if tp is Eps:
        return "number or fraction"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any) -> Any:
    """``value`` (a string from the CLI, or a Python / YAML value) as type ``tp``; ValueError when not."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))):
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0] if len(errors) == 1 else f"expected {_type_name(tp)}")
    if origin is Literal:
        choices = typing.get_args(tp)
        for c in choices:
            if value == c or (isinstance(value, str) and str(c) == value.strip()):
                return c
        raise ValueError(f"expected one of {', '.join(map(str, choices))}")
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item = args[0] if args else Any
        if isinstance(value, str):
            items: list[Any] = [t for t in value.replace(",", "+").split("+") if t.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            items = [value]
        out = [_convert(item, v) for v in items]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ValueError("expected a mapping")
        return dict(value)
    if tp is bool:
        if isinstance(value, int) and value in (0, 1):         # True and False too
            return bool(value)
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false (1/0, yes/no)")
    if tp is int:
        if isinstance(value, bool):
            raise ValueError("expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError("expected an integer") from None
    if tp in (float, Eps):
        if isinstance(value, bool):
            raise ValueError("expected a number")
        if isinstance(value, (int, float)):
            out = float(value)
        else:
            text = str(value).strip()
            try:
                out = float(Fraction(text)) if tp is Eps and "/" in text else float(text)
            except (ValueError, ZeroDivisionError):
                raise ValueError("expected a number" + (" or a fraction such as 4/255" if tp is Eps else "")) from None
        if not math.isfinite(out):
            raise ValueError("expected a finite number")
        return out
    if tp is str:
        if isinstance(value, (dict, list, tuple)):
            raise ValueError("expected a string")
        return str(value)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ValueError(f"expected {_type_name(tp)}")


def _check_bounds(f: dataclasses.Field, value: Any) -> str | None:
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    vals = value if isinstance(value, (list, tuple)) else [value]
    for v in vals:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if lo is not None and v < lo:
            return f"must be >= {lo}"
        if hi is not None and v > hi:
            return f"must be <= {hi}"
    return None


def option_names(cls: type) -> list[str]:
    """The option names of an options dataclass."""
    return [f.name for f in fields(cls) if f.init]


def parse_options(cls: type[T], raw: Mapping[str, Any] | None = None, *, what: str = "component", **extra: Any) -> T:
    """An instance of the options dataclass ``cls`` from ``raw`` (strings from a spec, or typed values) and
    ``extra``; unknown keys and bad values give one-line errors naming ``what`` and the valid choices."""
    values = {str(k).replace("-", "_"): v for k, v in {**(raw or {}), **extra}.items()}
    known = {f.name: f for f in fields(cls) if f.init}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    for k in values:
        if k not in known:
            close = difflib.get_close_matches(k, known, n=3, cutoff=0.6)
            raise RobustvitError(f"{what} has no option {k!r}"
                                 + (f"; did you mean {', '.join(close)}?" if close else "")
                                 + f"; its options: {', '.join(known) or 'none'}")
    kwargs: dict[str, Any] = {}
    for k, v in values.items():
        f = known[k]
        try:
            conv = _convert(hints[k], v)
        except ValueError as e:
            raise RobustvitError(f"{what}: {k}={v!r} is not valid ({e})") from None
        bad = _check_bounds(f, conv)
        if bad:
            raise RobustvitError(f"{what}: {k}={v!r} is out of range ({k} {bad})")
        kwargs[k] = conv
    missing = [n for n, f in known.items() if n not in kwargs and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise RobustvitError(f"{what} needs option {missing[0]!r} ({missing[0]}=…)")
    return cls(**kwargs)


def options_dict(opts: Any) -> dict[str, Any]:
    """``asdict`` of an options instance, with tuples as lists (JSON-friendly, for results.json)."""
    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(i) for i in v]
        if isinstance(v, dict):
            return {k: plain(i) for k, i in v.items()}
        if isinstance(v, Eps):
            return float(v)
        return v
    return {k: plain(v) for k, v in dataclasses.asdict(opts).items()}


def describe(cls: type) -> list[dict[str, Any]]:
    """One entry per option — name, type, default, help — for ``robustvit list … --options`` and docs."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING
                                                              else None)
        out.append({"name": f.name, "type": _type_name(hints[f.name]), "default": default,
                    "help": f.metadata.get("help", "")})
    return out
