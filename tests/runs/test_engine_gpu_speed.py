"""The run engine at GPU speed: a commit per chunk (WAL, synchronous=NORMAL), statistics read one unit late (no
synchronisation per unit), chunks claimed by whichever process is free."""

import sqlite3
import threading

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.runs import MemoryStore, Shard, UnitStore, Worker, collect, open_shared_store, run_units, to_plain
from robustvit.runs import scheduler as sched


# ---------------------------------------------------------------------------------------------------- the store
def _rows(path):
    with sqlite3.connect(path, timeout=5) as db:
        return sorted(db.execute("SELECT task, part, chunk, stats FROM units").fetchall())


def test_store_is_wal_with_synchronous_normal(tmp_path):
    with UnitStore(tmp_path) as s:
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.execute("PRAGMA synchronous").fetchone()[0] == 1            # NORMAL (FULL is 2)


def test_a_chunk_is_committed_together_and_put_alone_commits_at_once(tmp_path):
    db = tmp_path / "units.sqlite"
    with UnitStore(tmp_path) as s:
        s.put("t", "p", 0, {"n": 1}, 0.1)                    # no chunk open: committed at once
        assert _rows(db) == [("t", "p", 0, '{"n": 1}')]
        with s.chunk():
            s.put("t", "p", 1, {"n": 2}, 0.1)
            s.put("t", "q", 1, {"n": 3}, 0.1)
            assert len(_rows(db)) == 1                     # another reader sees none of the chunk yet
            with s.chunk():                                # nested: joins the outer one
                s.put("t", "r", 1, {"n": 4}, 0.1)
            assert len(_rows(db)) == 1
        assert len(_rows(db)) == 4                         # all of it at the chunk's end
        with pytest.raises(KeyboardInterrupt):
            with s.chunk():
                s.put("t", "p", 2, {"n": 5}, 0.1)
                raise KeyboardInterrupt
        assert ("t", "p", 2, '{"n": 5}') in _rows(db)     # finished units survive an error in the chunk
        s.put("t", "p", 3, {"n": torch.tensor(6), "v": torch.tensor([1.5, 2.0])}, 0.1)
        assert s.get("t", "p", 3) == {"n": 6, "v": [1.5, 2.0]}
        with pytest.raises(TypeError, match="JSON data or tensors"):
            s.put("t", "p", 4, {"n": object()}, 0.1)


def test_to_plain_converts_tensors_in_nested_data():
    stats = {"n": torch.tensor(3), "v": [torch.tensor([1, 2]), (torch.tensor(0.5), "x")], "k": None, "b": True}
    assert to_plain(stats) == {"n": 3, "v": [[1, 2], [0.5, "x"]], "k": None, "b": True}
    assert type(to_plain(torch.tensor(3))) is int


# ------------------------------------------------------------------------------------ statistics read one late
class Lazy:
    """A tensor-like value whose read (``tolist``) is logged, as a CUDA tensor's read would wait for the device."""

    def __init__(self, name, value, log, clock=None):
        self.name, self.value, self.log, self.clock = name, value, log, clock

    def tolist(self):
        self.log.append(("read", self.name))
        if self.clock is not None:
            self.clock.t += 10.0                             # the wait for the device
        return self.value


def test_stats_are_read_one_unit_late_and_stored_as_plain_numbers(tmp_path):
    log = []
    store = UnitStore(tmp_path)

    def work(data, c, pending):
        for task, part in pending:
            log.append(("yield", f"{part}{c}"))
            yield (task, part), {"n": Lazy(f"{part}{c}", c + 1, log), "t": torch.tensor([c, 2 * c])}

    assert run_units(store, 2, lambda c: [("t", "a"), ("t", "b"), ("t", "c")], work) == 2
    assert log == [("yield", "a0"), ("yield", "b0"), ("read", "a0"), ("yield", "c0"), ("read", "b0"),
                   ("yield", "a1"), ("read", "c0"),       # a chunk's last unit: read once the next one's first runs
                   ("yield", "b1"), ("read", "a1"), ("yield", "c1"), ("read", "b1"),
                   ("read", "c1")]                        # the run's end reads its last unit
    assert store.get("t", "b", 1) == {"n": 2, "t": [1, 2]}
    assert collect(store, "t", ["a"], 2) == {"a": {"n": 3, "t": [1, 2]}}


