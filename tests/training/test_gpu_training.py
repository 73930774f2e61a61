"""Training under ``torchrun`` on CUDA (skipped without a GPU): NCCL collectives on CUDA tensors (a CPU tensor on an
NCCL group crashed the end of epoch 1), sharded validation equal to one process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from robustvit.data import dataset_for_model
from robustvit.models import create_model
from robustvit.training import TrainConfig, trainer
from robustvit.training.tasks import Classify

pytestmark = pytest.mark.gpu

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}
DATA = "synthshapes:train,count=64,size=16,classes=4"
VAL = "synthshapes:test,count=40,size=16,classes=4"


def _torchrun(nproc: int, args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-3000:]
    return proc


def _train_cli(out, nproc: int) -> None:
    _torchrun(nproc, ["-m", "robustvit.cli", "train", "--model", "vit_cifar_micro", "--data", DATA, "--val-data", VAL,
                      "--out", str(out), "--epochs", "2", "--batch-size", "16", "--lr", "1e-3",
                      "--warmup-epochs", "0.5", "--device", "cuda", "--model-kwargs", json.dumps(TINY),
                      "--select-best", "clean"])


def _check_run(out) -> list[dict]:
    lines = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert [ln["epoch"] for ln in lines] == [1, 2]
    for ln in lines:
        assert 0 < ln["train_loss"] < 10 and 0 <= ln["val_acc"] <= 1 and isinstance(ln["best"], bool)
    assert (out / "last" / trainer.STATE_FILE).is_file() and (out / "best").is_dir()
    model = create_model(str(out / "checkpoint"))
    assert model.spec.architecture == "vit_cifar_micro" and model.spec.num_classes == 4
    from robustvit.runs import read_results

    results = read_results(out)
    assert results["kind"] == "train" and [e["epoch"] for e in results["train"]["epochs"]] == [1, 2]
    # the last epoch's validation, recomputed in this process on the same GPU from the weights last/ holds
    last = create_model(str(out / "last")).cuda()
    val = dataset_for_model(VAL, last.spec)
    task = Classify(TrainConfig(model="vit_cifar_micro", data=DATA, out=str(out)))
    record = trainer.validate_model(task, last, val, torch.device("cuda"))
    assert record["val_acc"] == pytest.approx(lines[-1]["val_acc"], abs=1 / len(val))
    return lines


def test_torchrun_one_gpu_trains_two_epochs(tmp_path):
    _train_cli(tmp_path / "run", 1)
    _check_run(tmp_path / "run")
    # and evaluates the trained model under torchrun (NCCL) in bf16, the attack re-checked in fp32
    suites = "clean,pgd:checks=0:steps=3"
    _torchrun(1, ["-m", "robustvit.cli", "eval", "--model", str(tmp_path / "run" / "checkpoint"), "--data", VAL,
                  "--suite", suites, "--precision", "bf16", "--device", "cuda", "--out", str(tmp_path / "eval"),
                  "--no-progress"])
    from robustvit.runs import read_results

    res = read_results(tmp_path / "eval")
    assert res["run"]["precision"] == "bf16" and res["run"]["device"].startswith("cuda")
    assert {s["precision"] for s in res["suites"].values()} == {"bf16"}
    assert res["suites"]["pgd:checks=0:steps=3"]["accuracy"] <= res["suites"]["clean"]["top1"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_torchrun_two_gpus_validate_sharded(tmp_path):
    _train_cli(tmp_path / "two", 2)
    _check_run(tmp_path / "two")


NCCL_WORKER = textwrap.dedent("""
    import json, os, sys, time
    import torch
    import torch.distributed as dist
    from robustvit.training import TrainConfig, trainer

    out = sys.argv[1]
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")          # NCCL only: a CPU tensor in any collective fails
    cfg = TrainConfig(model="resnet_cifar18", data=sys.argv[2], val_data=sys.argv[3], out=out, epochs=1,
                      batch_size=16, lr=1e-3, model_kwargs={"width_mult": 0.0625}, device="cuda", warmup_epochs=0,
                      select_best="robust", val_attack="fgsm")
    run = trainer.setup_run(cfg, resume=False)
    run.out.mkdir(parents=True, exist_ok=True)
    run.world = 2                            # every collective runs (one rank: sums are the rank's own numbers)
    sums = trainer.train_epoch(run, 0, progress=False)
    record = trainer.finish_epoch(run, 0, sums, time.time(), progress=False)
    reduced = trainer.all_reduce_sum(torch.arange(3, dtype=torch.float64))
    with open(f"{out}/worker.json", "w") as f:
        json.dump({"record": record, "device": str(trainer.collective_device()), "reduced": reduced.tolist(),
                   "reduced_device": str(reduced.device)}, f)
    dist.destroy_process_group()
""")


def test_every_collective_runs_on_an_nccl_group(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(NCCL_WORKER)
    out = tmp_path / "run"
    _torchrun(1, [str(script), str(out), DATA, VAL])
    res = json.loads((out / "worker.json").read_text())
    assert res["device"] == "cuda:0" and res["reduced_device"] == "cuda:0" and res["reduced"] == [0.0, 1.0, 2.0]
    assert 0 <= res["record"]["val_robust_acc"] <= res["record"]["val_acc"] <= 1
    assert (out / "metrics.jsonl").is_file() and (out / "last" / trainer.STATE_FILE).is_file()


def test_sharded_validation_on_the_gpu_equals_one_process(monkeypatch):
    """A simulated split on one GPU: the counts every rank reduces (on the CUDA device) add up to the one-process
    counts, exactly (the same batches, the same attack seeds)."""
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: seen.append(t.clone()))
    cuda = torch.device("cuda", torch.cuda.current_device())
    monkeypatch.setattr(trainer, "collective_device", lambda: cuda)
    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=4).cuda().eval()
    val = dataset_for_model("synthshapes:test,count=50,size=16,classes=4", model.spec)
    for kw in ({}, {"select_best": "robust", "val_attack": "pgd", "val_eps": "8/255", "val_attack_steps": 2}):
        task = Classify(TrainConfig(model="m", data="d", out="o", **kw))
        seen.clear()
        one = trainer.validate_model(task, model, val, cuda, batch_size=8)
        for r in range(3):
            trainer.validate_model(task, model, val, cuda, batch_size=8, rank=r, world=3)
        assert len(seen) == 3 and all(t.device == cuda for t in seen)
        counts = torch.stack(seen).sum(0)
        assert int(counts[-1]) == 50 and task.val_record(counts) == one, kw
