"""One small registry for everything robustvit looks up by name (attacks, corruptions, suites, data
sources, losses, recipes, analyses, report sections).

>>> reg = Registry("widget")
>>> @reg.register
... class Blue:
...     name = "blue"
...     def __init__(self, depth: int = 1) -> None:
...         self.depth = depth
>>> reg.create("blue", depth=2).depth
2
>>> reg.list("b*")
['blue']
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from robustvit.errors import RobustvitError, unknown_name
from robustvit.options import parse_spec  # noqa: F401  (the one spec grammar; re-exported)

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → object (a class, a factory function or a plain spec object).

    Args:
        kind: what the things are called in error messages (``"attack"``, ``"corruption"``).
        package: the package (or packages, or single modules) whose every submodule is imported before the
            first lookup, so that a new module with a registered class is picked up with no list to edit
            (modules whose name starts with ``_`` are skipped).
        hint: appended to the unknown-name error (e.g. what to type instead).

    Example:
        >>> from robustvit.attacks.base import ATTACKS     # Registry("attack", package="robustvit.attacks")
        >>> ATTACKS.packages, ATTACKS.list("apgd*")        # the first lookup imports every attack module
        (('robustvit.attacks',), ['apgd_ce', 'apgd_dlr', 'apgd_t'])
    """

    def __init__(self, kind: str, *, package: str | tuple[str, ...] = (), hint: str = "") -> None:
        self.kind = kind
        self.hint = hint
        self.packages: tuple[str, ...] = (package,) if isinstance(package, str) else tuple(package)
        self._loaded = False
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._on_miss: list[Callable[[], object]] = []

    # -- registration ---------------------------------------------------------------------------------
    @overload
    def register(self, obj: T) -> T: ...
    @overload
    def register(self, obj: str) -> Callable[[T], T]: ...

    def register(self, obj: Any) -> Any:
        """Decorator: ``@reg.register`` uses the object's ``name`` attribute, ``@reg.register("name")`` (or
        ``reg.register("name")(obj)``) the name given."""
        if isinstance(obj, str):
            def deco(item: T) -> T:
                self.add(obj, item)
                return item
            return deco
        name = getattr(obj, "name", "")
        if not name or not isinstance(name, str):
            raise ValueError(f"{obj!r} has no string `name`; use register('name')")
        self.add(name, obj)
        return obj

    def add(self, name: str, item: T, aliases: tuple[str, ...] = ()) -> None:
        """Register ``item`` under ``name`` (a second object under the same name is a programming error);
        ``aliases`` are other spellings that resolve to it (e.g. the hyphenated ``patch-fool``)."""
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        for alias in (*aliases, *getattr(item, "aliases", ())):
            if alias != name:
                self.alias(alias, name)

    def alias(self, alias: str, name: str) -> None:
        """Make ``alias`` another spelling of the registered ``name`` (not listed, resolved by lookups)."""
        if self._aliases.get(alias, name) != name or alias in self._items:
            raise ValueError(f"{self.kind} alias {alias!r} is already taken")
        self._aliases[alias] = name

    def canonical(self, name: str) -> str:
        """The registered name of ``name`` or of an alias (unknown names are returned unchanged)."""
        self._load()
        return name if name in self._items else self._aliases.get(name, name)

    def aliases(self) -> dict[str, str]:
        """Alias → registered name."""
        self._load()
        return dict(self._aliases)

    # -- lookup ---------------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True         # first: a module that looks names up while it registers sees the rest
            for name in self.packages:
                import_submodules(name)

    def list(self, pattern: str | None = None) -> list[str]:
        """Sorted names, optionally filtered by a shell-style pattern such as ``"apgd*"``."""
        self._load()
        return sorted(n for n in self._items if pattern is None or fnmatch.fnmatch(n, pattern))

    def get(self, name: str) -> T:
        """The object registered under ``name``.

        Args:
            name: a registered name or one of its aliases.

        Returns:
            The registered class, factory or spec object.

        Raises:
            RobustvitError: one line naming the close matches, for an unknown name.

        Example:
            >>> reg = Registry("widget")
            >>> _ = reg.register("blue")(dict)
            >>> reg.get("blue") is dict
            True
            >>> reg.get("bleu")
            Traceback (most recent call last):
            robustvit.errors.RobustvitError: unknown widget 'bleu'...
        """
        if self.canonical(name) not in self._items:
            for fill in self._on_miss:
                fill()
        name = self.canonical(name)
        if name not in self._items:
            raise unknown_name(self.kind, name, self._items, self.hint)
        return self._items[name]

    def on_miss(self, fill: Callable[[], object]) -> None:
        """Call ``fill`` (which may register more) when a lookup misses, before the unknown-name error: items
        derived from another registry (an attack's evaluation suite) that was extended after this one loaded."""
        self._on_miss.append(fill)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def __len__(self) -> int:
        self._load()
        return len(self._items)

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._items[n]) for n in self.list()]

    def values(self) -> list[T]:
        """The registered objects in the order they were registered."""
        self._load()
        return list(self._items.values())

    # -- construction ---------------------------------------------------------------------------------
    def options_class(self, name: str) -> type:
        """The options dataclass the registered object declares as ``Options`` (``NoOptions`` if none)."""
        from robustvit.options import NoOptions
        return getattr(self.get(name), "Options", NoOptions)

    def parse_options(self, name: str, raw: dict[str, Any] | None = None) -> Any:
        """``raw`` (spec strings or typed values) parsed into the object's ``Options`` (one-line errors)."""
        from robustvit.options import parse_options
        return parse_options(self.options_class(name), raw, what=f"{self.kind} {self.canonical(name)!r}")

    def keywords(self, name: str) -> set[str] | None:
        """The keywords the registered callable accepts (:func:`accepted_keywords`)."""
        return accepted_keywords(self.get(name))

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the registered class or factory.

        Args:
            name: a registered name or alias.
            args, kwargs: passed on; the keyword names are checked against the constructor first.

        Returns:
            What the class or factory returns.

        Raises:
            RobustvitError: one line naming the accepted keywords, for an unknown keyword (a ``TypeError``
                raised *inside* the constructor propagates unchanged).
        """
        obj = self.get(name)
        accepted = accepted_keywords(obj)
        if accepted is not None:
            bad = sorted(set(kwargs) - accepted)
            if bad:
                raise RobustvitError(f"{self.kind} {name!r} takes no option {', '.join(map(repr, bad))}; "
                                     f"its options: {', '.join(sorted(accepted)) or 'none'}")
        return obj(*args, **kwargs)  # type: ignore[operator]


def import_submodules(package: str) -> None:
    """Import ``package`` and every submodule below it not named ``_*``, so their registration decorators run."""
    module = importlib.import_module(package)
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        if not info.name.startswith("_"):
            import_submodules(f"{package}.{info.name}")


def accepted_keywords(obj: Any) -> set[str] | None:
    """Keyword names accepted by a function or a class constructor; None when any keyword is accepted.

    For a class whose ``__init__`` takes ``**kwargs`` the parents' constructors are followed, as the
    keywords are usually passed up with ``super().__init__(**kwargs)``.
    """
    if inspect.isclass(obj):        # the constructors up the MRO but object's (always last)
        funcs = [klass.__dict__["__init__"] for klass in obj.__mro__[:-1] if "__init__" in klass.__dict__]
    else:
        funcs = [obj]
    names: set[str] = set()
    for fn in funcs:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return None
        names.update(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            names.discard("self")
            return names
    return None if funcs else set()
