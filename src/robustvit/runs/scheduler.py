"""The scheduler: chunks × (task, part) units → the ones not yet stored, run in order, committed chunk by chunk.

A run is a number of chunks (chunk ``c`` = images ``c·B … (c+1)·B−1`` of a pass, or a single chunk 0 for work
that reads no images); each chunk has units (task, part). :func:`run_units` skips the stored ones, reads the
images of a chunk only when it has units left (``load``: none needed for work without data), calls ``work``
and stores every ``((task, part), stats)`` it yields, one transaction per chunk (a chunk's last unit goes in with
the next chunk's, once that one's first unit is under way: the device never waits for a commit).

Work is split between processes by chunk, in two ways (:class:`Worker`):

* shards (``--shard K/N``, each with its own store) split the chunks statically: chunk ``c`` belongs to shard
  ``(c mod N) + 1``;
* the ``torchrun`` ranks of one shard (or of an unsharded run) share its store and *claim* its chunks as they
  become free (:meth:`~robustvit.runs.store.UnitStore.claim`): a rank that is done with a chunk takes the next
  unclaimed one, so no rank waits at the next barrier while another still has a queue of chunks.

Nothing waits for the device between units: a unit's CUDA tensors are copied to the host without blocking when
it is yielded (:func:`stage`), and read (tensors → plain numbers) only once the next unit has been yielded, or when
the chunk ends — by then the device has moved on to the next unit's work.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from robustvit.errors import RobustvitError
from robustvit.runs.store import UnitStore, to_plain
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
    """This process: rank ``rank`` of the ``world`` processes that share one store (``torchrun``), in shard
    ``shard`` (None: the run is not sharded). A shard owns its chunks statically (:meth:`owns`); its ranks claim
    them dynamically (:func:`run_units`)."""

    rank: int = 0
    world: int = 1
    shard: Shard | None = None

    @classmethod
    def of(cls, rank: int = 0, world: int = 1, shard: Shard | None = None) -> "Worker":
        """Rank ``rank`` of ``world`` processes, inside shard ``shard``."""
        return cls(rank, world, shard)

    def owns(self, chunk: int) -> bool:
        """Whether ``chunk`` belongs to this worker's shard (every chunk without shards)."""
        return self.shard is None or chunk % self.shard.count == self.shard.index - 1

    @property
    def shared(self) -> bool:
        """Whether other processes run chunks of the same store (then chunks are claimed)."""
        return self.world > 1

    @property
    def label(self) -> str:
        """``i/n``: this process among all processes of all shards (unique; stored with each unit)."""
        k, n = (0, 1) if self.shard is None else (self.shard.index - 1, self.shard.count)
        return f"{k * self.world + self.rank}/{n * self.world}"


def pending_chunks(store: UnitStore, nchunks: int, units: Callable[[int], Sequence[Unit]],
                   worker: Worker = Worker()) -> list[tuple[int, list[Unit]]]:
    """(chunk, units not stored yet) for each chunk of this worker's shard that has any."""
    done = store.done()
    todo = []
    for c in range(nchunks):
        if worker.owns(c):
            pend = [u for u in units(c) if (u[0], u[1], c) not in done]
            if pend:
                todo.append((c, pend))
    return todo


def pass_tag(nchunks: int, units: Callable[[int], Sequence[Unit]]) -> str:
    """A name for the pass of ``nchunks`` chunks with ``units``, the same in every process of a run: the claims'
    key. A unit (task, part, chunk) belongs to one pass only, so chunk 0's units tell passes apart."""
    first = sorted({f"{t}\x1f{p}" for t, p in units(0)}) if nchunks else []
    return hashlib.sha1(json.dumps([nchunks, first]).encode()).hexdigest()[:16]


