"""``init_distributed``: the process group's timeout and backend; ``collective_device``; two real ranks (gloo)
claiming the chunks of one store."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from robustvit.errors import RobustvitError
from robustvit.runs import collective_device, init_distributed
from robustvit.runs import distributed as D


@pytest.fixture
def fake_group(monkeypatch):
    """``dist.init_process_group`` recorded instead of run; the group then reports rank 1 of 2."""
    calls = []
    state = {"up": False}

    def init(backend, **kw):
        calls.append(("init", backend, kw))
        state["up"] = True

    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(dist, "is_initialized", lambda: state["up"])
    monkeypatch.setattr(dist, "get_rank", lambda *a: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", torch.device(d))))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("ROBUSTVIT_DIST_TIMEOUT", raising=False)
    return calls


def test_cpu_group_is_gloo_with_a_two_hour_timeout_by_default(fake_group):
    assert init_distributed(torch.device("cpu")) == (1, 2, torch.device("cpu"))
    assert fake_group == [("init", "gloo", {"timeout": timedelta(seconds=7200)})]


def test_timeout_from_the_environment_and_from_the_argument(fake_group, monkeypatch):
    monkeypatch.setenv("ROBUSTVIT_DIST_TIMEOUT", "1800")
    init_distributed(torch.device("cpu"))
    assert fake_group[-1][2]["timeout"] == timedelta(seconds=1800)
    assert D.dist_timeout(90.5) == timedelta(seconds=90.5)                  # the argument wins over the variable
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("ROBUSTVIT_DIST_TIMEOUT", bad)
        with pytest.raises(RobustvitError) as e:
            D.dist_timeout()
        assert "\n" not in str(e.value)


def test_cuda_group_is_nccl_with_gloo_for_cpu_tensors_each_rank_on_its_gpu(fake_group):
    rank, world, dev = init_distributed(torch.device("cuda"), timeout_s=600)
    assert (rank, world, dev) == (1, 2, torch.device("cuda", 1))
    assert fake_group[0] == ("set_device", torch.device("cuda", 1))        # the GPU is chosen before the group
    assert fake_group[1] == ("init", "cpu:gloo,cuda:nccl", {"timeout": timedelta(seconds=600)})


def test_a_plain_process_starts_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("no group in a plain process"))
    if not dist.is_initialized():
        assert init_distributed(torch.device("cpu")) == (0, 1, torch.device("cpu"))


def test_collective_device(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert collective_device() == torch.device("cpu")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(dist, "get_backend_config", lambda *a: "cpu:gloo,cuda:nccl")
    assert collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend_config", lambda *a: "nccl")
    assert collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend_config", lambda *a: "gloo")
    assert collective_device() == torch.device("cpu")


RANK_SCRIPT = textwrap.dedent('''
    import json, os, sqlite3, sys, time
    import torch
    from robustvit.runs import UnitStore, Worker, barrier, init_distributed, open_shared_store, run_units

    out = sys.argv[1]
    rank, world, _ = init_distributed(torch.device("cpu"), timeout_s=120)
    store = open_shared_store(out, rank, world)
    ran = []

    def others_done(c):                      # every chunk but c stored (read through a second connection)
        with sqlite3.connect(os.path.join(out, "units.sqlite"), timeout=30) as db:
            got = {k for (k,) in db.execute("SELECT DISTINCT chunk FROM units")}
        return got >= set(range(6)) - {c}

    def rank0_claimed():
        with sqlite3.connect(os.path.join(out, "units.sqlite"), timeout=30) as db:
            return db.execute("SELECT COUNT(*) FROM claims WHERE worker='0/2'").fetchone()[0] > 0

    def wait(cond, what):
        deadline = time.monotonic() + 60
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    def work(data, c, pending):
        ran.append(c)
        if rank == 0 and len(ran) == 1:      # rank 0 is slow: stuck in its first chunk until rank 1 ran the rest
            wait(lambda: others_done(c), "the other rank left chunks undone")
        if rank == 1 and len(ran) == 1:      # (rank 1 lets rank 0 claim a chunk first)
            wait(rank0_claimed, "rank 0 claimed no chunk")
        for u in pending:
            yield u, {"n": torch.tensor(1)}

    def load(chunks):
        for c in chunks:
            yield c

    n = run_units(store, 6, lambda c: [("t", "a"), ("t", "b")], work, load=load, worker=Worker(rank, world))
    barrier()
    print("RAN", json.dumps(ran, separators=(",", ":")), n, flush=True)
''')


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_claim_chunks_a_slow_rank_does_not_hold_the_rest(tmp_path):
    """Two real ranks (gloo, as torchrun starts them) share one store; a claim left by an earlier, killed run is
    cleared by rank 0; rank 0 is stuck in its first chunk until the other rank has run all the others."""
    from robustvit.runs import UnitStore
    from robustvit.runs.scheduler import pass_tag

    tag = pass_tag(6, lambda c: [("t", "a"), ("t", "b")])
    with UnitStore(tmp_path / "o") as s:                   # a killed run's claims on every chunk of this pass
        for c in range(6):
            assert s.claim(tag, c, "1/2")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    src = Path(__file__).resolve().parents[2] / "src"
    port = str(_free_port())
    procs = []
    for r in range(2):
        env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "o")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    ran = {}
    for r, (out, _) in enumerate(outs):
        _, chunks, n = next(ln for ln in out.splitlines() if ln.startswith("RAN")).split(" ", 2)
        ran[r] = (json.loads(chunks), int(n))
    assert len(ran[0][0]) == 1 and ran[0][1] == 1 and len(ran[1][0]) == 5 and ran[1][1] == 5
    assert sorted(ran[0][0] + ran[1][0]) == list(range(6))                  # every chunk exactly once
    with UnitStore(tmp_path / "o") as s:
        assert len(s.done()) == 12
        assert s.claims(tag) == {(tag, c): "0/2" if c in ran[0][0] else "1/2" for c in range(6)}
