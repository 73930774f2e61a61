"""``robustvit.capabilities`` and ``robustvit list models --capabilities``: the static answer agrees with what
actually runs, the probe check catches a wrong probe, and the CLI prints the table / one model's reasons."""

from __future__ import annotations

import pytest
import torch

from families import build, example_input

from robustvit.capabilities import capabilities, probe_error, probe_info, structure
from robustvit.cli import main
from robustvit.models.probe import ProbeOutput

#: Refusals that depend on the data, not on the model, so a static check cannot see them: the suites that read
#: their own data set refuse a 7-class model, and CKA needs chunks of at least 4 images.
DATA_BOUND = {"imagenet_a", "imagenet_r", "imagenet_sketch", "imagenet_v2", "shape_bias",
              "seg_clean", "seg_corruptions", "det_clean", "det_corruptions", "fewshot", "model_vs_human"}   # need their own data


@pytest.mark.parametrize("key", ["vit_gap", "resnet_cifar"])
def test_static_answer_agrees_with_running(key):
    model = build(key)
    static = capabilities(model)
    ran = capabilities(model, run=True, images=4)
    assert static["verified"] is False and ran["verified"] is True
    assert static["probe"]["kind"] == ran["probe"]["kind"] and ran["probe"]["exact"] is True
    for group in ("analyses", "attacks", "suites"):
        assert set(static[group]) == set(ran[group])
        for name, s in static[group].items():
            r = ran[group][name]
            assert s["status"] in ("applies", "refused") and r["status"] in ("ok", "refused"), (name, r)
            if s["status"] == "refused":
                assert r["status"] == "refused", name          # the static check never refuses what runs
            elif name not in DATA_BOUND:
                assert r["status"] == "ok", (name, r["reason"])
        c = ran["counts"][group]
        assert c["ok"] + c["refused"] == len(ran[group]) and c["failed"] == 0 and c["applies"] == 0


def test_cnn_refuses_attention_analyses_in_one_line():
    cap = capabilities(build("resnet_cifar"))
    assert cap["probe"]["kind"] == "BlockProbe" and cap["probe"]["has_class_token"] is False
    for name in ("attention_distance", "attention_maps", "restricted_attention"):
        e = cap["analyses"][name]
        assert e["status"] == "refused" and "\n" not in e["reason"] and "cnn" in e["reason"]
    assert cap["attacks"]["patch_fool"]["status"] == "refused"
    assert cap["attacks"]["pgd"]["status"] == "applies"


@pytest.mark.parametrize("key", ["regnet", "mixer"])
def test_a_model_no_probe_reads_gets_perturbation_semantics_only(key):
    """An "other" model (RegNet: no probe; Mixer: a block probe without attention) runs the analysis that needs
    only its forward and gradients, and refuses the block-wise ones in one line naming it."""
    cap = capabilities(build(key), run=True, images=4)
    ran = {n for n, e in cap["analyses"].items() if e["status"] == "ok"}
    assert ran == {"perturbation_semantics"}, cap["analyses"]
    e = cap["analyses"]["lesion"]
    assert "\n" not in e["reason"] and "for other use: perturbation_semantics" in e["reason"]


def test_structure_reads_prefix_tokens():
    assert structure(build("vit_reg_cls")) == {"has_class_token": True, "num_registers": 4, "num_prefix_tokens": 5}
    assert structure(build("vit_reg_gap")) == {"has_class_token": False, "num_registers": 4, "num_prefix_tokens": 4}
    assert structure(build("deit_distilled"))["num_prefix_tokens"] == 2
    assert structure(build("resnet_cifar"))["num_prefix_tokens"] is None


class _OffProbe:
    """A probe whose logits are off by 1e-3 of their scale: the exactness check must see it."""

    def __init__(self, model) -> None:
        self.model, self.blocks = model, list(model.net.blocks)

    def run(self, x, tokens=True):
        with torch.no_grad():
            y = self.model(x)
        return ProbeOutput(logits=y + 1e-3 * y.abs().max())


def test_probe_error_catches_a_wrong_probe():
    model = build("vit_cifar")
    x = example_input(model)
    assert probe_error(model, _OffProbe(model), x) == pytest.approx(1e-3, rel=1e-3)
    info = probe_info(model, x)
    assert info["kind"] == "ViTProbe" and info["exact"] is True and info["max_rel_error"] <= 1e-4


def test_cli_capabilities_table_and_one_model(capsys):
    assert main(["list", "models", "--capabilities", "vit_cifar_[mt]*"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model") and "vit_cifar_micro" in out and "vit_cifar_tiny" in out
    assert "ViTProbe" in out and "9/9" in out
    assert main(["list", "models", "resnet_cifar18", "--capabilities"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("resnet_cifar18") and "BlockProbe" in out
    assert "✗ attention_distance — analysis attention_distance does not apply to cnn models" in out
    assert main(["list", "attacks", "--capabilities"]) == 2
    assert main(["list", "models", "--capabilities", "no_such_model_*"]) == 2
    assert main(["list", "models", "--capabilities"]) == 2          # every model: refused, narrow the pattern
    assert "models match '*'" in capsys.readouterr().err


def test_docs_generator_renders_a_family(tmp_path):
    """``benchmarks/model_capabilities.py`` (which writes docs/models.md) on one family: the table row, counts
    that add up, the checkpoint table and the command line at the top."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "model_capabilities.py"
    spec = importlib.util.spec_from_file_location("robustvit_model_capabilities", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "models.md"
    assert mod.main(["--only", "vit_gap", "--out", str(out), "--images", "4"]) == 0
    text = out.read_text()
    assert mod.COMMAND in text.splitlines()[2]
    row = next(line for line in text.splitlines() if line.startswith("| vit_gap | `vit_cifar_micro`"))
    assert "| ViTProbe | ✓ | — | 0 | 9/0/0 | 13/0/0 |" in row
    assert "| vit_gap | ✓ | ✓ | ✓ | ✓ |" in text
    assert "| vit_gap | drop | ✓ |" in text                  # the certification section (benchmarks/certify_models.py)
    assert "## Failures\n\nNone." in text
