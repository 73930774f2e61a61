"""Processes of one run: ``torchrun`` ranks (``init_distributed``) and the shared unit store they open."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from robustvit.runs.store import DB_NAME, UnitStore


def init_distributed(device: torch.device) -> tuple[int, int, torch.device]:
    """Rank, world size and device under ``torchrun`` (NCCL on CUDA, gloo on CPU; each rank on the GPU
    ``LOCAL_RANK``); ``(0, 1, device)`` in a plain process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if not dist.is_initialized():
        return 0, 1, device
    rank = dist.get_rank()
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    return rank, dist.get_world_size(), device


def barrier() -> None:
    """Wait for every rank (nothing to wait for in a plain process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def open_shared_store(directory: str | Path, rank: int, world: int, name: str = DB_NAME) -> UnitStore:
    """Rank 0 creates the SQLite store (and switches it to WAL) before the other ranks open it: two processes
    creating the same database at once can fail with "database is locked"."""
    store = UnitStore(directory, name) if rank == 0 else None
    if world > 1:
        barrier()
    return store if store is not None else UnitStore(directory, name)


__all__ = ["barrier", "init_distributed", "open_shared_store"]
