"""The run engine's parts: atomic writes, the unit store, the scheduler, shards' arithmetic."""

import json
import sqlite3

import pytest

from robustvit.errors import RobustvitError
from robustvit.runs import MemoryStore, Shard, UnitStore, Worker, collect, run_units, write_bytes, write_json
from robustvit.runs.atomic import replacing


def test_atomic_write_replaces_whole_and_leaves_the_old_file_on_failure(tmp_path):
    f = tmp_path / "sub" / "results.json"
    write_json(f, {"a": 1})
    assert json.loads(f.read_text()) == {"a": 1}
    write_bytes(f, b'{"a": 2}')
    assert json.loads(f.read_text()) == {"a": 2}
    with pytest.raises(ZeroDivisionError):
        with replacing(f) as tmp:
            tmp.write_text('{"a": 3')            # half written, then the writer fails
            1 / 0
    assert json.loads(f.read_text()) == {"a": 2}
    assert sorted(p.name for p in f.parent.iterdir()) == ["results.json"]     # no stray temporary file


def _fill(store, task="t", chunks=3):
    for c in range(chunks):
        store.put(task, "p", c, {"n": c + 1, "v": [c, 2 * c]}, 0.5, "0/1")


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_store_keeps_units_in_chunk_order(tmp_path, kind):
    store = UnitStore(tmp_path) if kind == "sqlite" else MemoryStore()
    for c in (2, 0, 1):
        store.put("t", "p", c, {"n": c + 1, "v": [c, 2 * c]}, 0.5)
    store.put("u", "q", 0, {"n": 7}, 1.0)
    assert store.stats("t") == {"p": [{"n": 1, "v": [0, 0]}, {"n": 2, "v": [1, 2]}, {"n": 3, "v": [2, 4]}]}
    assert store.done("u") == {("u", "q", 0)} and len(store.done()) == 4
    assert store.get("t", "p", 1) == {"n": 2, "v": [1, 2]} and store.get("t", "p", 9) is None
    assert store.seconds("t") == pytest.approx(1.5)
    assert collect(store, "t", ["p"], 3) == {"p": {"n": 6, "v": [3, 6]}}
    with pytest.raises(RobustvitError, match="part p has no results"):
        collect(store, "t", ["p"], 4)
    store.close()


def test_fingerprint_refuses_other_settings_in_one_line(tmp_path):
    with UnitStore(tmp_path) as s:
        s.check_fingerprint({"limit": 5, "seed": 0})
        s.check_fingerprint({"limit": 5, "seed": 0})
        s.check_fingerprint({"images": 4}, scope="lesion")          # scopes are independent
        with pytest.raises(RobustvitError, match=r"other settings \(limit\)") as e:
            s.check_fingerprint({"limit": 6, "seed": 0})
        assert "\n" not in str(e.value)
        with pytest.raises(RobustvitError, match="lesion results of a run with other settings"):
            s.check_fingerprint({"images": 5}, scope="lesion")
    assert sqlite3.connect(tmp_path / "units.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_merge_joins_shards_and_refuses_other_settings(tmp_path):
    a, b, c = (UnitStore(tmp_path / n) for n in "abc")
    for s in (a, b):
        s.check_fingerprint({"seed": 0})
    c.check_fingerprint({"seed": 1})
    a.put("t", "p", 0, {"n": 1}, 0.1)
    b.put("t", "p", 1, {"n": 2}, 0.2)
    with UnitStore(tmp_path / "m") as m:
        assert m.merge_from(a) == 1 and m.merge_from(b) == 1
        assert m.stats("t") == {"p": [{"n": 1}, {"n": 2}]}
        assert m.meta("started") == min(a.meta("started"), b.meta("started"))
        with pytest.raises(RobustvitError, match="other settings"):
            m.merge_from(c)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_unreadable_images_are_a_data_record_committed_with_their_chunk(tmp_path, kind):
    store = UnitStore(tmp_path / "a") if kind == "sqlite" else MemoryStore()
    with store.chunk():
        store.put("t", "p", 0, {"n": 2}, 0.1)
        store.put_unreadable({7: "a/x.png", 3: None})
        if kind == "sqlite":        # nothing is visible before the chunk ends
            assert store.unreadable() == {} and store.done() == set()
    store.put_unreadable({7: "a/x.png"})                              # read again by another pass: one record
    assert store.unreadable() == {3: None, 7: "a/x.png"}
    assert store.done() == {("t", "p", 0)}                            # a record, not a unit
    if kind == "sqlite":
        other = UnitStore(tmp_path / "b")
        other.put_unreadable({11: "b/y.png"})
        store.merge_from(other)                                      # a shard's records join the merged store
        assert store.unreadable() == {3: None, 7: "a/x.png", 11: "b/y.png"}
        other.close()
    store.close()


def test_a_store_of_an_older_layout_is_refused_in_one_line(tmp_path):
    db = sqlite3.connect(tmp_path / "units.sqlite")
    db.execute("CREATE TABLE units (suite TEXT, part TEXT, chunk INTEGER, stats TEXT, seconds REAL, finished REAL)")
    db.close()
    with pytest.raises(RobustvitError, match="older robustvit") as e:
        UnitStore(tmp_path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,ok", [("1/1", (1, 1)), ("3/4", (3, 4)), (" 2 / 8 ", (2, 8)), ("0/4", None),
                                     ("5/4", None), ("2", None), ("a/b", None), ("1/0", None)])
