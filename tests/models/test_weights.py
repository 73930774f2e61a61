"""Weights provenance: a timm architecture without weights is flagged, a weights file loads tensors only and
gives identical logits, and results.json records where the weights came from."""

import hashlib
import json

import torch
from safetensors.torch import save_file

from robustvit.cli import main
from robustvit.models import create_model


def test_weights_file_gives_identical_logits_and_is_recorded(tmp_path):
    torch.manual_seed(0)
    src = create_model("resnet18", num_classes=10).eval()
    path = tmp_path / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in src.net.state_dict().items()}, str(path))
    torch.manual_seed(1)                                   # a different random init underneath
    loaded = create_model("resnet18", num_classes=10, checkpoint=path).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(src(x), loaded(x))
    assert loaded.weights == {"pretrained": True, "source": f"file:{path}",
                              "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert src.weights == {"pretrained": False, "source": "random", "random": True,
                           "note": "random weights: the numbers describe an untrained network"}


def test_eval_warns_and_records_random_weights(tmp_path, capsys):
    assert main(["eval", "--model", "vit_cifar_micro", "--data", "synthshapes:test,count=8", "--out",
                 str(tmp_path / "a"), "--no-progress", "--device", "cpu"]) == 0
    assert "robustvit: warning: vit_cifar_micro has random weights" in capsys.readouterr().err
    res = json.loads(next((tmp_path / "a").rglob("results.json")).read_text())
    assert res["model"]["pretrained"] is False and res["model"]["weights"]["source"] == "random"
    assert res["model"]["weights"]["random"] is True and "random weights" in res["model"]["weights"]["note"]
    # the same command again draws other random weights: its units must not join the first run's
    for cmd in (["eval", "--suite", "clean"], ["analyze", "correlation"]):
        out = str(tmp_path / cmd[0])
        args = [*cmd, "--model", "vit_cifar_micro", "--data", "synthshapes:test,count=8", "--out", out,
                "--no-progress", "--device", "cpu"]
        assert main(args) == 0
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "other settings" in err and "random weights, drawn anew by each command" in err, err


def test_weights_id_names_files_and_pretrained_weights_and_digests_random_ones(tmp_path):
    from robustvit.runs import weights_id

    torch.manual_seed(0)
    a = create_model("vit_cifar_micro")
    b = create_model("vit_cifar_micro")                     # the same architecture, other random weights
    assert weights_id(a, "vit_cifar_micro").startswith("random:")
    assert weights_id(a, "vit_cifar_micro") != weights_id(b, "vit_cifar_micro")
    b.load_state_dict(a.state_dict())
    assert weights_id(a, "vit_cifar_micro") == weights_id(b, "vit_cifar_micro")
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in a.net.state_dict().items()}, str(path))
    c = create_model("vit_cifar_micro", checkpoint=path)
    assert weights_id(c, "vit_cifar_micro") == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    c.weights = {"pretrained": True, "source": "timm:vit_cifar_micro"}
    assert weights_id(c, "vit_cifar_micro") == "vit_cifar_micro"     # timm's pretrained weights: the name
    assert weights_id(c, None).startswith("python:")                   # a model object: its digest


def test_eval_with_weights_file_records_source_and_hash(tmp_path):
    m = create_model("vit_cifar_micro", depth=4)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in m.net.state_dict().items()}, str(path))
    assert main(["eval", "--model", "vit_cifar_micro", "--weights", str(path), "--data", "synthshapes:test,count=8",
                 "--out", str(tmp_path / "b"), "--no-progress", "--device", "cpu"]) == 0
    res = json.loads(next((tmp_path / "b").rglob("results.json")).read_text())
    assert res["model"]["pretrained"] is True
    assert res["model"]["weights"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_named_model_refuses_silent_random_weights(tmp_path):
    import pytest

    from robustvit.errors import RobustvitError
    from robustvit.models import save_checkpoint
    from robustvit.models.factory import build_named_model, has_random_weights

    with pytest.raises(RobustvitError) as e:
        build_named_model("resnet18", role="classifier")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("classifier resnet18 would have random weights")
    assert all(s in msg for s in ("pretrained=1", "weights=FILE", "checkpoint folder", "allow_random=1"))
    rnd = build_named_model("resnet18", num_classes=10, allow_random=True, role="classifier")
    assert rnd.weights["source"] == "random" and rnd.weights["random"] is True and has_random_weights(rnd)
    torch.manual_seed(0)
    src = create_model("resnet18", num_classes=10).eval()
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in src.net.state_dict().items()}, str(path))
    save_checkpoint(src, tmp_path / "ck")
    x = torch.rand(2, 3, 32, 32)
    for m in (build_named_model("resnet18", num_classes=10, weights=path, role="classifier"),
              build_named_model(str(tmp_path / "ck"), role="classifier")):
        assert not has_random_weights(m) and m.weights["pretrained"] is True
        with torch.no_grad():
            assert torch.equal(m.eval()(x), src(x))
    with pytest.raises(RobustvitError, match="not both"):
        build_named_model("resnet18", pretrained=True, weights=path)
