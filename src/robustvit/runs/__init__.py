"""The run engine every long job shares (a base layer: it imports only ``utils``, ``errors`` and torch).

* :mod:`~robustvit.runs.store` — the unit store (SQLite, WAL, a commit per chunk, fingerprints, claims, merge);
* :mod:`~robustvit.runs.scheduler` — units of work over chunks: shards split them statically, ranks claim them;
* :mod:`~robustvit.runs.atomic` — ``write_json`` / ``write_text`` / ``write_bytes`` (temp file, fsync, replace);
* :mod:`~robustvit.runs.header` — the run header and the model record;
* :mod:`~robustvit.runs.results` — results.json, schema 2 (``results.schema.json``);
* :mod:`~robustvit.runs.folder` — ``RunFolder``: the run skeleton ``eval`` and ``analyze`` share;
* :mod:`~robustvit.runs.threads` — ``set_threads`` (``--threads``; the default avoids oversubscription);
* :mod:`~robustvit.runs.distributed` — ``init_distributed`` under ``torchrun`` (timeout, backend);
  ``collective_device``.
"""

from robustvit.runs.atomic import replacing, write_bytes, write_json, write_text
from robustvit.runs.distributed import barrier, collective_device, init_distributed, open_shared_store
from robustvit.runs.folder import RunFolder
from robustvit.runs.header import count_flops, model_record, run_header, weights_id
from robustvit.runs.results import (RESULTS_FILE, SCHEMA_VERSION, check_kind, data_record, read_results,
                                    results_document, validate_results, write_results, write_train_results)
from robustvit.runs.scheduler import Shard, Worker, collect, run_units
from robustvit.runs.threads import default_threads, set_threads
from robustvit.runs.store import DB_NAME, MemoryStore, UnitStore, now, to_plain

__all__ = ["DB_NAME", "MemoryStore", "RESULTS_FILE", "SCHEMA_VERSION", "RunFolder", "Shard", "UnitStore", "Worker",
           "barrier", "check_kind", "collect", "count_flops", "collective_device", "data_record", "default_threads",
           "init_distributed", "model_record", "now", "open_shared_store", "read_results", "replacing",
           "results_document", "run_header", "run_units", "set_threads", "to_plain", "validate_results", "weights_id",
           "write_bytes", "write_json", "write_results", "write_text", "write_train_results"]
