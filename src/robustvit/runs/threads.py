"""CPU threads of a run (``--threads N``): PyTorch's intra-op and inter-op thread pools.

PyTorch's default (one thread per physical core of the machine) oversubscribes a shared or busy machine: on a
2-core machine with another job running, a forward of 8 images took 0.58 s with 2 threads and 0.013 s with one
(issue #33). The default here is torch's, capped by the cores this process may run on (its CPU affinity, e.g. a
Slurm or container allocation) and divided among the processes of a ``torchrun`` node (``LOCAL_WORLD_SIZE``),
at least one. On a machine shared with other jobs, ``--threads 1`` is often fastest.

>>> default_threads() >= 1          # what set_threads(None), the default of --threads, sets
True
"""

from __future__ import annotations

import os

import torch

from robustvit.errors import RobustvitError


#: torch's own default (one thread per physical core, or OMP_NUM_THREADS), read when robustvit is imported.
TORCH_DEFAULT = torch.get_num_threads()


def default_threads() -> int:
    """torch's default (physical cores or ``OMP_NUM_THREADS``), at most the cores this process may run on (CPU
    affinity: a container's or Slurm's allocation), divided among the node's torchrun processes; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):       # not Linux
        cores = os.cpu_count() or 1
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min(cores, TORCH_DEFAULT) // max(1, local))


def set_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads`` (None: :func:`default_threads`) and its inter-op threads to
    the same number where torch still allows it (before its first parallel work); returns the number set."""
    if threads is not None and threads < 1:
        raise RobustvitError(f"--threads must be >= 1, got {threads}")
    n = default_threads() if threads is None else int(threads)
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:                    # inter-op pool already started: it keeps its size
        pass
    return n


def thread_record() -> dict[str, int]:
    """What results.json's ``run`` records of the threads: ``threads`` and ``interop_threads``."""
    return {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}


__all__ = ["default_threads", "set_threads", "thread_record"]
