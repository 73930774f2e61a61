"""``--limit`` / ``limit=`` draw seeded class-stratified subsets; ``first`` keeps the prefix; ``--subset FILE``."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.cli import main
from robustvit.data import create_dataset
from robustvit.data.subset import select_subset
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import Suite, register_suite
from robustvit.models import create_model, save_checkpoint

CLASSES, PER_CLASS = 4, 10
N = CLASSES * PER_CLASS


@register_suite
class _SeenImages(Suite):
    """Records which data-set images it saw (a 0/1 vector, additive over chunks) and their labels."""

    name = "_seen_images"
    description = "test suite: which images were evaluated"

    def run(self, ctx, part, batch):
        seen = torch.zeros(len(ctx.dataset), dtype=torch.long)
        seen[batch.ids.cpu()] = 1
        wrong = int((ctx.dataset.get_batch(batch.ids.cpu())[1] != batch.y.cpu()).sum())   # ids match the images
        return {"seen": seen.tolist(), "n": int(len(batch.y)), "label_mismatch": wrong}

    def finalize(self, ctx, stats):
        s = stats["all"]
        return {"ids": [i for i, v in enumerate(s["seen"]) if v], "n": s["n"], "label_mismatch": s["label_mismatch"]}


@register_suite
class _OwnSeenImages(_SeenImages):
    """Like ``_seen_images`` on a data set of its own: 30 images of 6 classes, sorted by class."""

    name = "_own_seen_images"

    def dataset(self, ctx):
        from robustvit.data import TensorImageDataset

        if not hasattr(self, "_ds"):
            x = torch.zeros(30, 3, 32, 32, dtype=torch.uint8)
            self._ds = TensorImageDataset(x, torch.arange(30) // 5, [f"c{k}" for k in range(6)], "tensor:own")
        return self._ds

    def run(self, ctx, part, batch):
        seen = torch.zeros(30, dtype=torch.long)
        seen[batch.ids.cpu()] = 1
        return {"seen": seen.tolist(), "n": int(len(batch.y)), "label_mismatch": 0}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An ImageFolder tree, classes sorted: a prefix of it holds one class only."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        (root / f"class{c}").mkdir()
        for k in range(PER_CLASS):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / f"class{c}" / f"img{k:02d}.png")
    return root


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> list[str]:
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        m = create_model("resnet_cifar18", width_mult=0.0625, num_classes=CLASSES).eval()
        out.append(str(save_checkpoint(m, tmp_path_factory.mktemp(f"ck{seed}") / "ck")))
    return out


LABELS = torch.arange(N) // PER_CLASS


def _run(ckpts, folder, out, **kw):
    kw.setdefault("suites", ["_seen_images"])
    return run_eval(EvalConfig(models=ckpts, data=f"folder:{folder}", out=str(out), batch_size=3, device="cpu",
                               progress=False, **kw))


def test_limit_covers_every_class_of_a_sorted_folder(ckpts, folder, tmp_path):
    r = _run(ckpts[:1], folder, tmp_path / "a", limit=8, suites=["_seen_images", "clean"])["ck"]
    ids = r["suites"]["_seen_images"]["ids"]
    assert torch.bincount(LABELS[ids], minlength=CLASSES).tolist() == [2] * CLASSES     # not 8 images of class0
    assert ids == select_subset(LABELS, 8, "stratified", seed=0).tolist()
    assert r["suites"]["_seen_images"]["label_mismatch"] == 0 and r["data"]["num_images"] == 8
    assert r["data"]["subset"] == {"method": "stratified", "seed": 0, "num_images": 8, "num_classes": 4, "of": 40}
    assert r["comparable"] is False and "8 of 40 images" in r["notes"][0]
    # clean accuracy on exactly those images, computed by hand
    m = create_model(ckpts[0]).eval()
    x, y = create_dataset(f"folder:{folder}", image_size=32).get_batch(torch.tensor(ids))
    with torch.no_grad():
        assert r["suites"]["clean"]["top1"] == pytest.approx((m(x).argmax(1) == y).float().mean().item())


def test_two_models_and_two_runs_see_the_same_images(ckpts, folder, tmp_path):
    both = _run(ckpts, folder, tmp_path / "a", limit=10, seed=3)
    ids = [res["suites"]["_seen_images"]["ids"] for res in both.values()]
    assert len(both) == 2 and ids[0] == ids[1]
    again = _run(ckpts[:1], folder, tmp_path / "b", limit=10, seed=3)
    assert next(iter(again.values()))["suites"]["_seen_images"]["ids"] == ids[0]
    other = _run(ckpts[:1], folder, tmp_path / "c", limit=10, seed=3, subset_seed=4)
    res = next(iter(other.values()))
    assert res["data"]["subset"]["seed"] == 4 and res["suites"]["_seen_images"]["ids"] == \
        select_subset(LABELS, 10, "stratified", seed=4).tolist() != ids[0]


def test_subset_first_is_the_old_prefix(ckpts, folder, tmp_path):
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "a", limit=8, subset_method="first").values()))
    assert r["suites"]["_seen_images"]["ids"] == list(range(8))
    assert r["data"]["subset"] == {"method": "first", "seed": None, "num_images": 8, "num_classes": 1, "of": 40}


def test_suite_limit_draws_from_the_run_images(ckpts, folder, tmp_path):
    suites = ["_seen_images:limit=4", "_seen_images:limit=6:subset=first", "_seen_images"]
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "a", limit=20, suites=suites).values()))
    run_ids = r["suites"]["_seen_images"]["ids"]
    strat = r["suites"]["_seen_images:limit=4"]
    assert set(strat["ids"]) <= set(run_ids) and torch.bincount(LABELS[strat["ids"]], minlength=4).tolist() == [1] * 4
    assert strat["subset"] == {"method": "stratified", "seed": 0, "num_images": 4, "num_classes": 4, "of": 40}
    assert set(strat["ids"]) <= set(select_subset(LABELS, 8, "stratified", 0).tolist())    # draws nest
    assert r["suites"]["_seen_images:limit=6:subset=first"]["ids"] == sorted(run_ids)[:6]
    assert "subset" not in r["suites"]["_seen_images"]
    assert any(n.startswith("_seen_images:limit=4: 4 of 40") for n in r["notes"])
    # without --limit, limit=4 is a stratified draw from the whole set; subset=first keeps the old prefix
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "b", suites=suites[:2]).values()))
    assert r["suites"]["_seen_images:limit=4"]["ids"] == select_subset(LABELS, 4, "stratified", 0).tolist()
    assert r["suites"]["_seen_images:limit=6:subset=first"]["ids"] == list(range(6))
    assert r["data"]["subset"] is None and r["data"]["num_images"] == 6        # the images read, not all 40
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "c", suites=suites[:1]).values()))
    assert r["data"]["num_images"] == 4 and r["suites"]["_seen_images:limit=4"]["n"] == 4


def test_subset_file_with_paths_and_indices(ckpts, folder, tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("class3/img07.png\nclass0/img02.png\nclass1/img09.png\n")
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "a", subset=str(f)).values()))
    assert r["suites"]["_seen_images"]["ids"] == [2, 19, 37]
    assert r["data"]["subset"] == {"method": "file", "seed": None, "num_images": 3, "num_classes": 3, "of": 40,
                                   "file": str(f)}
    assert r["comparable"] is True and r["notes"] == []
    f.write_text("[5, 33]")
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "b", subset=str(f)).values()))
    assert r["suites"]["_seen_images"]["ids"] == [5, 33]


def test_resume_with_another_subset_is_refused(ckpts, folder, tmp_path):
    _run(ckpts[:1], folder, tmp_path / "a", limit=8)
    _run(ckpts[:1], folder, tmp_path / "a", limit=8)                      # the same subset resumes
    with pytest.raises(RobustvitError, match="other settings.*subset"):
        _run(ckpts[:1], folder, tmp_path / "a", limit=8, subset_seed=1)
    with pytest.raises(RobustvitError, match="other settings"):
        _run(ckpts[:1], folder, tmp_path / "a", limit=8, subset_method="first")


def test_cli_subset_flags_and_bad_entries(ckpts, folder, tmp_path, capsys):
    f = tmp_path / "ids.txt"
    f.write_text("class0/img00.png\nclass9/nope.png\nclass1/missing.png\n")
    args = ["eval", "--model", ckpts[0], "--data", f"folder:{folder}", "--out", str(tmp_path / "e"),
            "--device", "cpu", "--no-progress", "--batch-size", "4"]
    assert main(args + ["--subset", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "class9/nope.png, class1/missing.png" in err
    assert main(args + ["--limit", "8", "--subset-method", "first", "--subset-seed", "2"]) == 0
    r = json.loads((tmp_path / "e" / "results.json").read_text())
    assert r["data"]["subset"]["method"] == "first" and r["data"]["num_images"] == 8
    assert main(args[:-6] + [str(tmp_path / "g"), "--device", "cpu", "--no-progress", "--limit", "8"]) == 0
    r = json.loads((tmp_path / "g" / "results.json").read_text())
    assert r["data"]["subset"]["num_classes"] == 4 and "--limit" in r["run"]["command"]


def test_suite_with_its_own_data_draws_from_it(ckpts, folder, tmp_path):
    r = next(iter(_run(ckpts[:1], folder, tmp_path / "a", limit=8,
                       suites=["_own_seen_images:limit=6", "_own_seen_images"]).values()))
    ids = r["suites"]["_own_seen_images:limit=6"]["ids"]
    assert torch.bincount(torch.tensor(ids) // 5, minlength=6).tolist() == [1] * 6       # stratified over its classes
    assert ids == select_subset(torch.arange(30) // 5, 6, "stratified", seed=0).tolist()
    assert r["suites"]["_own_seen_images"]["ids"] == list(range(30))     # --limit is about --data, not its own set
    assert r["suites"]["_own_seen_images:limit=6"]["subset"]["of"] == 30
