"""The ``corruptions`` suite on the ImageNet-C̄ group, against a by-hand computation."""

import pytest
import torch

from robustvit.corruptions import corrupt
from robustvit.data import create_dataset
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.models import create_model, save_checkpoint
from robustvit.utils import derive_seed

DATA = "synthshapes:test,count=8,size=16"


def test_corruptions_suite_runs_the_imagenet_c_bar_group(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10).eval()
    with torch.no_grad():
        m.model.head.weight.normal_(0, 1.0)
    ckpt = str(save_checkpoint(m, tmp_path / "ck"))
    spec = "corruptions:corruptions=imagenet_c_bar:severities=5"
    res = run_eval(EvalConfig(models=[ckpt], data=DATA, suites=[spec], out=str(tmp_path / "out"), batch_size=8,
                              device="cpu", progress=False))
    r = next(iter(res.values()))["suites"][spec]
    assert len(r["corruptions"]) == 10 and r["preset"] == "cifar" and r["mce"] is None
    m = create_model(ckpt).eval()
    x, y = create_dataset(DATA).get_batch(torch.arange(8))
    with torch.no_grad():
        for name in ("sparkles", "caustic_refraction"):
            correct = 0
            for c in range(1):
                g = torch.Generator().manual_seed(derive_seed(0, spec, f"{name}/5", c))
                correct += int((m(corrupt(x[8 * c:8 * c + 8], name, 5, generator=g)).argmax(1) == y[8 * c:8 * c + 8]).sum())
            assert r["accuracy"][name]["5"] == pytest.approx(correct / 8), name


def test_released_imagenet_c_bar_tree_is_read_from_files(tmp_path):
    from PIL import Image

    from robustvit.data import create_dataset
    for sev in (1, 2):
        for cls, colour in (("n01440764", (10, 20, 30)), ("n01443537", (200, 100, 0))):
            d = tmp_path / "sparkles" / str(sev) / cls
            d.mkdir(parents=True)
            Image.new("RGB", (8, 8), colour).save(d / "ILSVRC2012_val_00000001.png")
    ds = create_dataset(f"imagenet_c:{tmp_path},corruption=sparkles,severity=2")
    x, y = ds.get_batch(torch.arange(len(ds)))
    assert len(ds) == 2 and sorted(y.tolist()) == [0, 1]
    assert x[y == 1][0, :, 0, 0].tolist() == pytest.approx([200 / 255, 100 / 255, 0.0])
