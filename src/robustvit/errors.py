"""User-facing errors: one line that says what went wrong and what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RobustvitError(Exception):
    """An error caused by the user's input; the CLI prints it as one line, without a traceback."""


def unknown_name(kind: str, name: str, known: Iterable[str], hint: str = "") -> RobustvitError:
    """Build the error for an unknown registry name, listing close matches."""
    known = sorted(set(known))
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    msg = f"unknown {kind} {name!r}"
    if close:
        msg += f"; did you mean {', '.join(close)}?"
    elif len(known) <= 30:
        msg += f"; choose from {', '.join(known)}"
    if hint:
        msg += f" ({hint})"
    return RobustvitError(msg)
