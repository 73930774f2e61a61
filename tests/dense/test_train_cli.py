"""``robustvit train --task segment`` then ``robustvit eval --suite seg_clean,…`` through the run engine: the
checkpoint records the task and head, reloads to the same logits, and the runner's numbers equal the Python
helper's."""

import json
from pathlib import Path

import pytest
import torch

from robustvit.cli import main
from robustvit.data import create_dataset
from robustvit.dense import create_segmenter, is_segmenter
from robustvit.training.tasks import crop_flip
from robustvit.evaluation.suites.dense import evaluate_dense
from robustvit.models import create_model


def test_segmenter_shapes_vit_and_cnn() -> None:
    torch.manual_seed(0)
    vit = create_segmenter("vit_cifar_micro", 3, head_channels=8, depth=1, embed_dim=32, num_heads=2).eval()
    cnn = create_segmenter("resnet_cifar18", 3, head="linear").eval()
    x = torch.rand(2, 3, 32, 32)
    assert vit(x).shape == (2, 3, 32, 32) and cnn(x).shape == (2, 3, 32, 32)
    # token i of the ViT lands on grid cell (i // 8, i % 8): features of the patch tokens, in order
    tokens = vit.net.backbone.forward_features((x - vit.mean) / vit.std)
    fmap = vit.net.feature_map((x - vit.mean) / vit.std)
    assert torch.allclose(fmap[:, :, 2, 5], tokens[:, 2 * 8 + 5])
    assert vit.spec.architecture == "segmentation_net" and vit.spec.patch_size == 4 and vit.spec.family == "vit"


def test_crop_flip_moves_image_and_mask_together() -> None:
    g = torch.Generator().manual_seed(0)
    m = torch.randint(0, 5, (6, 8, 8))
    x = m[:, None].float().expand(-1, 3, -1, -1) / 10 + 0.05        # the image encodes its mask
    xc, mc = crop_flip(x, m, 2, True, g)
    inside = mc != 255
    assert torch.allclose(xc[:, 0][inside], mc[inside].float() / 10 + 0.05)
    assert (xc[:, 0][~inside] == 0).all() and (~inside).any()


def test_train_segment_then_eval_through_the_runner(tmp_path: Path) -> None:
    out = tmp_path / "seg"
    rc = main(["train", "--task", "segment", "--model", "vit_cifar_micro", "--data",
               "synthshapes:train,count=32,masks=1", "--out", str(out), "--epochs", "1", "--batch-size", "16",
               "--model-kwargs", '{"head_channels": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}',
               "--device", "cpu"])
    assert rc == 0
    ckpt = out / "checkpoint"
    meta = json.loads((ckpt / "spec.json").read_text())
    assert meta["task"] == "segment" and meta["head"]["name"] == "setr_naive"
    assert meta["spec"]["kwargs"]["backbone"] == "vit_cifar_micro" and meta["spec"]["num_classes"] == 11
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    m1, m2 = create_model(str(ckpt)).eval(), create_model(str(ckpt)).eval()
    assert is_segmenter(m1)
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(m1(x), m2(x)) and m1(x).shape == (2, 11, 32, 32)

    data = "synthshapes:test,count=8,masks=1"
    ev = tmp_path / "ev"
    rc = main(["eval", "--model", str(ckpt), "--data", data, "--suite",
               "seg_clean,seg_corruptions:corruptions=fog:severities=1", "--out", str(ev), "--device", "cpu",
               "--batch-size", "4"])
    assert rc == 0
    res = json.loads((ev / "results.json").read_text())["suites"]
    direct = evaluate_dense(m1, data, ["seg_clean", "seg_corruptions:corruptions=fog:severities=1"], batch_size=4)
    assert res["seg_clean"]["clean_miou"] == pytest.approx(direct["seg_clean"]["clean_miou"])
    key = "seg_corruptions:corruptions=fog:severities=1"
    assert res[key]["miou"]["fog"]["1"] == pytest.approx(direct[key]["miou"]["fog"]["1"])
    assert res[key]["num_images"] == 8


def test_train_segment_refuses_data_without_masks(tmp_path: Path, capsys) -> None:
    rc = main(["train", "--task", "segment", "--model", "vit_cifar_micro", "--data", "synthshapes:train,count=8",
               "--out", str(tmp_path / "x"), "--epochs", "1", "--device", "cpu"])
    assert rc == 2 and "masks=1" in capsys.readouterr().err
