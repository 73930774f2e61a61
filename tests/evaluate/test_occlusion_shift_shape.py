import json

import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader

from robustvit.data import UNREADABLE, Resize
from robustvit.data.shift import subset_indices, subset_wnids
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.utils import add_stats
from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.metrics.shape_bias import geirhos_categories
from robustvit.models import create_model, save_checkpoint
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized


class ColorCode(nn.Module):
    """Fake 1000-class model: the centre pixel's colour says which class wins: index R + 256·G gets logit 10;
    blue = 255 adds a distractor logit 20 on class 0 (in neither ImageNet-R's nor -A's 200 classes);
    the other logits decrease slowly with the index (so top-5 fills with the lowest indices)."""

    def forward(self, x):
        c = (x[:, :, x.shape[2] // 2, x.shape[3] // 2] * 255).round().long()
        logits = -torch.arange(1000, dtype=torch.float32).expand(len(x), 1000) * 1e-3
        logits = logits.clone()
        logits[torch.arange(len(x)), c[:, 0] + 256 * c[:, 1]] = 10.0
        logits[:, 0] += 20.0 * (c[:, 2] == 255)
        return logits


def fake_model(size=16, **preprocessing):
    spec = ModelSpec("colorcode", 1000, (3, size, size), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), **preprocessing)
    return Normalized(ColorCode(), spec).eval()


def png(path, idx, distract=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 20), (idx % 256, idx // 256, 255 if distract else 0)).save(path)


def ctx_for(model, data_spec="fake", num_classes=None):
    return EvalContext(model=model, model_name="m", models={"m": model}, data_spec=data_spec, dataset=None,
                       num_classes=num_classes or model.spec.num_classes, device=torch.device("cpu"), seed=0)


def run_suite(suite, ctx, batch_size=3):
    """What the runner does with a suite that has its own data set: chunks → run → add stats → finalize."""
    ds = suite.dataset(ctx)
    stats = {}
    n = len(ds)
    chunks = [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
    for c, (x, y) in enumerate(DataLoader(ds, batch_sampler=chunks)):
        idx = torch.tensor(chunks[c])
        keep = y != UNREADABLE
        for part in suite.parts(ctx):
            g = torch.Generator().manual_seed(c)
            s = suite.run(ctx, part, Batch(x[keep], y[keep], idx[keep], g))
            stats[part] = add_stats(stats[part], s) if part in stats else s
    return suite.finalize(ctx, stats)


@pytest.mark.filterwarnings("ignore:skipping unreadable image")
def test_imagenet_r_masks_logits_to_its_200_classes(tmp_path):
    r, ind = subset_wnids("imagenet_r"), subset_indices("imagenet_r")
    png(tmp_path / r[0] / "1.png", ind[0])
    png(tmp_path / r[0] / "2.png", ind[0], distract=True)      # class 0 wins over all 1000, not over the 200
    png(tmp_path / r[0] / "3.png", ind[10])                     # wrong; top-5 = positions {10, 0, 1, 2, 3} ∋ 0
    png(tmp_path / r[50] / "4.png", ind[50])
    png(tmp_path / r[50] / "5.png", ind[51])                    # wrong; top-5 = {51, 0, 1, 2, 3} ∌ 50
    (tmp_path / r[50] / "6.png").write_bytes(b"not a png")      # unreadable
    res = run_suite(create_suite(f"imagenet_r:root={tmp_path}"), ctx_for(fake_model()))
    assert res["top1"] == pytest.approx(3 / 5) and res["top5"] == pytest.approx(4 / 5)
    assert (res["num_images"], res["num_classes"], res["class_folders"], res["unreadable"]) == (5, 200, 2, 1)


def test_imagenet_v2_uses_integer_folder_labels(tmp_path):
    for folder, pred in (("2", 2), ("10", 10), ("999", 998)):
        png(tmp_path / folder / "a.png", pred)
    res = run_suite(create_suite(f"imagenet_v2:root={tmp_path}"), ctx_for(fake_model()))
    assert res["top1"] == pytest.approx(2 / 3) and res["num_classes"] == 1000


def test_shift_suites_use_each_models_own_preprocessing(tmp_path):
    png(tmp_path / "3" / "a.png", 3)
    Image.new("RGB", (40, 20), (0, 0, 0)).save(tmp_path / "3" / "wide.png")
    model = fake_model(12, crop_pct=1.0, interpolation="bicubic")
    suite = create_suite(f"imagenet_v2:root={tmp_path}")
    ds = suite.dataset(ctx_for(model))
    assert ds.resize == Resize(12, 1.0, "bicubic") and ds[1][0].shape == (3, 12, 12)
    res = run_suite(suite, ctx_for(model))
    assert res["preprocessing"] == {"size": 12, "crop_pct": 1.0, "interpolation": "bicubic"}
    other = create_suite(f"imagenet_v2:root={tmp_path}:crop_pct=0.875")    # the official scripts' crop
    assert other.dataset(ctx_for(model)).resize == Resize(12, 0.875, "bicubic")
    assert suite.dataset(ctx_for(fake_model(16))).resize == Resize(16)      # a second model: its own data


def test_shift_suite_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("ROBUSTVIT_DATA", raising=False)
    png(tmp_path / subset_wnids("imagenet_a")[0] / "a.png", 6)
    with pytest.raises(RobustvitError, match="1000-class"):
        create_suite(f"imagenet_a:root={tmp_path}").dataset(ctx_for(fake_model(), num_classes=10))
    with pytest.raises(RobustvitError, match="ROBUSTVIT_DATA"):
        create_suite("imagenet_a").dataset(ctx_for(fake_model()))
    png(tmp_path / subset_wnids("imagenet_r")[1] / "b.png", 6)   # an -R-only wnid inside an -A folder
    if subset_wnids("imagenet_r")[1] not in subset_wnids("imagenet_a"):
        with pytest.raises(RobustvitError, match="not one of its 200 wnids"):
            create_suite(f"imagenet_a:root={tmp_path}").dataset(ctx_for(fake_model()))


def test_shape_bias_on_geirhos_layout(tmp_path):
    cats = geirhos_categories()
    png(tmp_path / "cat" / "cat1-dog1.png", cats["dog"][3])      # texture decision
    png(tmp_path / "cat" / "cat2-cat3.png", cats["cat"][0])      # excluded (no conflict)
    png(tmp_path / "dog" / "dog1-bird3.png", cats["dog"][0])     # shape decision
    png(tmp_path / "dog" / "dog2-knife1.png", cats["oven"][0])   # other
    res = run_suite(create_suite(f"shape_bias:stimuli={tmp_path}"), ctx_for(fake_model()))
    assert res["shape_bias"] == pytest.approx(0.5) and res["num_stimuli"] == 3 and res["excluded"] == 1
    assert (res["shape_decisions"], res["texture_decisions"], res["other_decisions"]) == (1, 1, 1)
    assert res["shape_accuracy"] == pytest.approx(1 / 4)          # model-vs-human: over all stimuli
    assert res["per_category"]["cat"]["shape_bias"] == 0.0 and res["per_category"]["dog"]["shape_bias"] == 1.0
    (tmp_path / "cat" / "cat4-zebra1.png").write_bytes(b"")
    with pytest.raises(RobustvitError, match="texture category"):
        create_suite(f"shape_bias:stimuli={tmp_path}").dataset(ctx_for(fake_model()))


def test_shape_bias_needs_stimuli_for_imagenet_models(tiny_vit):
    with pytest.raises(RobustvitError, match="stimuli="):
        create_suite("shape_bias").dataset(ctx_for(fake_model()))
    with pytest.raises(RobustvitError, match="stimuli="):
        create_suite("shape_bias").dataset(ctx_for(tiny_vit, data_spec="cifar10:test"))


class PatchOracle(nn.Module):
    """Predicts class 0 while its top-left 4×4 patch is intact (all 0.5), else class 1."""

    def forward(self, x):
        intact = ((x[:, :, :4, :4] - 0.5).abs() < 1e-6).flatten(1).all(1)
        return torch.stack([intact.float(), (~intact).float()], 1)


def test_patch_occlusion_accuracy_is_the_chance_of_sparing_a_patch():
    model = Normalized(PatchOracle(), ModelSpec("oracle", 2, (3, 16, 16), (0, 0, 0), (1, 1, 1), patch_size=4)).eval()
    suite = create_suite("patch_occlusion:rhos=0+0.25+1:masks=8")
    ctx = ctx_for(model)
    x, y = torch.full((300, 3, 16, 16), 0.5), torch.zeros(300, dtype=torch.long)
    stats = {p: suite.run(ctx, p, Batch(x, y, torch.arange(300), torch.Generator().manual_seed(0)))
             for p in suite.parts(ctx)}
    res = suite.finalize(ctx, stats)
    assert res["clean_accuracy"] == 1.0 and res["num_patches"] == 16 and res["patch_size"] == 4
    assert res["per_rho"]["0"]["min"] == 1.0 and res["per_rho"]["1"]["max"] == 0.0
    e = res["per_rho"]["0.25"]                                    # 4 of 16 patches: spared w.p. 12/16
    assert e["mean_accuracy"] == pytest.approx(0.75, abs=0.04) and e["occluded_patches"] == 4
    assert e["min"] <= e["mean"] <= e["max"] and e["min"] < e["max"] and len(e["per_mask"]) == 8
    drop = create_suite("patch_occlusion:rhos=0.25:masks=2:mode=drop")
    assert drop.run(ctx, "0.25", Batch(x, y, torch.arange(300), torch.Generator().manual_seed(0)))["n"] == 300


@pytest.mark.parametrize("spec,msg", [("patch_occlusion:rhos=0.1+x", "rhos"), ("patch_occlusion:rhos=1.5", "rhos"),
                                      ("patch_occlusion:mode=blur", "mode"), ("patch_occlusion:masks=0", "masks")])
def test_patch_occlusion_option_errors(spec, msg):
    with pytest.raises(RobustvitError, match=msg):
        create_suite(spec)


def test_runner_end_to_end_on_synthshapes(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=1, num_heads=2, img_size=16, num_classes=10).eval()
    ck = str(save_checkpoint(m, tmp_path / "ck"))
    run_eval(EvalConfig(models=[ck], data="synthshapes:test,count=20,size=16", out=str(tmp_path / "e"),
                        suites=["patch_occlusion:rhos=0.5:masks=2", "shape_bias:limit=30"], batch_size=8,
                        device="cpu", progress=False))
    r = json.loads((tmp_path / "e" / "results.json").read_text())["suites"]
    occ, sb = r["patch_occlusion:rhos=0.5:masks=2"], r["shape_bias:limit=30"]
    assert occ["num_images"] == 20 and occ["rhos"] == [0.5] and set(occ["per_rho"]) == {"0.5"}
    assert sb["num_stimuli"] == 30 and sb["excluded"] == 0 and len(sb["categories"]) == 10
    assert sb["shape_decisions"] + sb["texture_decisions"] + sb["other_decisions"] == 30
    from robustvit.report import load_results, write_report
    md, _ = write_report(load_results([tmp_path / "e"]), tmp_path / "rep")
    text = md.read_text()
    assert "Patch occlusion" in text and "Shape bias" in text and len(list((tmp_path / "rep" / "figures").glob("*.png"))) >= 2
