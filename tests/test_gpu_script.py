"""``benchmarks/gpu.py --dry-run``: the prepared GPU run works end to end on the CPU (tiny sizes), so the one device
call it is made for does not fail on a typo."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


@pytest.fixture(scope="module")
def gpu_script():
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_measures_every_step(gpu_script, tmp_path):
    assert gpu_script.main(["--dry-run", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "gpu.json").read_text())
    steps = ("tests", "forward", "corruptions", "loader", "pgd", "train", "engine")
    assert all(s in res and "error" not in res[s] for s in steps), {s: res.get(s, {}).get("error") for s in steps}
    assert res["device"] == "cpu" and res["dry_run"] is True
    assert set(res["forward"]["vit_cifar_micro"]) == {"fp32", "tf32", "bf16"}
    assert len(res["corruptions"]["per_corruption"]) == 19
    assert res["loader"]["workers_0"] > 0 and res["pgd"]["ratio"] > 0 and res["engine"]["engine_unit_s"] > 0
    table = (tmp_path / "gpu.md").read_text()
    assert "corruption sweep" in table and "engine overhead" in table and "PGD step" in table


def test_a_failing_step_is_recorded_and_the_others_go_on(gpu_script, tmp_path, monkeypatch):
    def broken(*a):
        raise RuntimeError("boom")
    monkeypatch.setattr(gpu_script, "step_pgd", broken)
    assert gpu_script.main(["--dry-run", "--out", str(tmp_path), "--steps", "pgd,engine"]) == 1
    res = json.loads((tmp_path / "gpu.json").read_text())
    assert res["pgd"]["error"] == "RuntimeError: boom" and "engine_unit_s" in res["engine"]