def test_shard_spec(text, ok):
    if ok is None:
        with pytest.raises(RobustvitError, match="--shard") as e:
            Shard.parse(text)
        assert "\n" not in str(e.value)
    else:
        s = Shard.parse(text)
        assert (s.index, s.count) == ok and str(s) == f"{ok[0]}/{ok[1]}"


def test_shards_split_the_chunks_disjointly_and_label_their_ranks_apart():
    workers = [Worker.of(r, 2, Shard(k, 3)) for k in (1, 2, 3) for r in (0, 1)]
    shards = [{w.shard for w in workers if w.owns(c)} for c in range(25)]
    assert all(len(s) == 1 for s in shards)                      # every chunk in one shard (both its ranks)
    assert sorted(w.label for w in workers) == [f"{i}/6" for i in range(6)]
    assert Worker.of() == Worker(0, 1) and Worker(0, 1).owns(7) and not Worker(0, 1).shared and Worker(1, 2).shared


def test_run_units_skips_stored_units_stores_as_it_goes_and_needs_no_data(tmp_path):
    store = UnitStore(tmp_path)
    calls = []

    def work(data, c, pending):
        assert data is None                       # no data set: the work reads nothing
        for task, part in pending:
            calls.append((part, c))
            if (part, c) == ("b", 2):
                raise KeyboardInterrupt             # killed in the middle of chunk 2
            yield (task, part), {"n": 1, "c": c}

    units = lambda c: [("t", "a"), ("t", "b")]   # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        run_units(store, 4, units, work)
    assert store.done() == {("t", p, c) for p in "ab" for c in range(2)} | {("t", "a", 2)}
    calls.clear()
    real = work

    def work(data, c, pending):                   # noqa: F811  (the re-run, not killed)
        for task, part in pending:
            calls.append((part, c))
            yield (task, part), {"n": 1, "c": c}

    assert run_units(store, 4, units, work, worker=Worker(0, 1)) == 2
    assert calls == [("b", 2), ("a", 3), ("b", 3)]
    assert collect(store, "t", ["a", "b"], 4) == {"a": {"n": 4, "c": 6}, "b": {"n": 4, "c": 6}}
    assert run_units(store, 4, units, real) == 0                 # nothing left


def test_run_units_loads_only_chunks_with_work_of_its_shard(tmp_path):
    store = MemoryStore()
    store.put("t", "a", 1, {"n": 0}, 0.0)
    loaded = []

    def load(chunks):
        for c in chunks:                          # the ids come lazily: one pass, in order
            loaded.append(c)
            yield {"c": c}

    def work(data, c, pending):
        assert data == {"c": c}
        yield pending[0], {"n": 1}

    assert run_units(store, 6, lambda c: [("t", "a")], work, load=load, worker=Worker.of(0, 1, Shard(2, 2))) == 2
    assert loaded == [3, 5]