def run_units(store: UnitStore, nchunks: int, units: Callable[[int], Sequence[Unit]],
              work: Callable[[T | None, int, list[Unit]], Iterable[tuple[Unit, Any]]], *,
              load: Callable[[Iterable[int]], Iterable[T]] | None = None, worker: Worker = Worker(),
              progress: Progress | None = None, device: torch.device | None = None, tag: str | None = None) -> int:
    """Run every unit of ``nchunks`` chunks (``units(c)``: chunk c's units) that ``store`` lacks, in ``worker``'s
    shard; returns the number of chunks this process ran.

    ``load(chunks)`` gets a lazy iterable of chunk ids, in increasing order, and yields each one's data, one item
    per id and in the same order (None instead of ``load``: ``work`` gets None). When processes share the store
    (``worker.world > 1``) each id is claimed as ``load`` draws it (``tag``: the claims' key, by default
    :func:`pass_tag`): an id claimed by another process is never drawn, and ``load`` may draw a few ids ahead of the
    data it has yielded (a prefetching loader) — those are claimed then. ``load`` must draw the ids to the end.

    ``work(data, c, pending)`` yields ``((task, part), stats)``; ``stats`` may hold tensors (on the device, small:
    scalars, per-class counts): their copy to the host starts when they are yielded (:func:`stage`) and they are
    read — converted to plain numbers, :func:`~robustvit.runs.store.to_plain` — only after ``work`` has yielded
    the next unit, of this chunk or the next (so ``work`` must not change a CPU tensor in place once yielded). Each
    unit is committed with the units of the chunk in which it was read, and when ``work`` raises or the run ends,
    every unit finished by then.

    A unit's seconds are the host's time from the previous unit until it was yielded, plus the time reading its
    statistics waited; there is no synchronisation, so on CUDA the device time of a unit is counted when its
    statistics are read (partly in its neighbour's seconds), and a chunk's units add up to its time. ``device`` is
    accepted for the callers' convenience and not used."""
    todo = pending_chunks(store, nchunks, units, worker)
    if not todo:
        return 0
    key = "" if not worker.shared else tag if tag is not None else pass_tag(nchunks, units)
    claimed: deque[tuple[int, list[Unit]]] = deque()
    drawn_all = False
    ran = 0
    with (progress(len(todo)) if progress is not None else nullcontext(lambda *a: None)) as tick:

        def chunk_ids() -> Iterator[int]:
            nonlocal drawn_all
            for c, pend in todo:
                if worker.shared and not store.claim(key, c, worker.label):
                    tick()                            # another process runs it
                    continue
                claimed.append((c, pend))
                yield c
            drawn_all = True

        ids = chunk_ids()
        data: Iterable[T | None] = load(ids) if load is not None else (None for _ in ids)
        held: Held | None = None
        try:
            for batch in data:
                if not claimed:
                    raise RobustvitError("the scheduler's load() yielded more data than the chunk ids it drew "
                                         "(one item per id, in order)")
                c, pend = claimed.popleft()
                prev, held = held, None         # _run_chunk stores it, also when it raises
                held = _run_chunk(store, c, pend, work(batch, c, pend), worker.label, prev)
                ran += 1
                tick()
        except BaseException:
            if held is not None:                # finished before the failure (of the loader): keep it
                with suppress(Exception), store.chunk():
                    _put(store, held, worker.label)
            raise
        if held is not None:
            with store.chunk():
                _put(store, held, worker.label)
        if claimed or not drawn_all:
            where = f"chunk {claimed[0][0]}" if claimed else "the last chunk ids"
            raise RobustvitError(f"the scheduler's load() stopped before {where}: it must draw every chunk id and "
                                 "yield one item for each")
    return ran


def stage(stats: Any) -> tuple[Any, list[torch.cuda.Event]]:
    """Start reading ``stats`` without waiting: each CUDA tensor in it is copied to (pinned) host memory with a
    non-blocking copy, and an event is recorded after the copies on each device's current stream. Returns the
    statistics with host tensors in place of the CUDA ones, and the events to wait for before reading them (none
    without CUDA tensors). Waiting for an event waits for the unit's own work, not for what was queued after it."""
    devices: dict[torch.device, None] = {}

    def copy(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.is_cuda:
            devices[obj.device] = None
            return obj.detach().to("cpu", non_blocking=True)
        if isinstance(obj, dict):
            return {k: copy(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [copy(v) for v in obj]
        return obj

    host = copy(stats)
    events = []
    for dev in devices:
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(dev))
        events.append(ev)
    return host, events


#: A unit yielded but not stored yet: (chunk, task, part, host statistics, events to wait for, seconds).
Held = tuple[int, str, str, Any, list[torch.cuda.Event], float]


def _put(store: UnitStore, unit: Held, label: str) -> None:
    c, task, part, stats, events, seconds = unit
    t0 = time.perf_counter()
    for ev in events:                              # waits for the device to finish this unit (only)
        ev.synchronize()
    store.put(task, part, c, to_plain(stats), seconds + time.perf_counter() - t0, label)


def _run_chunk(store: UnitStore, c: int, pend: list[Unit], produced: Iterable[tuple[Unit, Any]], label: str,
               held: Held | None) -> Held | None:
    """Store the units ``produced`` yields for chunk ``c``, each read one unit late (``held``: the previous chunk's
    last unit, stored once this chunk's first is under way, so that the device never waits for a commit), in one
    transaction. Returns this chunk's last unit, not stored yet (the caller stores it)."""
    with store.chunk():
        t = time.perf_counter()
        try:
            for (task, part), stats in produced:
                seconds = time.perf_counter() - t
                host, events = stage(stats)
                if held is not None:
                    _put(store, held, label)
                held = (c, task, part, host, events, seconds)
                t = time.perf_counter()
        except BaseException:
            if held is not None:                       # finished before the failure: keep it (the failure is
                with suppress(Exception):              # the error to report)
                    _put(store, held, label)
            raise
    return held


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


__all__ = ["Progress", "Shard", "Unit", "Worker", "collect", "pass_tag", "pending_chunks", "run_units", "stage",
           "to_plain"]