def test_a_units_seconds_are_its_production_plus_the_wait_when_read(tmp_path, monkeypatch):
    class Clock:
        t = 0.0

    clock = Clock()
    monkeypatch.setattr(sched.time, "perf_counter", lambda: clock.t)
    store = MemoryStore()

    def work(data, c, pending):
        for i, (task, part) in enumerate(pending):
            clock.t += 1.0 + i                               # the host's time producing unit i
            yield (task, part), {"n": Lazy(part, 1, [], clock)}

    run_units(store, 1, lambda c: [("t", "a"), ("t", "b"), ("t", "c")], work)
    assert dict(store.db.execute("SELECT part, seconds FROM units WHERE chunk=0")) == {"a": 11.0, "b": 12.0, "c": 13.0}


def test_no_synchronisation_per_unit_on_cuda(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append(a))

    def work(data, c, pending):
        for u in pending:
            yield u, {"n": 1}

    run_units(MemoryStore(), 3, lambda c: [("t", "a"), ("t", "b")], work, device=torch.device("cuda", 0))
    assert calls == []


def test_an_error_keeps_the_units_finished_before_it(tmp_path):
    store = UnitStore(tmp_path)

    def work(data, c, pending):
        yield pending[0], {"n": torch.tensor(1)}
        yield pending[1], {"n": torch.tensor(2)}
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        run_units(store, 1, lambda c: [("t", "a"), ("t", "b"), ("t", "c")], work)
    assert _rows(tmp_path / "units.sqlite") == [("t", "a", 0, '{"n": 1}'), ("t", "b", 0, '{"n": 2}')]


# ------------------------------------------------------------------------------------------------ the claims
def test_chunks_are_claimed_as_load_draws_them(tmp_path):
    store = UnitStore(tmp_path)
    w = Worker(0, 2)
    seen = []

    def load(chunks):
        for c in chunks:                                    # lazily: one id, then its data
            yield {"c": c}

    def work(data, c, pending):
        seen.append(sorted(ch for (_, ch) in store.claims()))
        yield pending[0], {"n": data["c"]}

    assert run_units(store, 4, lambda c: [("t", "a")], work, load=load, worker=w) == 4
    assert seen == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert set(store.claims().values()) == {w.label}


def test_chunks_claimed_by_another_process_are_neither_loaded_nor_run(tmp_path):
    a, b = UnitStore(tmp_path), UnitStore(tmp_path)           # two handles on one file: two ranks
    tag = "pass"
    assert b.claim(tag, 1, "1/2") and b.claim(tag, 2, "1/2") and not a.claim(tag, 1, "0/2")
    loaded, ticks = [], []

    def load(chunks):
        for c in chunks:
            loaded.append(c)
            yield c

    def work(data, c, pending):
        assert data == c
        yield pending[0], {"n": 1}

    def progress(n):
        from contextlib import nullcontext

        ticks.append(n)
        return nullcontext(lambda: ticks.append("tick"))

    assert run_units(a, 4, lambda c: [("t", "a")], work, load=load, worker=Worker(0, 2), tag=tag,
                     progress=progress) == 2
    assert loaded == [0, 3] and a.done() == {("t", "a", 0), ("t", "a", 3)}
    assert ticks == [4, "tick", "tick", "tick", "tick"]     # the bar counts the other process's chunks too


def test_a_slow_rank_does_not_keep_the_other_from_the_remaining_chunks(tmp_path):
    """Two ranks (threads, each with its own store handle on one file): rank 0 is stuck in its first chunk until
    rank 1 has finished; rank 1 takes every other chunk, and every chunk runs exactly once."""
    UnitStore(tmp_path).close()
    started, release = threading.Event(), threading.Event()
    ran = {0: [], 1: []}
    counts, errors = {}, []
    units = lambda c: [("t", "a"), ("t", "b")]             # noqa: E731

    def rank(r):
        try:
            store = UnitStore(tmp_path)

            def work(data, c, pending):
                ran[r].append(c)
                if r == 0:
                    started.set()
                    assert release.wait(60), "rank 1 never finished"
                for u in pending:
                    yield u, {"n": torch.tensor(1)}

            counts[r] = run_units(store, 8, units, work, load=lambda ids: (c for c in ids), worker=Worker(r, 2))
            store.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            release.set()

    t0 = threading.Thread(target=rank, args=(0,))
    t0.start()
    assert started.wait(60)
    t1 = threading.Thread(target=rank, args=(1,))
    t1.start()
    t1.join(120)
    release.set()
    t0.join(120)
    assert not errors, errors
    assert ran == {0: [0], 1: [1, 2, 3, 4, 5, 6, 7]} and counts == {0: 1, 1: 7}
    with UnitStore(tmp_path) as s:
        assert collect(s, "t", ["a", "b"], 8) == {"a": {"n": 8}, "b": {"n": 8}}


