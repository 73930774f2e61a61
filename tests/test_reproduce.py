"""benchmarks/reproduce.py: the stratified training sample, reading robustvit eval's results, the seeds table."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "reproduce.py"


@pytest.fixture(scope="module")
def rep():
    spec = importlib.util.spec_from_file_location("reproduce_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(root: Path, counts: dict[str, int]) -> Path:
    for cls, n in counts.items():
        (root / cls).mkdir(parents=True)
        for i in range(n):
            (root / cls / f"{i:04d}.jpg").write_bytes(f"{cls}{i}".encode())
    (root / "a" / "notes.txt").write_text("not an image")
    return root


def test_stratified_sample_takes_per_class_seeded_and_resumes(rep, tmp_path):
    src = _tree(tmp_path / "train", {"a": 9, "b": 7, "c": 12})
    n = rep.stratified_sample(src, 4, tmp_path / "s0", seed=0)
    assert n == 12
    picked = {c: sorted(p.name for p in (tmp_path / "s0" / c).iterdir()) for c in "abc"}
    assert all(len(v) == 4 for v in picked.values())
    for c, names in picked.items():                     # copies of the source files, byte for byte
        for name in names:
            assert (tmp_path / "s0" / c / name).read_bytes() == (src / c / name).read_bytes()
    assert rep.stratified_sample(src, 4, tmp_path / "s0b", seed=0) == 12
    assert picked == {c: sorted(p.name for p in (tmp_path / "s0b" / c).iterdir()) for c in "abc"}
    rep.stratified_sample(src, 4, tmp_path / "s1", seed=1)
    assert picked != {c: sorted(p.name for p in (tmp_path / "s1" / c).iterdir()) for c in "abc"}
    (tmp_path / "s0" / "a" / picked["a"][0]).unlink()    # a finished sample is not redrawn
    assert rep.stratified_sample(src, 4, tmp_path / "s0", seed=0) == 12
    with pytest.raises(SystemExit):
        rep.stratified_sample(src, 8, tmp_path / "big", seed=0)   # class b has only 7


def test_read_eval_finds_suites_by_name(rep, tmp_path):
    res = {"suites": {"clean": {"top1": 0.5, "num_images": 100},
                      "pgd:eps=8/255:steps=10": {"accuracy": 0.1, "clean_accuracy": 0.45, "eps": 8 / 255,
                                                 "steps": 10, "step_size": 2 / 255, "restarts": 1},
                      "corruptions:corruptions=benchmark": {"mean_accuracy": 0.3, "clean_accuracy": 0.48}}}
    (tmp_path / "results.json").write_text(json.dumps(res))
    r = rep.read_eval(tmp_path / "results.json")
    assert (r["clean"], r["pgd"], r["pgd_clean"], r["corruption"]) == (0.5, 0.1, 0.45, 0.3)
    assert r["pgd_settings"]["steps"] == 10


def test_table_is_mean_and_sample_std_over_seeds(rep):
    proto = {"train_images": 20, "train_per_class": 2, "epochs": 1, "eps": "8/255", "train_attack_steps": 2,
             "trades_beta": 6.0, "eval_clean_images": 10, "eval_pgd_images": 5, "eval_corruption_images": 5}
    vals = {"ce": [(0.40, 0.00, 0.35), (0.44, 0.02, 0.31), (0.42, 0.01, 0.33)],
            "pgd_at": [(0.30, 0.20, 0.28), (0.34, 0.18, 0.30)]}
    runs = [{"method": m, "seed": s, "model": "vit_cifar_micro", "clean": c, "pgd": p, "corruption": k,
             "protocol": proto} for m, rows in vals.items() for s, (c, p, k) in enumerate(rows)]
    text = rep.table(runs)
    lines = text.splitlines()
    ce = next(x for x in lines if x.startswith("| `ce`"))
    pgd = next(x for x in lines if x.startswith("| `pgd_at`"))
    assert lines.index(ce) < lines.index(pgd)           # methods in the script's order
    clean = [v[0] for v in vals["ce"]]
    assert f"{statistics.mean(clean) * 100:.1f} ± {statistics.stdev(clean) * 100:.1f}" in ce
    assert "42.0 ± 2.0" in ce and "| 0, 1, 2 |" in ce
    assert "19.0 ± 1.4" in pgd and "| 0, 1 |" in pgd


def test_read_eval_takes_each_attack_at_its_own_eps(rep, tmp_path):
    res = {"suites": {
        "clean": {"top1": 0.5, "num_images": 500},
        "pgd:eps=8/255:steps=10": {"accuracy": 0.2, "clean_accuracy": 0.5, "num_images": 200},
        "pgd:eps=16/255:steps=10": {"accuracy": 0.05, "clean_accuracy": 0.5, "num_images": 200},
        "fgsm:eps=16/255": {"accuracy": 0.4, "clean_accuracy": 0.5},
        "autoattack:eps=8/255:attacks=apgd_ce+apgd_t": {"accuracy": 0.15, "per_attack": {"apgd_ce": 0.17},
                                                        "num_images": 100},
        "corruptions:corruptions=benchmark": {"mean_accuracy": 0.3, "clean_accuracy": 0.48},
        "patch_occlusion:rhos=0.1+0.5": {"clean_accuracy": 0.5, "num_images": 200,
                                         "per_rho": {"0.1": {"mean_accuracy": 0.4}, "0.5": {"mean_accuracy": 0.2}}}}}
    (tmp_path / "results.json").write_text(json.dumps(res))
    r = rep.read_eval(tmp_path / "results.json", "8/255", "16/255")
    assert (r["pgd"], r["pgd_own"], r["fgsm_own"], r["autoattack"]) == (0.2, 0.05, 0.4, 0.15)
    assert r["occlusion"] == pytest.approx(0.3) and r["occlusion_per_rho"] == {"0.1": 0.4, "0.5": 0.2}
    assert "pgd_own" not in rep.read_eval(tmp_path / "results.json", "8/255", "8/255")


def test_large_eps_runs_get_their_own_table(rep):
    proto = {"train_images": 20, "train_per_class": 2, "epochs": 1, "eps": "8/255", "train_attack_steps": 2,
             "trades_beta": 6.0, "eval_clean_images": 10, "eval_pgd_images": 5, "eval_corruption_images": 5}
    base = {"model": "m", "protocol": proto, "clean": 0.3, "pgd": 0.1, "corruption": 0.2, "attention_stability": 0.9}
    runs = [{**base, "method": "pgd_at", "loss": "pgd_at", "train_eps": "8/255", "seed": 0},
            {**base, "method": "fgsm_rs_e16", "loss": "fgsm_rs", "train_eps": "16/255", "seed": 0,
             "fgsm_own": 0.5, "pgd_own": 0.01},
            {**base, "method": "fgsm_rs_e16", "loss": "fgsm_rs", "train_eps": "16/255", "seed": 1,
             "fgsm_own": 0.7, "pgd_own": 0.03}]
    text = rep.table(runs)
    large = text.split("FGSM at ε")[1]
    assert "| `fgsm_rs_e16` | `fgsm_rs` (ε 16/255) | 0, 1 | 30.0 ± 0.0 | 60.0 ± 14.1 | 2.0 ± 1.4 |" in large
    assert "`pgd_at`" not in large and "| 0.900 ± 0.000 |" in text      # attention stability: the cosine itself
