"""results.json, schema 2: one file per run folder, whatever the kind of run.

Every run folder holds ``results.json`` with ``schema`` (2), ``kind`` (``eval`` | ``analysis`` | ``train``),
``run`` (:func:`robustvit.runs.header.run_header`), ``model`` (:func:`robustvit.runs.header.model_record`),
``data`` (spec, num_images, num_unreadable, num_classes, subset), ``comparable`` (every suite's and analysis's
``protocol`` entry comparable and no note) and ``notes`` (why the numbers are not comparable with published ones),
both set by :func:`robustvit.protocols.attach`, and the kind's payload: ``suites`` (eval: one result per suite key),
``analyses`` (analysis: one result per analysis, without figure data, and ``figures``: the PNG files), ``train``
(``config``, ``epochs``: the per-epoch metrics as ``metrics.jsonl`` has them, ``checkpoints``). The JSON Schema
ships in the package (``results.schema.json``, :func:`schema`); :func:`validate_results` checks a document
against it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError
from robustvit.protocols import attach as attach_protocols
from robustvit.runs.atomic import write_json

SCHEMA_VERSION = 2
RESULTS_FILE = "results.json"
KINDS = ("eval", "analysis", "train")
PAYLOAD = {"eval": "suites", "analysis": "analyses", "train": "train"}


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The JSON Schema of results.json (``robustvit/runs/results.schema.json``)."""
    return json.loads(resources.files("robustvit.runs").joinpath("results.schema.json").read_text())


