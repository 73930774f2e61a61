"""Small shared helpers: seeds and generators, ε parsing, devices, image-batch checks, eval mode."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import torch

from robustvit.errors import RobustvitError


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed derived deterministically from ``seed`` and any keys (order matters).

    Used so that a unit of work gets the same random numbers whatever order units run in.
    """
    text = "\x1f".join([str(int(seed))] + [str(k) for k in keys])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def make_generator(seed: int | None = None, device: torch.device | str = "cpu",
                   generator: torch.Generator | None = None) -> torch.Generator:
    """Return ``generator`` if given, else a new generator on ``device`` seeded with ``seed`` (0 if None)."""
    if generator is not None:
        return generator
    return torch.Generator(device=torch.device(device)).manual_seed(0 if seed is None else int(seed))


def default_generator(device: torch.device | str = "cpu") -> torch.Generator:
    """torch's global generator for ``device`` (what ``torch.manual_seed`` seeds), as torchvision transforms
    and kornia draw from when no generator is given."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.default_generators[dev.index if dev.index is not None else torch.cuda.current_device()]
    return torch.default_generator


def parse_eps(eps: float | int | str) -> float:
    """Parse an ε given as a number or a string such as ``"4/255"`` or ``"0.5"``."""
    try:
        value = float(eps) if isinstance(eps, (int, float)) else float(Fraction(str(eps).strip()))
    except (ValueError, ZeroDivisionError, OverflowError):
        raise RobustvitError(f"cannot read eps {eps!r}; write a number such as 0.0157 or a fraction such as 4/255") from None
    if not math.isfinite(value):
        raise RobustvitError(f"eps must be a finite number, got {eps!r}")
    if value < 0:
        raise RobustvitError(f"eps must be >= 0, got {eps!r}")
    return value


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/"auto" → CUDA if available, else CPU; otherwise the named device (checked)."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise RobustvitError(f"unknown device {device!r}; use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RobustvitError(f"device {device!r} requested but CUDA is not available; use --device cpu")
    return dev


def check_images(x: torch.Tensor, *, name: str = "images", check_range: bool = True) -> None:
    """Raise a one-line error unless ``x`` is a float batch (N, 3, H, W) with values in [0, 1].

    The range check synchronises with the device; hot paths call it once per batch at most.
    """
    if not isinstance(x, torch.Tensor):
        raise RobustvitError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise RobustvitError(f"{name} must be float in [0, 1], got dtype {x.dtype}; convert uint8 with x.float() / 255")
    if x.ndim != 4 or x.shape[1] != 3:
        raise RobustvitError(f"{name} must have shape (N, 3, H, W), got {tuple(x.shape)}")
    if check_range and x.numel():
        lo, hi = torch.aminmax(x)
        check_unit_range(lo.item(), hi.item(), name=name)


def check_unit_range(lo: float, hi: float, *, name: str = "images") -> None:
    """The range half of :func:`check_images`, for a minimum and maximum computed elsewhere (NaN fails)."""
    if not (lo >= -1e-6 and hi <= 1 + 1e-6):
        raise RobustvitError(f"{name} must lie in [0, 1], got values in [{lo:.3g}, {hi:.3g}]; "
                             "pass unnormalised images (robustvit models normalise inside)")


def add_stats(a: Any, b: Any) -> Any:
    """Add two unit statistics: numbers add, lists add element-wise, dicts add key-wise (tensors, as suites may
    return them, count as their values)."""
    a, b = to_plain(a), to_plain(b)
    if isinstance(a, dict):
        return {k: add_stats(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
    if isinstance(a, list):
        if len(a) != len(b):
            raise ValueError("cannot add lists of different lengths")
        return [add_stats(u, v) for u, v in zip(a, b)]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    return a  # strings and other constants: keep the first


def sum_stats(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of unit statistics (:func:`add_stats`), e.g. of a part's chunks."""
    total: dict[str, Any] = {}
    for item in items:
        total = add_stats(total, item) if total else to_plain(item)
    return total


def to_plain(stats: Any) -> Any:
    """``stats`` as plain JSON data: tensors (and NumPy values: anything with ``tolist()``) in dicts, lists and
    tuples become Python numbers and lists. On CUDA this reads the device, so it waits for the work that made them:
    the run engine calls it one unit late (:func:`robustvit.runs.scheduler.run_units`)."""
    if isinstance(stats, dict):
        return {k: to_plain(v) for k, v in stats.items()}
    if isinstance(stats, (list, tuple)):
        return [to_plain(v) for v in stats]
    if stats is None or isinstance(stats, (str, int, float)):
        return stats
    tolist = getattr(stats, "tolist", None)
    return tolist() if callable(tolist) else stats


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Switch ``model`` (every submodule) to eval mode and restore each submodule's own flag afterwards.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Dropout(), torch.nn.Dropout())
        >>> _ = net[1].eval()
        >>> with eval_mode(net):
        ...     [m.training for m in net]
        [False, False]
        >>> net.training, [m.training for m in net]
        (True, [True, False])
    """
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, flag in modes:
            m.training = flag
