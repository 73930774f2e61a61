import json
import os
import subprocess
import sys

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.utils import add_stats
from robustvit.evaluation.suites import Suite, create_suite, list_suites, register_suite
from robustvit.evaluation.suites.clean import Clean
from robustvit.models import create_model, save_checkpoint

DATA = "synthshapes:test,count=50,size=16"


@pytest.fixture
def ckpt(tmp_path, tiny_resnet):
    tiny_resnet.spec.num_classes = 5
    m = create_model("resnet_cifar18", width_mult=0.0625, num_classes=10).eval()
    return str(save_checkpoint(m, tmp_path / "ck"))


def _manual_accuracy(ck, n=50):
    from robustvit.data import create_dataset

    m = create_model(ck).eval()
    ds = create_dataset(DATA)
    x, y = ds.get_batch(torch.arange(n))
    with torch.no_grad():
        logits = m(x)
    top5 = logits.topk(5, 1).indices.eq(y[:, None]).any(1).float().mean().item()
    return (logits.argmax(1) == y).float().mean().item(), top5


def test_clean_suite_matches_manual_accuracy(tmp_path, ckpt):
    res = run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "e"), batch_size=16, device="cpu", progress=False))
    r = json.loads((tmp_path / "e" / "results.json").read_text())
    top1, top5 = _manual_accuracy(ckpt)
    assert r["suites"]["clean"]["top1"] == pytest.approx(top1) and r["suites"]["clean"]["top5"] == pytest.approx(top5)
    assert r["schema"] == 2 and r["kind"] == "eval" and r["data"]["num_images"] == 50 and r["model"]["spec"]["architecture"] == "resnet_cifar18"
    assert set(r["run"]) >= {"robustvit", "torch", "device", "seed", "started", "finished", "command"}
    assert r["model"]["params"] > 0 and list(res) == ["ck"]          # a checkpoint folder: named by its folder


class Boom(Exception):
    pass


@register_suite
class _Flaky(Suite):
    """A test suite that dies after a number of units (simulating a kill)."""
    name = "_flaky_test"
    fail_after: int | None = None
    calls = 0

    def parts(self, ctx):
        return ["a", "b"]

    def run(self, ctx, part, batch):
        type(self).calls += 1
        if self.fail_after is not None and type(self).calls > self.fail_after:
            raise Boom()
        noise = torch.rand(len(batch.y), generator=batch.generator, device=batch.y.device)
        return {"n": len(batch.y), "sum": float(noise.sum()), "hist": [int((batch.y == k).sum()) for k in range(10)]}

    def finalize(self, ctx, stats):
        return {p: s["sum"] / s["n"] for p, s in stats.items()} | {"hist": stats["a"]["hist"]}


def test_resume_after_interruption_gives_the_same_result(tmp_path, ckpt):
    cfg = dict(models=[ckpt], data=DATA, suites=["_flaky_test", "clean"], batch_size=8, device="cpu", progress=False)
    _Flaky.fail_after, _Flaky.calls = None, 0
    ref = run_eval(EvalConfig(out=str(tmp_path / "ref"), **cfg))["ck"]
    _Flaky.fail_after, _Flaky.calls = 5, 0
    with pytest.raises(Boom):
        run_eval(EvalConfig(out=str(tmp_path / "run"), **cfg))
    assert not (tmp_path / "run" / "results.json").exists()
    _Flaky.fail_after, _Flaky.calls = None, 0
    res = run_eval(EvalConfig(out=str(tmp_path / "run"), **cfg))["ck"]
    assert _Flaky.calls == 14 - 5  # 7 chunks × 2 parts, 5 already stored
    assert res["suites"] == {k: {**v, "seconds": res["suites"][k]["seconds"]} for k, v in ref["suites"].items()}
    assert sum(res["suites"]["_flaky_test"]["hist"]) == 50


def test_settings_mismatch_and_bad_input(tmp_path, ckpt):
    run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "e"), batch_size=16, device="cpu", progress=False, limit=20))
    with pytest.raises(RobustvitError, match="other settings.*limit"):
        run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "e"), batch_size=16, device="cpu", progress=False, limit=30))
    with pytest.raises(RobustvitError, match="larger than the data set"):
        run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "f"), limit=51, device="cpu", progress=False))
    with pytest.raises(RobustvitError, match=">= 1"):
        run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "f"), limit=0, device="cpu", progress=False))
    with pytest.raises(RobustvitError, match="unknown suite 'clen'; did you mean clean"):
        run_eval(EvalConfig(models=[ckpt], data=DATA, suites=["clen"], out=str(tmp_path / "f"), device="cpu"))
    with pytest.raises(RobustvitError, match="no option 'eps'"):
        create_suite("clean:eps=1")