def results_document(kind: str, *, run: dict[str, Any], model: dict[str, Any], data: dict[str, Any],
                     payload: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """A results.json document of ``kind``; ``payload`` is its ``suites`` / ``analyses`` / ``train``."""
    if kind not in KINDS:
        raise RobustvitError(f"unknown kind of run {kind!r}; use {', '.join(KINDS)}")
    doc = {"schema": SCHEMA_VERSION, "kind": kind, "run": run, "model": model, "data": data_record(**data),
           "notes": list(notes or []), PAYLOAD[kind]: payload}
    return attach_protocols(doc, force=True, analyses=False)   # each suite's protocol; the run's notes, comparable


def data_record(spec: str = "", num_images: int = 0, num_unreadable: int = 0, num_classes: int | None = None,
                subset: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``data`` record (extra keys, e.g. ``unreadable_files``, are kept)."""
    return {"spec": spec, "num_images": int(num_images), "num_unreadable": int(num_unreadable),
            "num_classes": None if num_classes is None else int(num_classes), "subset": subset, **extra}


def validate_results(doc: dict[str, Any]) -> None:
    """Check ``doc`` against the results schema (with ``jsonschema`` when installed, else its required keys);
    a one-line :class:`RobustvitError` names the first problem."""
    try:
        import jsonschema
    except ImportError:
        _validate_keys(doc)
        return
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(doc))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "the top level"
        raise RobustvitError(f"results.json does not match schema {SCHEMA_VERSION} at {where}: "
                             f"{err.message.splitlines()[0][:200]}")


def _validate_keys(doc: dict[str, Any]) -> None:
    s = schema()
    missing = [k for k in s["required"] if k not in doc]
    if not missing and doc.get("kind") in PAYLOAD and PAYLOAD[doc["kind"]] not in doc:
        missing = [PAYLOAD[doc["kind"]]]
    if missing or doc.get("schema") != SCHEMA_VERSION:
        raise RobustvitError(f"results.json does not match schema {SCHEMA_VERSION}: "
                             + (f"missing {', '.join(missing)}" if missing else f"schema is {doc.get('schema')!r}"))


def write_results(out_dir: str | Path, doc: dict[str, Any]) -> Path:
    """Validate ``doc`` and write it to ``out_dir/results.json`` atomically (eval and analysis runs first add what
    the folder holds already: :func:`keep_finished`)."""
    validate_results(doc)
    return write_json(Path(out_dir) / RESULTS_FILE, doc)


def keep_finished(out_dir: str | Path, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the payload entries (suites / analyses) of ``out_dir/results.json`` that ``doc`` does not
    hold, when that file is of the same kind (eval or analysis), model and data; their notes are kept too. An
    analysis payload's ``figures`` list is the union of both. ``doc`` unchanged otherwise. A re-run with other
    suites (or analyses) thus adds to the folder's results; a suite run again replaces its own entry."""
    path = Path(out_dir) / RESULTS_FILE
    kind = doc.get("kind")
    if kind not in ("eval", "analysis") or not path.is_file():
        return doc
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return doc
    same = (old.get("kind") == kind and old.get("model", {}).get("name") == doc["model"]["name"]
            and old.get("data", {}).get("spec") == doc["data"]["spec"])
    if not same:
        return doc
    key = PAYLOAD[kind]
    new = doc[key]
    kept = {k: v for k, v in old.get(key, {}).items() if k != "figures" and k not in new}
    if not kept:
        return doc
    payload = {**kept, **new}
    if kind == "analysis":
        figures = [f for r in kept.values() for f in r.get("figures") or []] + list(new.get("figures", []))
        payload = {**{k: v for k, v in payload.items() if k != "figures"}, "figures": figures}
    notes = list(dict.fromkeys(old.get("notes", []) + doc["notes"]))
    return attach_protocols({**doc, key: payload, "notes": notes}, analyses=False)


def read_results(path: str | Path) -> dict[str, Any]:
    """A results.json (or the folder holding one); one line when it is missing or not JSON."""
    p = Path(path)
    f = p / RESULTS_FILE if p.is_dir() else p
    if not f.is_file():
        raise RobustvitError(f"{p} holds no {RESULTS_FILE}")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise RobustvitError(f"{f} is not valid JSON ({e})") from None


def check_kind(out_dir: str | Path, kind: str) -> None:
    """Refuse (one line) to write a run of ``kind`` into a folder whose results.json holds another kind."""
    f = Path(out_dir) / RESULTS_FILE
    if not f.is_file():
        return
    try:
        old = json.loads(f.read_text()).get("kind", "eval")
    except (json.JSONDecodeError, AttributeError):
        return
    if old != kind:
        article = "an" if str(old)[:1] in "aeiou" else "a"
        raise RobustvitError(f"{out_dir} holds the results of {article} {old} run; write this {kind} run to another "
                             f"folder (e.g. {Path(out_dir) / kind})")


def write_train_results(out_dir: str | Path, config: dict[str, Any], epochs: list[dict[str, Any]],
                        checkpoints: list[str | dict[str, Any]], model_record: dict[str, Any],
                        data_record: dict[str, Any], *, run: dict[str, Any] | None = None,
                        notes: list[str] | None = None, loss: dict[str, Any] | None = None) -> Path:
    """Write ``out_dir/results.json`` of kind ``train``: the run's ``config`` (a TrainConfig as a dict), one
    metrics dict per epoch (as ``metrics.jsonl`` holds them), the checkpoints kept (folder names relative to
    ``out_dir``, or dicts), the model and data records (:func:`robustvit.runs.header.model_record`,
    :func:`data_record` keys), and ``loss``: the loss's name and the choices it made itself
    (``TrainingLoss.resolved``). ``run`` defaults to a header of this process (device and seed from ``config``)."""
    from robustvit.runs.header import run_header
    from robustvit.utils import resolve_device

    if run is None:
        run = run_header(device=resolve_device(config.get("device") or "auto"),
                         seed=int(config.get("seed") or 0), batch_size=config.get("batch_size"))
    payload = {"config": config, "epochs": list(epochs), "checkpoints": list(checkpoints)}
    if loss is not None:
        payload["loss"] = loss
    doc = results_document("train", run=run, model=model_record, data=data_record, payload=payload, notes=notes)
    return write_results(out_dir, doc)


__all__ = ["KINDS", "RESULTS_FILE", "SCHEMA_VERSION", "check_kind", "data_record", "keep_finished", "read_results", "results_document",
           "schema", "validate_results", "write_results", "write_train_results"]
