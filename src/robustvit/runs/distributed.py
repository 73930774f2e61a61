"""Processes of one run: ``torchrun`` ranks (``init_distributed``) and the shared unit store they open.

Ranks wait for each other at barriers: while rank 0 writes results.json or a training checkpoint, and while the
others finish their last chunk. The process group's timeout (``timeout_s``, the environment variable
``ROBUSTVIT_DIST_TIMEOUT`` in seconds, else :data:`DEFAULT_TIMEOUT_S`) bounds those waits; NCCL's own default
(10 minutes) is shorter than a checkpoint save of a large model on a slow file system.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from robustvit.errors import RobustvitError
from robustvit.runs.store import DB_NAME, UnitStore

#: The process group's timeout when neither ``timeout_s`` nor ``ROBUSTVIT_DIST_TIMEOUT`` sets one (2 hours).
DEFAULT_TIMEOUT_S = 7200.0
TIMEOUT_ENV = "ROBUSTVIT_DIST_TIMEOUT"
#: The backend on CUDA: NCCL for CUDA tensors, gloo for CPU tensors (barriers and small host-side collectives).
CUDA_BACKEND = "cpu:gloo,cuda:nccl"


def dist_timeout(timeout_s: float | None = None) -> timedelta:
    """The process group's timeout: ``timeout_s``, else ``$ROBUSTVIT_DIST_TIMEOUT`` (seconds), else 2 hours."""
    if timeout_s is None:
        text = os.environ.get(TIMEOUT_ENV, "").strip()
        try:
            timeout_s = float(text) if text else DEFAULT_TIMEOUT_S
        except ValueError:
            raise RobustvitError(f"{TIMEOUT_ENV}={text!r}: give the timeout in seconds (e.g. 7200)") from None
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise RobustvitError(f"the process group's timeout must be a positive number of seconds, got {timeout_s}")
    return timedelta(seconds=timeout_s)


def init_distributed(device: torch.device, timeout_s: float | None = None) -> tuple[int, int, torch.device]:
    """Rank, world size and device under ``torchrun``; ``(0, 1, device)`` in a plain process.

    On CUDA each rank takes the GPU ``LOCAL_RANK`` (set before the group starts) and the backend is
    ``cpu:gloo,cuda:nccl`` (CUDA tensors over NCCL, CPU tensors and barriers over gloo); on CPU it is gloo.
    ``timeout_s``: how long a collective or barrier may wait (:func:`dist_timeout`)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        timeout = dist_timeout(timeout_s)
        if device.type == "cuda":
            torch.cuda.set_device(torch.device("cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0)))))
        dist.init_process_group(CUDA_BACKEND if device.type == "cuda" else "gloo", timeout=timeout)
    if not dist.is_initialized():
        return 0, 1, device
    rank = dist.get_rank()
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    return rank, dist.get_world_size(), device


def collective_device() -> torch.device:
    """The device of the tensors the process group's collectives take: the current CUDA device when the group
    runs NCCL, else the CPU (gloo, or a plain process)."""
    if dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend_config()).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    """Wait for every rank (nothing to wait for in a plain process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def open_shared_store(directory: str | Path, rank: int, world: int, name: str = DB_NAME) -> UnitStore:
    """Rank 0 creates the SQLite store (and switches it to WAL) and clears the chunk claims of any earlier run
    before the other ranks open it: two processes creating the same database at once can fail with "database is
    locked", and a killed run's claims would keep its unfinished chunks from being run."""
    store = UnitStore(directory, name) if rank == 0 else None
    if store is not None:
        store.clear_claims()
    if world > 1:
        barrier()
    return store if store is not None else UnitStore(directory, name)


__all__ = ["CUDA_BACKEND", "DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "barrier", "collective_device", "dist_timeout",
           "init_distributed", "open_shared_store"]
