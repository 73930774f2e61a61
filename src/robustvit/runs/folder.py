"""The run skeleton ``robustvit eval`` and ``robustvit analyze`` share: one model's run folder.

A :class:`RunFolder` refuses a folder holding another kind of run, opens its unit store (rank 0 first under
``torchrun``; the store checks the settings its units depend on), and writes ``results.json`` from the
run's payload, keeping the results of other suites or analyses an earlier run wrote there
(:func:`~robustvit.runs.results.keep_finished`). Without a folder (``out=None``: analyses from Python) the units
live in memory and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robustvit.runs.distributed import open_shared_store
from robustvit.runs.header import model_record, run_header
from robustvit.runs.results import check_kind, keep_finished, results_document, write_results
from robustvit.runs.store import MemoryStore, UnitStore


class RunFolder:
    """One model's run of ``kind`` (``eval`` | ``analysis``) in ``out`` (None: in memory)."""

    def __init__(self, out: str | Path | None, kind: str, *, rank: int = 0, world: int = 1,
                 check: bool = True) -> None:
        self.out, self.kind = (Path(out) if out is not None else None), kind
        if self.out is not None and check:
            check_kind(self.out, kind)
        self.store: UnitStore = MemoryStore() if self.out is None else open_shared_store(self.out, rank, world)

    def document(self, model: torch.nn.Module, name: str, source: str | None, *, device: torch.device, seed: int,
                 command: str | None, data: dict[str, Any], payload: dict[str, Any], class_map: Any = None,
                 resize: Any = None, **settings: Any) -> dict[str, Any]:
        """The run's results.json document: the run header (started when the store was created; ``settings``:
        the kind's own), the model and data records, the payload, and what the folder's results.json holds of
        other suites or analyses."""
        run = run_header(device=device, seed=seed, command=command, started=self.store.meta("started"), **settings)
        doc = results_document(self.kind, run=run, model=model_record(model, name, source, class_map, resize=resize),
                               data=data, payload=payload)
        return keep_finished(self.out, doc) if self.out is not None else doc

    def write(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Write ``doc`` to results.json (validated, atomically); returns it."""
        if self.out is not None:
            write_results(self.out, doc)
        return doc


__all__ = ["RunFolder"]
