"""A rich progress bar as a context manager: ``with progress_bar(True, "epoch 1", 100) as tick: tick("loss 0.3")``."""

from __future__ import annotations

from collections.abc import Callable


class progress_bar:  # noqa: N801  (used like a function)
    def __init__(self, enabled: bool, title: str, total: int) -> None:
        self.enabled, self.title, self.total = enabled, title, total

    def __enter__(self) -> Callable[..., None]:
        if not self.enabled:
            return lambda _info="": None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), TextColumn("{task.fields[info]}"), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.title, total=self.total, info="")
        return lambda info="": self.bar.update(task, advance=1, info=info)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()
