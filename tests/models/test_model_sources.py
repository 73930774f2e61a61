"""Model sources (``--model PREFIX:NAME``): the registry, RobustBench's zoo and Hugging Face classifiers, offline.

RobustBench: a checkpoint of one of the zoo's own architectures (``cifar10/Linf/Ding2020MMA``, a WRN-28-4, the
smallest L∞ CIFAR-10 model), random non-trivial weights saved in RobustBench's format and layout; Hugging Face: tiny
ViT / DeiT / Swin / ConvNeXt built from configs and saved with ``save_pretrained``."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
import torch

from robustvit.cli import main
from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import build_model
from robustvit.models.sources import MODEL_SOURCES, split_source

RB_NAME = "cifar10/Linf/Ding2020MMA"
DATA = "synthshapes:test,count=8,size=32"


def test_registry_knows_the_sources_and_leaves_other_names_alone():
    assert {"tv", "robustbench", "hf"} <= set(MODEL_SOURCES.list())
    assert split_source("hf:google/vit-base-patch16-224") == ("hf", "google/vit-base-patch16-224")
    assert split_source("hf-hub:timm/vit_tiny_patch16_224") is None          # timm's own prefix
    assert build_model("resnet_cifar18").spec.architecture == "resnet_cifar18"
    with pytest.raises(RobustvitError, match="--model-dir applies to robustbench: and hf:"):
        build_model("resnet_cifar18", model_dir="models")
    with pytest.raises(RobustvitError, match="names no model"):
        build_model("hf:")


# ------------------------------------------------------------------------------------------------- RobustBench
@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """(models dir, the architecture with the saved weights, the checkpoint file)."""
    pytest.importorskip("geotorch", reason="robustbench's zoo needs pip install 'robustvit[robustbench]'")
    if __import__("importlib").util.find_spec("robustbench") is None:
        pytest.skip("robustbench is not installed (pip install --no-deps robustbench)")
    from robustvit.models.sources.robustbench_zoo import robustbench_utils

    utils = robustbench_utils()
    net = utils.all_models[utils.BenchmarkDataset("cifar10")][utils.ThreatModel("Linf")]["Ding2020MMA"]["model"]()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
    root = tmp_path_factory.mktemp("rb")
    folder = root / "models" / "cifar10" / "Linf"
    folder.mkdir(parents=True)
    ckpt = folder / "Ding2020MMA.pt"     # as RobustBench's checkpoints: {"state_dict": {"module.…": tensor}}
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, ckpt)
    info = root / "model_info" / "cifar10" / "Linf"
    info.mkdir(parents=True)
    (info / "Ding2020MMA.json").write_text(json.dumps({"clean_acc": "84.36", "autoattack_acc": "41.44",
                                                       "eps": "8/255"}))
    return root / "models", net.eval(), ckpt


def test_robustbench_eval_is_the_zoo_architecture_with_its_weights(zoo, tmp_path, capsys):
    models, net, ckpt = zoo
    spec = f"robustbench:{RB_NAME}"
    m = build_model(spec, model_dir=str(models))
    x = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = net(x)                           # the zoo's forward on the [0, 1] image: no normalisation added
        assert want.std() > 0.01
        torch.testing.assert_close(m(x), want, rtol=0, atol=0)
    assert m.spec.preprocessing() == {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bilinear",
                                      "mean": [0.0] * 3, "std": [1.0] * 3}

    out = tmp_path / "out"
    assert main(["eval", "--model", spec, "--model-dir", str(models), "--data", DATA, "--suite", "clean",
                 "--out", str(out), "--no-progress", "--device", "cpu", "--workers", "0"]) == 0
    res = json.loads((out / "results.json").read_text())
    rec = res["model"]
    assert rec["name"] == spec and rec["source"] == spec
    assert rec["weights"]["sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()
    assert rec["weights"]["source"] == f"file:{ckpt}" and rec["pretrained"] is True
    assert rec["reported"]["clean_acc"] == pytest.approx(0.8436) and rec["reported"]["autoattack_acc"] == pytest.approx(0.4144)
    from robustvit.data import create_dataset

    ds = create_dataset(DATA)
    xs, ys = ds.get_batch(torch.arange(len(ds)))
    with torch.no_grad():
        top1 = (net(xs).argmax(1) == ys).float().mean().item()
    assert res["suites"]["clean"]["top1"] == pytest.approx(top1)

    from robustvit.leaderboard import format_rows, leaderboard

    rows = leaderboard([out], fmt="md")
    assert rows[0]["reported_clean"] == pytest.approx(0.8436) and rows[0]["reported_autoattack"] == pytest.approx(0.4144)
    linf = {**rows[0], "threat_model": "Linf", "eps": 8 / 255}          # as a row of an attack suite's run
    entry = json.loads(format_rows([linf], "json"))[0]
    assert entry["reported_autoattack"] == "41.44" and entry["reported_clean"] == "84.36"
    from robustvit.report.scorecard import reported_cells

    run = json.loads((out / "results.json").read_text())
    assert reported_cells(run, {"threat_model": "Linf", "eps": 8 / 255})["reported_autoattack"] == pytest.approx(0.4144)
    assert reported_cells(run, {"threat_model": "L2", "eps": 0.5}) == {"reported_clean": pytest.approx(0.8436)}
    cols = next(csv.DictReader(io.StringIO(format_rows(rows, "csv"))))
    assert float(cols["reported_autoattack"]) == pytest.approx(0.4144)
    from robustvit.report.load import load_run
    from robustvit.report.scorecard import scorecard_section

    lines = scorecard_section([load_run(out)]).markdown.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| model")):]
    head = [h.strip() for h in table[0].strip("|").split("|")]
    cells = dict(zip(head, (c.strip() for c in table[2].strip("|").split("|"))))
    assert cells["reported clean (%)"] == "84.4" and cells["reported AutoAttack (%)"] == "41.4"


def test_robustbench_missing_weights_are_one_line_naming_model_dir(zoo, tmp_path, monkeypatch, capsys):
    from robustvit.models.sources.robustbench_zoo import robustbench_utils

    def offline(*args, **kwargs):
        raise ConnectionError("no network")
    monkeypatch.setattr(robustbench_utils(), "download_gdrive_new", offline)
    code = main(["eval", "--model", f"robustbench:{RB_NAME}", "--model-dir", str(tmp_path / "none"), "--data", DATA,
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--model-dir" in err and "Ding2020MMA.pt" in err and len(err.splitlines()) == 1
    with pytest.raises(RobustvitError, match="did you mean Ding2020MMA"):
        build_model("robustbench:cifar10/Linf/Ding2020MM", model_dir=str(zoo[0]))
    with pytest.raises(RobustvitError, match="robustbench:<dataset>/<threat_model>/<name>"):
        build_model("robustbench:Ding2020MMA")


# ------------------------------------------------------------------------------------------------- Hugging Face
def _hf_model(kind: str, folder):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    small = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, num_labels=10)
    if kind == "vit":
        net, proc = T.ViTForImageClassification(T.ViTConfig(**small)), T.ViTImageProcessor(size={"height": 32, "width": 32})
    elif kind == "deit":
        net = T.DeiTForImageClassification(T.DeiTConfig(**small))
        proc = T.DeiTImageProcessor(size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32},
                                    image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.25, 0.3])
    elif kind == "swin":
        net = T.SwinForImageClassification(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                        num_heads=[1, 2], window_size=4, num_labels=10))
        proc = T.ViTImageProcessor(size={"height": 32, "width": 32}, resample=3)
    else:
        net = T.ConvNextForImageClassification(T.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
                                                                num_labels=10))
        proc = T.ConvNextImageProcessor(size={"shortest_edge": 32}, crop_pct=0.875)
    net.config.id2label = {i: f"shape{i}" for i in range(10)}
    net.save_pretrained(folder)
    proc.save_pretrained(folder)
    return net.eval(), proc


HF_PREP = {"vit": (32, 1.0, "bilinear"), "deit": (32, 32 / 36, "bicubic"), "swin": (32, 1.0, "bicubic"),
           "convnext": (32, 0.875, "bicubic")}


@pytest.mark.parametrize("kind", sorted(HF_PREP))
def test_hf_model_is_the_transformers_forward_with_its_processor(kind, tmp_path):
    net, proc = _hf_model(kind, tmp_path / kind)
    m = build_model(f"hf:{tmp_path / kind}")
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    images = [(255 * im).round().byte().permute(1, 2, 0).numpy() for im in x]     # uint8 HWC: what processors read
    pixels = proc(images, do_resize=False, do_center_crop=False, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        want = net(pixel_values=pixels).logits               # the processor's own rescale + normalisation
        assert want.std() > 1e-3
        torch.testing.assert_close(m((255 * x).round() / 255), want, rtol=1e-4, atol=1e-5)
    size, crop_pct, interpolation = HF_PREP[kind]
    assert (m.spec.image_size, m.spec.crop_pct, m.spec.interpolation) == (size, pytest.approx(crop_pct), interpolation)
    assert m.spec.class_names == [f"shape{i}" for i in range(10)] and m.spec.family == kind
    assert m.weights["sha256"] == hashlib.sha256((tmp_path / kind / "model.safetensors").read_bytes()).hexdigest()


def test_hf_eval_and_analyze_offline(tmp_path, capsys):
    _hf_model("vit", tmp_path / "tiny_vit")
    out = tmp_path / "out"
    assert main(["eval", "--model", f"hf:{tmp_path / 'tiny_vit'}", "--data", DATA, "--suite", "clean", "--out",
                 str(out), "--no-progress", "--device", "cpu", "--workers", "0"]) == 0
    rec = json.loads((out / "results.json").read_text())["model"]
    assert rec["name"] == "hf:tiny_vit" and rec["source"] == f"hf:{tmp_path / 'tiny_vit'}"
    assert rec["preprocessing"]["mean"] == [0.5] * 3 and rec["weights"]["processor"]["resize"] == "height_width"
    capsys.readouterr()
    code = main(["analyze", "attention_distance", "--model", f"hf:{tmp_path / 'tiny_vit'}", "--data", DATA,
                 "--out", str(tmp_path / "a"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "probe" in err
    code = main(["eval", "--model", f"hf:{tmp_path / 'missing'}", "--data", DATA, "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no such folder" in err and len(err.splitlines()) == 1


def test_hf_processors_robustvit_cannot_follow_are_refused():
    T = pytest.importorskip("transformers")
    from robustvit.models.sources.huggingface import processor_preprocessing

    assert processor_preprocessing(T.ConvNextImageProcessor(size={"shortest_edge": 384}))["resize"] == "height_width"
    for proc, what in ((T.ViTImageProcessor(size={"height": 32, "width": 48}), "non-square"),
                       (T.ViTImageProcessor(do_rescale=False), "no rescaling")):
        with pytest.raises(RobustvitError, match=what):
            processor_preprocessing(proc)
