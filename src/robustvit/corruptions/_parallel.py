"""CPU helpers of the corruptions' fast paths: a kept pool of helper threads for work that releases the GIL
(the JPEG codec) and output buffers backed by transparent huge pages. Neither appears in a public signature;
both earned their place in the corruption benchmark (``benchmarks/``, median of a plain Python process)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


def empty_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor for a large result written once (a corrupted batch). On the CPU it comes from
    NumPy, which asks for transparent huge pages on allocations of ≥ 4 MiB; torch's allocator does not (unless
    ``THP_MEM_ALLOC_ENABLE=1``), and the 4 KiB page faults of a 64-image 224-px batch cost a cheap corruption."""
    if device.type == "cpu" and dtype in _NUMPY_FLOATS:
        return torch.from_numpy(np.empty(shape, dtype=_NUMPY_FLOATS[dtype]))
    return torch.empty(shape, dtype=dtype, device=device)


_helpers: dict[int, ThreadPoolExecutor] = {}     # by size: helper threads are created once and kept
_helpers_lock = threading.Lock()


def _helper_pool(n: int) -> ThreadPoolExecutor:
    """``n`` helper threads, started on first use (starting threads on every call costs milliseconds)."""
    with _helpers_lock:
        if n not in _helpers:
            _helpers[n] = ThreadPoolExecutor(n, thread_name_prefix="robustvit")
        return _helpers[n]


def _forget_helpers() -> None:
    """In a forked child (e.g. a DataLoader worker) the parent's threads do not exist: start afresh."""
    global _helpers_lock
    _helpers.clear()
    _helpers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_helpers)


def run_shared(jobs: Sequence[tuple], fn: Callable[..., None], threads: int | None = None) -> None:
    """Call ``fn(*job)`` for every job on the calling thread and ``threads - 1`` helper threads (default
    ``torch.get_num_threads()``) taking jobs from one queue; for work that releases the GIL. The calling thread
    takes jobs too (measured faster right after a parallel torch op, while OpenMP's idle threads still spin).

    ``fn`` must not run parallel torch ops (NumPy and the codecs are fine): in a kept helper thread such an op
    starts a second OpenMP team that lives on, and once OpenMP manages more threads than cores it stops letting
    idle threads spin, so every later parallel op pays a wake-up (pixelate, brightness, contrast up to 2×
    slower). Short-lived threads (a ``with ThreadPoolExecutor``, as :func:`~.sampling.poisson`) take theirs along."""
    threads = min(threads or torch.get_num_threads(), len(jobs))
    queue = iter(jobs)
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                job = next(queue, None)
            if job is None:
                return
            fn(*job)

    helpers = [_helper_pool(threads - 1).submit(drain) for _ in range(threads - 1)] if threads > 1 else []
    try:
        drain()
    finally:
        for h in helpers:       # once the queue is empty, a helper that has not started has nothing to do
            if not h.cancel():  # (and cancelling it keeps a call made from a helper thread from deadlocking)
                h.result()


__all__ = ["empty_output", "run_shared"]