def test_registry_and_stats():
    assert "clean" in list_suites() and "clean" in list_suites("cl*")
    assert add_stats({"a": 1, "b": [1, 2], "c": {"d": 2.5}}, {"a": 2, "b": [3, 4], "c": {"d": 1}}) == {"a": 3, "b": [4, 6], "c": {"d": 3.5}}
    assert isinstance(create_suite("clean"), Clean)


@pytest.mark.slow
def test_torchrun_two_processes_match_single(tmp_path, ckpt):
    single = run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "one"), batch_size=8, device="cpu", progress=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29533", "-m", "robustvit.cli",
           "eval", "--model", ckpt, "--data", DATA, "--out", str(tmp_path / "two"), "--batch-size", "8", "--device", "cpu",
           "--no-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-1500:] + proc.stderr[:3000])
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert two["run"]["world_size"] == 2
    assert two["suites"]["clean"]["top1"] == pytest.approx(single["ck"]["suites"]["clean"]["top1"])
    assert two["data"]["num_images"] == 50


def test_a_rerun_with_other_suites_keeps_every_finished_suite(tmp_path, ckpt):
    """#33: clean + pgd, then spatial into the same folder: results.json holds all three, the first two unchanged
    (and a suite run again replaces only its own entry)."""
    pgd, spatial = "pgd:steps=1:checks=0", "spatial:translations=2:rotations=2:checks=0"
    cfg = dict(models=[ckpt], data=DATA, out=str(tmp_path / "e"), batch_size=16, device="cpu", progress=False,
               limit=8)
    first = run_eval(EvalConfig(suites=["clean", pgd], **cfg))["ck"]
    second = run_eval(EvalConfig(suites=[spatial], **cfg))["ck"]
    on_disk = json.loads((tmp_path / "e" / "results.json").read_text())
    assert list(on_disk["suites"]) == ["clean", pgd, spatial] and on_disk == json.loads(json.dumps(second))
    for key in ("clean", pgd):
        assert on_disk["suites"][key] == json.loads(json.dumps(first["suites"][key]))
    assert 0 <= on_disk["suites"][spatial]["accuracy"] <= on_disk["suites"][spatial]["clean_accuracy"]
    third = run_eval(EvalConfig(suites=["clean"], **cfg))["ck"]     # resumed from the store: same value
    assert list(third["suites"]) == [pgd, spatial, "clean"]
    assert third["suites"]["clean"] == {**first["suites"]["clean"], "seconds": third["suites"]["clean"]["seconds"]}


def test_unknown_run_options_are_refused(tmp_path, ckpt):
    with pytest.raises(RobustvitError, match="unknown run option 'epz'.*eps, norm, steps"):
        run_eval(EvalConfig(models=[ckpt], data=DATA, out=str(tmp_path / "e"), device="cpu", options={"epz": 1}))


@register_suite
class _OwnImages(Suite):
    """A test suite whose plan says it reads its own 10 images (from ``batch.ids``): the runner reads none."""
    name = "_own_images_test"

    def plan(self, ctx):
        from robustvit.evaluation.suites.base import Plan

        return Plan(["a", "b"], size=10, labels=torch.tensor([0, 1] * 5))

    def run(self, ctx, part, batch):
        assert batch.x.shape[-2:] == (0, 0) and len(batch.x) == len(batch.ids)
        seen = set(batch.ids.tolist())
        return {"seen": [int(j in seen) for j in range(10)]}       # additive: how often each image was seen

    def finalize(self, ctx, stats):
        assert all(max(s["seen"]) == 1 for s in stats.values())
        return {p: [j for j, k in enumerate(s["seen"]) if k] for p, s in stats.items()}


def test_a_plan_of_own_images_gets_their_positions_and_a_stratified_limit(tmp_path, ckpt):
    cfg = dict(models=[ckpt], data=DATA, batch_size=4, device="cpu", progress=False, limit=6)
    res = run_eval(EvalConfig(suites=["_own_images_test", "_own_images_test:limit=4:subset=first"],
                              out=str(tmp_path / "a"), **cfg))["ck"]["suites"]
    assert res["_own_images_test"]["a"] == res["_own_images_test"]["b"] == list(range(10))   # not the run's 6
    assert res["_own_images_test:limit=4:subset=first"]["a"] == [0, 1, 2, 3]
    strat = run_eval(EvalConfig(suites=["_own_images_test:limit=4"], out=str(tmp_path / "b"), **cfg))
    ids = strat["ck"]["suites"]["_own_images_test:limit=4"]["a"]
    assert len(ids) == 4 and sorted(i % 2 for i in ids) == [0, 0, 1, 1]        # both classes, 2 each
