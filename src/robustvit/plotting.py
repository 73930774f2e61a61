"""The figure helpers of robustvit (analyses and report alike): one way to save a figure, integer ticks for
block / layer / head indices, and legends that do not cover the data.

>>> import matplotlib.pyplot as plt
>>> fig, ax = plt.subplots()
>>> _ = ax.plot([0, 1, 2], [0.9, 0.5, 0.7], label="accuracy")
>>> integer_ticks(ax, "x"); _ = place_legend(ax)
>>> save_figure(fig, "out/lesion.png")
'lesion.png'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

#: The resolution every analysis figure is written at.
DPI = 110


def save_figure(fig: Any, path: str | Path, *, dpi: int = DPI) -> str:
    """Write ``fig`` to ``path`` (creating its folder; cropped to what is drawn, keeping a legend outside the
    axes), close it, and return the file's name."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path.name


def finish_figure(fig: Any, path: str | Path, title: str | None = None, *, fontsize: float | None = None,
                  tight: bool = True) -> str:
    """Give ``fig`` its title (``suptitle``), lay it out (``tight``; off beside a colorbar) and write it
    (:func:`save_figure`); returns the file's name."""
    if title:
        fig.suptitle(title, **({"fontsize": fontsize} if fontsize else {}))
    if tight:
        fig.tight_layout()
    return save_figure(fig, path)


def integer_ticks(ax: Any, axis: Literal["x", "y", "both"] = "x") -> None:
    """Ticks only at whole numbers on ``axis`` (block, layer and head indices are integers)."""
    from matplotlib.ticker import MaxNLocator

    for a in ("x", "y") if axis == "both" else (axis,):
        getattr(ax, f"{a}axis").set_major_locator(MaxNLocator(integer=True))


def grouped_bars(ax: Any, names: list[str], series: list[tuple[str, dict[str, Any]]]) -> None:
    """One group of bars per name, one bar per ``(label, {name: value})`` series side by side (missing: 0)."""
    width = 0.8 / len(series)
    for j, (label, values) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, [values.get(n) or 0.0 for n in names], width=width, label=label)


def place_legend(ax: Any, *, outside: bool = False, **kwargs: Any) -> Any:
    """A legend that does not cover the data: matplotlib's least-covering corner (``loc="best"``), or to the
    right of the axes (``outside=True``, for long legends such as one entry per head). Nothing when no artist
    has a label."""
    if not ax.get_legend_handles_labels()[0]:
        return None
    kwargs.setdefault("fontsize", 8)
    if outside:
        return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)
    return ax.legend(loc="best", **kwargs)


__all__ = ["DPI", "grouped_bars", "integer_ticks", "place_legend", "save_figure"]
