"""The Python API: ``robustvit.evaluate`` / ``analyze`` / ``train`` on names and on module objects."""

import json

import pytest
import timm
import torch
from torch import nn

import robustvit
from robustvit.errors import RobustvitError
from robustvit.runs import validate_results

DATA = "synthshapes:test,count=24,size=32"


def _tiny_timm_vit():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=1, num_heads=2, embed_dim=32,
                             num_classes=10).eval()


def _manual(net, mean, std, n=24):
    from robustvit.data import create_dataset

    x, y = create_dataset(DATA).get_batch(torch.arange(n))
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    with torch.no_grad():
        logits = net((x - m) / s)
    return (logits.argmax(1) == y).float().mean().item(), logits.topk(5, 1).indices.eq(y[:, None]).any(1).float().mean().item()


def test_evaluate_a_timm_module_takes_its_normalisation_from_pretrained_cfg(tmp_path):
    net = _tiny_timm_vit()
    assert tuple(net.pretrained_cfg["mean"]) == (0.5, 0.5, 0.5)       # not ImageNet's: a wrong default would show
    res = robustvit.evaluate(net, data=DATA, suites=["clean"], out=tmp_path / "e", device="cpu", batch_size=10)
    validate_results(res)
    top1, top5 = _manual(net, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert res["suites"]["clean"]["top1"] == pytest.approx(top1) and res["suites"]["clean"]["top5"] == pytest.approx(top5)
    assert res["model"]["source"] == "python:VisionTransformer" and res["model"]["preprocessing"]["mean"] == [0.5] * 3
    assert res["model"]["spec"]["input_size"] == [3, 32, 32] and res["data"]["num_images"] == 24
    assert json.loads((tmp_path / "e" / "results.json").read_text()) == json.loads(json.dumps(res))
    with torch.no_grad():                                             # other weights in the same folder: refused
        net.head.weight.add_(1.0)
    with pytest.raises(RobustvitError, match=r"other settings \(checkpoint\)"):
        robustvit.evaluate(net, data=DATA, out=tmp_path / "e", device="cpu", batch_size=10)


def test_evaluate_a_plain_module_needs_mean_and_std():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    with pytest.raises(RobustvitError, match="give mean= and std=") as e:
        robustvit.evaluate(net, data=DATA)
    assert "\n" not in str(e.value)
    mean, std = (0.2, 0.3, 0.4), (0.5, 0.6, 0.7)
    res = robustvit.evaluate(net, data=DATA, mean=mean, std=std, input_size=32, device="cpu", eps="1/255")
    assert res["suites"]["clean"]["top1"] == pytest.approx(_manual(net, mean, std)[0])
    assert res["model"]["spec"]["num_classes"] == 10 and res["run"]["options"] == {"eps": "1/255"}
    assert res["model"]["preprocessing"]["std"] == pytest.approx(list(std))


def test_evaluate_is_the_facade_function_and_takes_names():
    import robustvit.evaluation.runner as runner
    from robustvit import facade

    assert robustvit.evaluation.runner is runner and robustvit.evaluate is facade.evaluate
    from robustvit.evaluation.suites import list_suites

    assert "clean" in list_suites()
    both = robustvit.evaluate(["vit_cifar_micro", "resnet_cifar18"], data="synthshapes:test,count=8,size=32",
                              suites="clean", device="cpu", seed=1)
    assert set(both) == {"vit_cifar_micro", "resnet_cifar18"} and both["vit_cifar_micro"]["run"]["seed"] == 1


def test_analyze_a_module_returns_the_analysis_results(tmp_path):
    net = _tiny_timm_vit()
    res = robustvit.analyze(net, data=DATA, analyses=["attention_distance"], out=tmp_path, device="cpu", limit=8)
    validate_results(res)
    assert res["kind"] == "analysis" and len(res["analyses"]["attention_distance"]["distance"]) == 1
    assert res["data"]["num_images"] == 8 and (tmp_path / "attention_distance.json").is_file()
    mem = robustvit.analyze(net, data=DATA, analyses="attention_distance", device="cpu", limit=8)     # no folder
    assert mem["analyses"]["attention_distance"]["distance"] == res["analyses"]["attention_distance"]["distance"]


def test_train_from_keywords(tmp_path):
    path = robustvit.train(model="resnet_cifar18", data="synthshapes:train,count=32,size=16", out=str(tmp_path / "r"),
                           epochs=1, batch_size=16, model_kwargs={"width_mult": 0.0625}, device="cpu", progress=False)
    assert (path / "spec.json").is_file()
    with pytest.raises(RobustvitError, match="TrainConfig, a dict or a YAML path"):
        robustvit.train(3)


def test_evaluate_refuses_unknown_keywords_and_takes_suite_as_an_alias(tmp_path):
    with pytest.raises(RobustvitError, match=r"unknown keyword argument 'bogus_option'; valid ones: .*batch_size") as e:
        robustvit.evaluate("vit_cifar_micro", data=DATA, bogus_option=123)
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="not both"):
        robustvit.evaluate("vit_cifar_micro", data=DATA, suites=["clean"], suite="pgd")
    with pytest.raises(RobustvitError, match="crop_pct"):       # a source without the option refuses it
        robustvit.evaluate("vit_cifar_micro", data=DATA, crop_pct=0.5, device="cpu")
    torch.manual_seed(0)
    res = robustvit.evaluate("vit_cifar_micro", data="synthshapes:test,count=8,size=32", suite="clean:limit=4",
                             device="cpu")
    assert list(res["suites"]) == ["clean:limit=4"] and res["suites"]["clean:limit=4"]["num_images"] == 4


def test_crop_and_interpolation_are_applied_and_recorded(tmp_path):
    """#33: ``crop_pct=`` / ``interpolation=`` read the folder as asked, and model.preprocessing records what was
    used (the model's own crop_pct is 1.0 here, the run's 0.5)."""
    from PIL import Image

    from robustvit.data import create_dataset
    from robustvit.data.base import Resize
    from robustvit.models import create_model, save_checkpoint

    g = torch.Generator().manual_seed(0)
    for c in ("a", "b"):
        (tmp_path / "img" / c).mkdir(parents=True)
        for i in range(3):
            px = (torch.rand(48, 40, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(px).save(tmp_path / "img" / c / f"{i}.png")
    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=2).eval()
    ck = str(save_checkpoint(model, tmp_path / "ck"))
    assert model.spec.crop_pct == 1.0
    res = robustvit.evaluate(ck, data=f"folder:{tmp_path / 'img'}", out=tmp_path / "e", device="cpu",
                             crop_pct=0.5, interpolation="bicubic")
    pre = res["model"]["preprocessing"]
    assert pre["crop_pct"] == 0.5 and pre["interpolation"] == "bicubic" and pre["input_size"] == [3, 32, 32]
    x, y = create_dataset(f"folder:{tmp_path / 'img'}", image_size=Resize(32, 0.5, "bicubic")).get_batch(torch.arange(6))
    with torch.no_grad():
        top1 = (model(x).argmax(1) == y).float().mean().item()
    assert res["suites"]["clean"]["top1"] == pytest.approx(top1)
    plain = robustvit.evaluate(ck, data=f"folder:{tmp_path / 'img'}", device="cpu")
    assert plain["model"]["preprocessing"]["crop_pct"] == 1.0


def test_analyze_refuses_unknown_keywords():
    with pytest.raises(RobustvitError, match="unknown keyword argument 'bogus'"):
        robustvit.analyze("vit_cifar_micro", data=DATA, analyses="lesion", bogus=1)
