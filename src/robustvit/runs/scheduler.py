"""The scheduler: chunks × (task, part) units → the ones not yet stored, run in order, each stored as it ends.

A run is a number of chunks (chunk ``c`` = images ``c·B … (c+1)·B−1`` of a pass, or a single chunk 0 for work
that reads no images); each chunk has units (task, part). :func:`run_units` skips the stored ones, reads the
images of a chunk only when it has units left (``load``: none needed for work without data), calls ``work``
and stores every ``((task, part), stats)`` it yields at once. Work is split between processes by chunk
(:class:`Worker`): chunk ``c`` belongs to worker ``c mod count``, for ``torchrun`` ranks and for shards
(``--shard K/N``: the K-th of N disjoint sets of chunks) alike.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from robustvit.errors import RobustvitError
from robustvit.runs.store import UnitStore
from robustvit.utils import add_stats

T = TypeVar("T")
Unit = tuple[str, str]                                  # (task, part)
Progress = Callable[[int], AbstractContextManager[Callable[..., None]]]


@dataclass(frozen=True)
class Shard:
    """``--shard K/N``: the K-th (1-based, 1 ≤ K ≤ N) of N disjoint sets of chunks, for job arrays."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if m is None:
            raise RobustvitError(f"--shard takes K/N (the K-th of N shards, 1-based, e.g. 2/8), got {text!r}")
        k, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 1 <= k <= n:
            raise RobustvitError(f"--shard {text}: K must be 1 … N and N >= 1 (shards are numbered from 1)")
        return cls(k, n)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Worker:
    """The units this process runs: the chunks ``c`` with ``c % count == index``."""

    index: int = 0
    count: int = 1

    @classmethod
    def of(cls, rank: int = 0, world: int = 1, shard: Shard | None = None) -> "Worker":
        """Rank ``rank`` of ``world`` processes, inside shard ``shard`` (the shards' ranks interleave)."""
        k, n = (0, 1) if shard is None else (shard.index - 1, shard.count)
        return cls(k * world + rank, n * world)

    def owns(self, chunk: int) -> bool:
        return chunk % self.count == self.index

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def pending_chunks(store: UnitStore, nchunks: int, units: Callable[[int], Sequence[Unit]],
                   worker: Worker = Worker()) -> list[tuple[int, list[Unit]]]:
    """(chunk, units not stored yet) for each of this worker's chunks that has any."""
    done = store.done()
    todo = []
    for c in range(nchunks):
        if worker.owns(c):
            pend = [u for u in units(c) if (u[0], u[1], c) not in done]
            if pend:
                todo.append((c, pend))
    return todo


def run_units(store: UnitStore, nchunks: int, units: Callable[[int], Sequence[Unit]],
              work: Callable[[T | None, int, list[Unit]], Iterable[tuple[Unit, Any]]], *,
              load: Callable[[list[int]], Iterable[T]] | None = None, worker: Worker = Worker(),
              progress: Progress | None = None, device: torch.device | None = None) -> int:
    """Run every unit of ``nchunks`` chunks (``units(c)``: chunk c's units) that ``store`` lacks and this
    ``worker`` owns. ``load(chunks)`` yields each listed chunk's data in order (None: ``work`` gets None);
    ``work(data, c, pending)`` yields ``((task, part), stats)``, each stored at once with the seconds since the
    previous one (on CUDA after a synchronisation). Returns the number of chunks run."""
    todo = pending_chunks(store, nchunks, units, worker)
    if not todo:
        return 0
    data: Iterable[T | None] = load([c for c, _ in todo]) if load is not None else (None for _ in todo)
    sync = device is not None and device.type == "cuda"
    with (progress(len(todo)) if progress is not None else nullcontext(lambda *a: None)) as tick:
        for (c, pend), batch in zip(todo, data):
            t0 = time.time()
            for (task, part), stats in work(batch, c, pend):
                if sync:
                    torch.cuda.synchronize(device)
                store.put(task, part, c, stats, time.time() - t0, worker.label)
                t0 = time.time()
            tick()
    return len(todo)


def collect(store: UnitStore, task: str, parts: Sequence[str], nchunks: int) -> dict[str, Any]:
    """The statistics of ``task`` summed over its ``nchunks`` chunks, per part; one line when any is missing."""
    total: dict[str, Any] = {}
    for p in parts:
        items = [store.get(task, p, c) for c in range(nchunks)]
        if any(i is None for i in items):
            raise RobustvitError(f"{task}: part {p} has no results (was the run interrupted?); re-run the command")
        acc = items[0]
        for i in items[1:]:
            acc = add_stats(acc, i)
        total[p] = acc
    return total


__all__ = ["Progress", "Shard", "Unit", "Worker", "collect", "pending_chunks", "run_units"]
