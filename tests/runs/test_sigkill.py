"""A run killed with SIGKILL resumes from its stored units to the results of an uninterrupted run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from robustvit.cli import main
from robustvit.models import create_model, save_checkpoint

DATA = "synthshapes:test,count=120,size=16"
SUITE = "corruptions:corruptions=gaussian_noise+contrast+fog:severities=1+3"


def _stored(db_path):
    try:
        with sqlite3.connect(db_path, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM units").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
def test_eval_killed_with_sigkill_resumes_to_the_same_results(tmp_path):
    import torch

    torch.manual_seed(0)
    ck = str(save_checkpoint(create_model("resnet_cifar18", width_mult=0.0625, num_classes=10).eval(), tmp_path / "ck"))
    args = ["eval", "--model", ck, "--data", DATA, "--suite", SUITE, "--batch-size", "4", "--device", "cpu",
            "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "robustvit.cli", *args, "--out", str(tmp_path / "killed")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "killed" / "units.sqlite"
    deadline = time.monotonic() + 300
    while proc.poll() is None and _stored(db) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the run ended before it could be killed")
    before = _stored(db)
    assert 0 < before < 30 * 7 and not (tmp_path / "killed" / "results.json").exists()
    assert main(args + ["--out", str(tmp_path / "killed")]) == 0           # resumes
    assert main(args + ["--out", str(tmp_path / "straight")]) == 0
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("killed", "straight"))
    ra, rb = a["suites"][SUITE], b["suites"][SUITE]
    ra.pop("seconds"), rb.pop("seconds")
    assert ra == rb and a["data"] == b["data"]