def test_shards_split_statically_and_their_ranks_share_the_shard():
    shards = [[Worker.of(r, 2, Shard(k, 3)) for r in (0, 1)] for k in (1, 2, 3)]
    for k, ranks in enumerate(shards):
        assert all(w.owns(c) == (c % 3 == k) for w in ranks for c in range(25))     # both ranks: the whole shard
    assert sorted(w.label for ranks in shards for w in ranks) == [f"{i}/6" for i in range(6)]


def test_open_shared_store_clears_the_claims_of_an_earlier_run(tmp_path):
    with UnitStore(tmp_path) as s:
        assert s.claim("x", 0, "1/2")                         # a killed run held chunk 0 of pass x
    with open_shared_store(tmp_path, 0, 1) as s:
        assert s.claims() == {} and s.claim("x", 0, "0/2")


@pytest.mark.parametrize("mode", ["short", "long", "partial"])
def test_a_load_that_breaks_the_contract_is_refused(mode):
    def load(chunks):
        ids = list(chunks) if mode != "partial" else [next(iter(chunks))]
        for c in ids[:-1] if mode == "short" else ids + [99] if mode == "long" else ids:
            yield c

    def work(data, c, pending):
        yield pending[0], {"n": 1}

    with pytest.raises(RobustvitError, match="load"):
        run_units(MemoryStore(), 3, lambda c: [("t", "a")], work, load=load)


# ------------------------------------------------------------------------------------------------ on the GPU
@pytest.mark.gpu
def test_cuda_stats_are_stored_and_the_next_unit_starts_before_the_last_one_finished():
    dev = torch.device("cuda")
    store = MemoryStore()
    pending_at_yield = []
    events = []

    def work(data, c, pending):
        for task, part in pending:
            if events:
                pending_at_yield.append(not events[-1].query())   # the previous unit still running on the device
            torch.cuda._sleep(200_000_000)                        # ~0.1 s of device time
            n = torch.ones(8, device=dev).sum()
            e = torch.cuda.Event()
            e.record()
            events.append(e)
            yield (task, part), {"n": n, "v": torch.arange(2, device=dev)}

    run_units(store, 1, lambda c: [("t", "a"), ("t", "b"), ("t", "c")], work, device=dev)
    assert pending_at_yield == [True, True]
    assert store.get("t", "c", 0) == {"n": 8.0, "v": [0, 1]}


@pytest.mark.parametrize("fail_at", [0, 1])
def test_a_failing_chunk_keeps_every_unit_finished_before_it(tmp_path, fail_at):
    """The previous chunk's last unit waits for the next chunk's first: when that one raises (first unit or
    later), the held unit is stored all the same, once."""
    store = UnitStore(tmp_path)

    def work(data, c, pending):
        for i, (task, part) in enumerate(pending):
            if c == 1 and i == fail_at:
                raise RuntimeError("boom")
            yield (task, part), {"n": c + 1}

    with pytest.raises(RuntimeError, match="boom"):
        run_units(store, 3, lambda c: [("t", "a"), ("t", "b")], work)
    assert store.done() == {("t", "a", 0), ("t", "b", 0)} | ({("t", "a", 1)} if fail_at == 1 else set())


def test_a_failing_loader_keeps_the_last_chunks_units(tmp_path):
    """The loader fails after the first chunk: that chunk's last unit, held for the next one, is stored."""
    store = UnitStore(tmp_path)

    def load(ids):
        for c in ids:
            if c == 1:
                raise OSError("disk gone")
            yield c

    def work(data, c, pending):
        for task, part in pending:
            yield (task, part), {"n": 1}

    with pytest.raises(OSError, match="disk gone"):
        run_units(store, 3, lambda c: [("t", "a"), ("t", "b")], work, load=load)
    assert store.done() == {("t", "a", 0), ("t", "b", 0)}
