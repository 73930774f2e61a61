"""Sharded validation with 2 real gloo processes under ``torchrun`` (CPU): every rank validates its share of the
batches, every rank gets the same record, and the numbers equal one process's exactly — for a BatchNorm network,
whose running statistics differ between the ranks after an epoch until rank 0's are broadcast."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from robustvit.data import dataset_for_model
from robustvit.models import create_model
from robustvit.training import TrainConfig
from robustvit.training.tasks import Classify
from robustvit.training.trainer import validate_model

DATA = "synthshapes:train,count=48,size=32,classes=4"
VAL = "synthshapes:test,count=22,size=32,classes=4"
VAL_BATCH = 8          # 3 validation batches (8, 8, 6): rank 0 takes batches 0 and 2, rank 1 batch 1

WORKER = textwrap.dedent("""
    import json, sys
    import torch
    from robustvit.training import TrainConfig, train, trainer

    out, data, val, val_batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    trainer.VAL_BATCH_SIZE = val_batch
    records, buffers = [], []
    finish, broadcast = trainer.finish_epoch, trainer.broadcast_buffers

    def total(model):
        return sum(float(b.double().sum()) for n, b in model.named_buffers() if "running" in n)

    def broadcast_spy(model):
        before = total(model)
        broadcast(model)
        buffers.append([before, total(model)])

    def finish_spy(run, *a, **k):
        rec = finish(run, *a, **k)
        records.append({"rank": run.rank, "world": run.world,
                        **{k: v for k, v in rec.items() if k.startswith("val") or k in ("epoch", "best")}})
        return rec

    trainer.finish_epoch, trainer.broadcast_buffers = finish_spy, broadcast_spy
    cfg = TrainConfig(model="resnet_cifar18", data=data, val_data=val, out=out, epochs=2, batch_size=8, lr=1e-3,
                      model_kwargs={"width_mult": 0.0625}, device="cpu", warmup_epochs=0, select_best="robust",
                      val_attack="pgd", val_attack_steps=2, val_eps="2/255")
    train(cfg, progress=False)
    rank = records[0]["rank"]
    with open(f"{out}/records.{rank}.json", "w") as f:
        json.dump({"records": records, "buffers": buffers}, f)
""")


@pytest.mark.slow
def test_two_gloo_processes_validate_sharded_and_agree_with_one_process(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           str(out), DATA, VAL, str(VAL_BATCH)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-3000:]
    w0 = json.loads((out / "records.0.json").read_text())
    w1 = json.loads((out / "records.1.json").read_text())
    r0, r1 = w0["records"], w1["records"]
    assert [r["world"] for r in r0 + r1] == [2] * 4
    strip = [{k: v for k, v in r.items() if k != "rank"} for r in r0 + r1]
    assert strip[:2] == strip[2:]                                  # every rank: the same record
    # BatchNorm statistics differ between the ranks after an epoch (DDP broadcasts them before each forward,
    # then each rank updates them with its own batch); validation evaluates rank 0's on both ranks
    (b0, b1) = w0["buffers"][-1], w1["buffers"][-1]
    assert b0[0] != b1[0] and b1[1] == b0[1] == b0[0]
    lines = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert [ln["val_acc"] for ln in lines] == [r["val_acc"] for r in r0]
    # one process on the weights rank 0 validated (last/ holds the final epoch): the same numbers, exactly
    model = create_model(str(out / "last"))
    val, cpu = dataset_for_model(VAL, model.spec), torch.device("cpu")
    task = Classify(TrainConfig(model="m", data="d", out="o", select_best="robust", val_attack="pgd",
                                val_attack_steps=2, val_eps="2/255"))
    one = validate_model(task, model, val, cpu, batch_size=VAL_BATCH)
    assert (one["val_acc"], one["val_robust_acc"]) == (lines[-1]["val_acc"], lines[-1]["val_robust_acc"])
