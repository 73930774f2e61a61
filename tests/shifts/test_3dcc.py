"""ImageNet-3DCC (Kar et al. 2022) read from files: the released tree, RobustBench's ``corruptions_acc_3d`` /
``corruptions_mce_3d`` (checked against RobustBench's published numbers), the protocol entry, the leaderboard and
the RobustBench export."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.data import create_dataset
from robustvit.data.corrupted import detect_layout, open_corrupted
from robustvit.data.shift import imagenet_wnids
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import create_suite
from robustvit.metrics.corruption import ALEXNET_ERRORS_3DCC, corruption_error
from robustvit.models import create_model, save_checkpoint
from robustvit.protocols import CORRUPTIONS_3DCC, assess

sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
from fixtures import eval_result, write_run  # noqa: E402

from robustvit.leaderboard import format_rows, leaderboard  # noqa: E402

#: RobustBench ``model_info/imagenet/corruptions/unaggregated_results_3d.csv``: accuracies, 12 corruptions
#: (RobustBench's order) × severities 1-5, and the published ``corruptions_acc_3d`` / ``corruptions_mce_3d``.
PUBLISHED = {
    "Standard_R50": ([0.667, 0.6298, 0.5892, 0.559, 0.523, 0.6708, 0.6064, 0.5372, 0.4888, 0.4456, 0.6338, 0.5696,
                      0.4886, 0.4026, 0.2476, 0.73, 0.7176, 0.6776, 0.5074, 0.1854, 0.4924, 0.4532, 0.3976, 0.3312,
                      0.2196, 0.6542, 0.5176, 0.4016, 0.3128, 0.2526, 0.7064, 0.6964, 0.6464, 0.514, 0.5216, 0.7078,
                      0.7064, 0.6888, 0.655, 0.6248, 0.406, 0.37, 0.2896, 0.19, 0.0804, 0.555, 0.519, 0.4644, 0.399,
                      0.2828, 0.5112, 0.3934, 0.2972, 0.2292, 0.179, 0.476, 0.3978, 0.328, 0.276, 0.2492], 47.12, 73.16),
    "AlexNet": ([0.4616, 0.4192, 0.3822, 0.3554, 0.3282, 0.4722, 0.3902, 0.3314, 0.29, 0.2586, 0.4432, 0.4, 0.3272,
                 0.263, 0.1498, 0.551, 0.5388, 0.5018, 0.3306, 0.0968, 0.2858, 0.248, 0.2082, 0.156, 0.0958, 0.4374,
                 0.2808, 0.1852, 0.1328, 0.096, 0.498, 0.4836, 0.4494, 0.3626, 0.3694, 0.5028, 0.5012, 0.4886, 0.4496,
                 0.4318, 0.1308, 0.1052, 0.0658, 0.0286, 0.012, 0.2832, 0.2364, 0.1874, 0.1246, 0.056, 0.3028, 0.209,
                 0.153, 0.1156, 0.0954, 0.2792, 0.2308, 0.193, 0.166, 0.1516], 28.47, 100.0),
}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_alexnet_table_reproduces_robustbench_published_3dcc_numbers(model):
    acc, want_acc, want_mce = PUBLISHED[model]
    by = {n: acc[5 * i:5 * i + 5] for i, n in enumerate(CORRUPTIONS_3DCC)}
    mce = 100 * sum(corruption_error([1 - a for a in by[n]], ALEXNET_ERRORS_3DCC[n]) for n in by) / 12
    assert round(100 * sum(acc) / 60, 2) == want_acc and round(mce, 2) == want_mce


def _png(path: Path, rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A tiny ImageNet-3DCC tree (12 corruptions × 5 severities × 2 wnids × 2 images, RobustBench's file names) and
    a matching clean ``imagenet:`` folder (1000 wnid folders)."""
    rng = np.random.default_rng(0)
    tmp = tmp_path_factory.mktemp("3dcc")
    root, val = tmp / "ImageNet-3DCC", tmp / "val"
    for w in imagenet_wnids():
        (val / w).mkdir(parents=True)
    for w in imagenet_wnids()[:2]:
        for i in range(2):
            name = f"ILSVRC2012_val_0000000{i}.JPEG"
            _png(val / w / name, rng)
            for n in CORRUPTIONS_3DCC:
                for s in range(1, 6):
                    _png(root / n / str(s) / w / name, rng)
    return root, val


def test_layout_is_detected_and_one_unit_reads_as_a_data_source(tree):
    root, _ = tree
    assert detect_layout(root) == "imagenet-3dcc"
    src = open_corrupted(root)
    assert src.corruptions == list(CORRUPTIONS_3DCC) and src.imagenet_like and src.num_images == 4
    ds = create_dataset(f"imagenet_c:{root},corruption=fog_3d,severity=2")
    x, y = ds.get_batch(torch.arange(4))
    f = root / "fog_3d" / "2" / imagenet_wnids()[1] / "ILSVRC2012_val_00000000.JPEG"
    assert y.tolist() == [0, 0, 1, 1]
    assert torch.equal(x[2], torch.from_numpy(np.array(Image.open(f))).permute(2, 0, 1).float() / 255)
    with pytest.raises(RobustvitError, match="ImageNet-3DCC tree: corruptions= takes"):
        create_suite(f"corruptions:source={root}:corruptions=fog")
    assert create_suite(f"corruptions:source={root}:corruptions=fog_3d+near_focus").names == ["fog_3d", "near_focus"]


