"""Every collective of the trainer reduces a tensor on the process group's device (CUDA under NCCL; a CPU tensor
on an NCCL group crashes at the end of epoch 1), and sharded validation gives the one-process numbers exactly.

No process group is needed: ``torch.distributed``'s collectives are replaced by spies, the collective device is
forced to ``meta`` (a device no tensor of the run is on), and a run is told it is rank r of ``world``."""

import ast
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from robustvit.data import create_dataset
from robustvit.models import create_model
from robustvit.training import TrainConfig, trainer
from robustvit.training.tasks import Classify

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}
DATA = "synthshapes:train,count=24,size=16,classes=4"
VAL = "synthshapes:test,count=22,size=16,classes=4"
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all_single", "gather", "scatter")
FAKE = torch.device("meta")


class Reached(Exception):
    """Raised by a spy: the collective was called (a meta tensor holds no numbers to go on with)."""


@pytest.fixture
def spies(monkeypatch):
    """Replace every collective with a spy recording (name, device of its tensor) and stopping the caller; the
    collective device is forced to ``meta``."""
    calls: list[tuple[str, torch.device]] = []

    def spy(name):
        def collective(tensor, *args, **kwargs):
            t = tensor[0] if isinstance(tensor, (list, tuple)) else tensor
            calls.append((name, t.device))
            raise Reached(name)
        return collective

    for name in COLLECTIVES:
        if hasattr(dist, name):
            monkeypatch.setattr(dist, name, spy(name))
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
    monkeypatch.setattr(trainer, "collective_device", lambda: FAKE, raising=False)
    return calls


def _run(tmp_path, world=2, rank=0, **kw):
    cfg = TrainConfig(**{**dict(model="vit_cifar_micro", data=DATA, val_data=VAL, out=str(tmp_path / "run"), epochs=1,
                                batch_size=8, lr=1e-3, model_kwargs=TINY, device="cpu", warmup_epochs=0), **kw})
    run = trainer.setup_run(cfg, resume=False)           # a plain process: world 1, no process group
    run.rank, run.world = rank, world
    return run


def test_check_finite_reduces_on_the_collective_device(tmp_path, spies):
    run = _run(tmp_path)
    with pytest.raises(Reached):
        trainer.check_finite(run, torch.tensor(1.0), 0, 0)
    assert spies == [("all_reduce", FAKE)]


def test_epoch_sums_are_reduced_on_the_collective_device(tmp_path, spies, monkeypatch):
    run = _run(tmp_path)
    monkeypatch.setattr(trainer, "check_finite", lambda *a, **k: None)   # the epoch's own reduction comes first
    with pytest.raises(Reached):
        trainer.train_epoch(run, 0, progress=False)
    assert spies == [("all_reduce", FAKE)]


def _classify(**kw):
    return Classify(TrainConfig(model="m", data="d", out="o", **kw))


@pytest.mark.parametrize("select_best", [None, "robust"])
def test_validation_counts_are_reduced_on_the_collective_device(tiny_vit, spies, select_best):
    val = create_dataset(VAL)
    task = _classify(select_best=select_best, val_attack="fgsm")
    with pytest.raises(Reached):
        trainer.validate_model(task, tiny_vit, val, torch.device("cpu"), batch_size=4, rank=1, world=2)
    assert spies == [("all_reduce", FAKE)]


def test_validation_broadcasts_rank0_buffers_on_the_collective_device(tmp_path, spies):
    run = _run(tmp_path, rank=1)
    with pytest.raises(Reached):
        trainer.validate(run)
    assert spies == [("broadcast", FAKE)]


def test_collectives_in_training_go_through_the_device_helpers():
    """Every ``dist.<collective>(…)`` in training/ sits in one of the helpers the tests above check."""
    helpers = {"all_reduce_sum", "broadcast_buffers"}
    root = Path(trainer.__file__).resolve().parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for call in [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]:
                if call.func.attr in COLLECTIVES and ast.unparse(call.func.value) in ("dist", "torch.distributed"):
                    found.append((path.name, fn.name, call.func.attr))
    assert found and all(fn in helpers for _, fn, _ in found), found


def test_collective_device_follows_the_backend():
    """Without a process group (or on gloo) the CPU; the GPU under NCCL (checked in test_gpu_training)."""
    assert trainer.collective_device() == torch.device("cpu")


# ---- sharded validation: a simulated split ---------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    """An all_reduce that keeps the tensor (each call plays one rank) and records its counts."""
    seen: list[torch.Tensor] = []

    def all_reduce(t, *a, **k):
        seen.append(t.clone())

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(trainer, "collective_device", lambda: torch.device("cpu"), raising=False)
    return seen


def _bn_model():
    torch.manual_seed(0)
    m = create_model("resnet_cifar18", width_mult=0.0625, num_classes=4)
    with torch.no_grad():                       # running statistics that matter in eval mode
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize("kw", [{}, {"select_best": "robust", "val_attack": "pgd", "val_eps": "8/255",
                                     "val_attack_steps": 2, "seed": 3}])
def test_sharded_validation_counts_sum_to_the_one_process_counts(captured, world, kw):
    model, val, task = _bn_model(), create_dataset(VAL), _classify(**kw)
    cpu = torch.device("cpu")
    one = trainer.validate_model(task, model, val, cpu, batch_size=4, limit=21)
    for r in range(world):
        trainer.validate_model(task, model, val, cpu, batch_size=4, limit=21, rank=r, world=world)
    counts = torch.stack(captured).sum(0)
    assert len(captured) == world and int(counts[-1]) == 21
    assert task.val_record(counts) == one                     # exact: the same batches, the same attack seeds
    assert all(0 < v < 1 for k, v in one.items() if k != "val_attack")


def test_shards_cover_the_one_process_batches_once():
    val = create_dataset(VAL)
    one = [(b, y) for b, _, y in trainer.shard_batches(val, 4, limit=21)]
    for world in (2, 3, 8):
        shards = sorted(((b, y) for r in range(world) for b, _, y in trainer.shard_batches(val, 4, 21, r, world)),
                        key=lambda t: t[0])
        assert [b for b, _ in shards] == [b for b, _ in one] == list(range(6))
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(shards, one))


def test_validate_gives_every_rank_the_same_record(tmp_path, captured, monkeypatch):
    """Rank 0 and rank 1 of a 2-process run (buffers already equal): each returns the counts summed over both."""
    monkeypatch.setattr(dist, "broadcast", lambda *a, **k: None)
    run = _run(tmp_path, select_best="robust", val_attack="fgsm")
    one = dict(trainer.validate(_run(tmp_path / "one", world=1, select_best="robust", val_attack="fgsm")))
    records = []
    for rank in (0, 1):
        run.rank = rank
        records.append(trainer.validate(run))
    c0, c1 = captured                  # the fake all_reduce sums nothing: add the ranks' counts as NCCL would
    assert run.task.val_record(c0 + c1) == one
    assert records[0].keys() == records[1].keys() == one.keys()
