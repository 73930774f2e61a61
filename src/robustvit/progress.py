"""Progress of a long loop as a context manager: ``with progress_bar(True, "epoch 1", 100) as tick: tick("loss 0.3")``.

On a terminal: a rich progress bar (done/total, elapsed, remaining). Without one (a batch job, a pipe, a log
file): a plain line on stderr every :data:`PLAIN_INTERVAL` seconds, e.g.
``robustvit: vit · clean: 3/7, 45 s``, and a last one when the loop ends after such a line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

#: Seconds between two plain-text progress lines (no terminal).
PLAIN_INTERVAL = 30.0


class progress_bar:  # noqa: N801  (used like a function)
    def __init__(self, enabled: bool, title: str, total: int) -> None:
        self.enabled, self.title, self.total = enabled, title, total
        self.plain = enabled and not sys.stderr.isatty()

    def __enter__(self) -> Callable[..., None]:
        if not self.enabled:
            return lambda _info="": None
        if self.plain:
            self.start = self.last = time.monotonic()
            self.done, self.info, self.said = 0, "", False
            return self._plain_tick
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), TextColumn("{task.fields[info]}"), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.title, total=self.total, info="")
        return lambda info="": self.bar.update(task, advance=1, info=info)

    def _plain_tick(self, info: str = "") -> None:
        self.done, self.info = self.done + 1, info
        now = time.monotonic()
        if now - self.last >= PLAIN_INTERVAL:
            self.last = now
            self._say(now)

    def _say(self, now: float) -> None:
        info = f", {self.info}" if self.info else ""
        print(f"robustvit: {self.title}: {self.done}/{self.total}{info}, {now - self.start:.0f} s",
              file=sys.stderr, flush=True)
        self.said = True

    def __exit__(self, *exc: object) -> None:
        if self.enabled and self.plain and self.said and self.last != time.monotonic():
            self._say(time.monotonic())
        elif self.enabled and not self.plain:
            self.bar.stop()