def test_both_kinds_of_tree_in_one_folder_are_refused(tmp_path):
    (tmp_path / "fog" / "1").mkdir(parents=True)
    (tmp_path / "fog_3d" / "1").mkdir(parents=True)
    with pytest.raises(RobustvitError, match="both ImageNet-C and ImageNet-3DCC"):
        detect_layout(tmp_path)


def test_suite_reports_robustbench_3dcc_numbers(tree, tmp_path):
    root, val = tree
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=1000).eval()
    with torch.no_grad():
        m.model.head.weight.normal_(0, 1.0)
        m.model.head.bias[2:] -= 100.0          # only the two classes present win: accuracies away from 0 and 1
    ck = str(save_checkpoint(m, tmp_path / "ck"))
    spec = f"corruptions:source={root}:corruptions=near_focus+fog_3d:severities=4+5"
    doc = next(iter(run_eval(EvalConfig(models=[ck], data=f"imagenet:{val}", suites=[spec], out=str(tmp_path / "e"),
                                        batch_size=4, device="cpu", progress=False)).values()))
    r = doc["suites"][spec]
    assert r["source_layout"] == "imagenet-3dcc" and r["corruptions"] == ["near_focus", "fog_3d"]
    assert r["num_classes"] == 1000 and r["num_images"] == 4 and r["mean_accuracy"] is None and r["mce"] is None
    units = [r["accuracy"][n][str(s)] for n in ("near_focus", "fog_3d") for s in (4, 5)]
    assert r["corruptions_acc_3d"] == pytest.approx(sum(units) / 4) and r["corruptions_mce_3d"] is None
    assert "10 were not evaluated" in r["mce_reason"]
    model = create_model(ck).eval()
    files = sorted((root / "near_focus" / "4").glob("*/*"))
    x = torch.stack([torch.from_numpy(np.array(Image.open(f))).permute(2, 0, 1).float() / 255 for f in files])
    with torch.no_grad():
        want = (model(x).argmax(1) == torch.tensor([0, 0, 1, 1])).float().mean().item()
    assert r["accuracy"]["near_focus"]["4"] == pytest.approx(want) and 0 < want < 1
    p = r["protocol"]
    assert p["name"] == "robustbench:imagenet:corruptions_3d"
    assert p["deviations"] == ["2 of 12 corruptions × 2 of 5 severities", "4 images (protocol: 5,000 or 50,000)"]
    # all 12 × 5 (counts by hand): RobustBench's mean accuracy and AlexNet-normalised mCE
    stats = {f"{n}/{s}": {"n": 4, "correct": (3 * i + s) % 5} for i, n in enumerate(CORRUPTIONS_3DCC) for s in range(1, 6)}
    full = create_suite(f"corruptions:source={root}").finalize(None, stats)
    acc = {n: [((3 * i + s) % 5) / 4 for s in range(1, 6)] for i, n in enumerate(CORRUPTIONS_3DCC)}
    assert full["corruptions_acc_3d"] == pytest.approx(sum(sum(v) for v in acc.values()) / 60)
    ce = {n: 100 * sum(1 - a for a in acc[n]) / sum(ALEXNET_ERRORS_3DCC[n]) for n in acc}
    assert full["ce_3d"] == pytest.approx(ce) and full["corruptions_mce_3d"] == pytest.approx(sum(ce.values()) / 12)
    assert assess("corruptions", dict(full, num_images=5000), doc)["comparable"] is True


def _three_d(acc: float, mce: float, n: int = 5000) -> dict:
    return {"corruptions": list(CORRUPTIONS_3DCC), "severities": [1, 2, 3, 4, 5], "source": "/d/ImageNet-3DCC",
            "source_layout": "imagenet-3dcc", "num_classes": 1000, "num_images": n, "mean_accuracy": None,
            "mce": None, "corruptions_acc_3d": acc, "corruptions_mce_3d": mce}


def test_leaderboard_and_robustbench_export_carry_the_3d_numbers(tmp_path):
    doc = eval_result("deit_s", 0.8, {}, suites={"corruptions:source=/d/ImageNet-3DCC": _three_d(0.6264, 52.5)})
    doc["data"]["spec"] = "imagenet:/d/val"
    doc["suites"]["clean"]["num_images"] = 5000
    doc["suites"]["corruptions"] = {"corruptions": ["fog"], "severities": [1], "mean_accuracy": 0.4,
                                    "source": "/d/ImageNet-C", "num_images": 5000}
    rows = leaderboard([write_run(tmp_path / "a", doc)])
    assert rows[0]["corruption_mean_3d"] == 0.6264 and rows[0]["mce_3d"] == 52.5 and rows[0]["corruption_mean"] == 0.4
    assert "| 62.6 (−17.4) [61.3, 64.0] (n=5000) | 52.5 (n=5000) |" in format_rows(rows, "md")
    entries = json.loads(format_rows(rows, "json"))
    e3 = next(e for e in entries if e["threat_model"] == "corruptions_3d")
    assert (e3["corruptions_acc_3d"], e3["corruptions_mce_3d"], e3["comparable"]) == ("62.64", "52.50", True)
    assert next(e for e in entries if e["threat_model"] == "corruptions")["comparable"] is False   # 1 of 15 × 1 of 5
    out = tmp_path / "rb"
    leaderboard([tmp_path / "a"], fmt="robustbench", out=out)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    assert files == ["imagenet/corruptions/deit_s.json"]          # RobustBench's update_json folder for 3D
    got = json.loads((out / files[0]).read_text())
    assert got["corruptions_acc_3d"] == "62.64" and got["corruptions_mce_3d"] == "52.50" and got["clean_acc"] == "80.00"
    assert "corruptions_acc" not in got
