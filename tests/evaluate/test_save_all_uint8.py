"""#36: ``save=all:save_dtype=uint8`` writes round(x·255) — the values a PNG holds — reloading bit-exact, and
the documented script turns the export into RobustBench's external-evaluation tensor."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from robustvit.attacks import create_attack
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.evaluation.suites.adversarial import chunk_seed
from robustvit.utils import sum_stats

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "robustbench_external.py"


def test_uint8_export_is_png_exact_and_converts_for_robustbench(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 10))
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="test", dataset=None,
                      num_classes=10, device=torch.device("cpu"), seed=0, out_dir=tmp_path)
    suite = create_suite("pgd:eps=8/255:steps=2:save=all:save_dtype=uint8:checks=0")
    batches, stats = [], []
    for c in range(2):
        x = (torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(c)) * 255).round() / 255   # 8-bit data
        with torch.no_grad():
            y = model(x).argmax(1)
        y[0] = (y[0] + 1) % 10
        b = Batch(x, y, torch.arange(6) + 6 * c, torch.Generator().manual_seed(c))
        batches.append(b)
        stats.append(suite.run(ctx, "all", b))
    res = suite.finalize(ctx, {"all": sum_stats(stats)})
    assert res["saved"]["dtype"] == "uint8" and res["saved"]["count"] == 12
    saved = load_file(str(tmp_path / res["saved"]["file"]))["x_adv"]
    assert saved.dtype == torch.uint8 and saved.shape == (12, 3, 8, 8)
    for c, b in enumerate(batches):                       # the attack by hand (the unit's seed), rounded as a PNG
        g = torch.Generator().manual_seed(c)
        atk = create_attack("pgd", model, eps=8 / 255, steps=2, seed=chunk_seed(Batch(b.x, b.y, b.index, g)))
        with torch.no_grad():
            ok = model(b.x).argmax(1) == b.y
        expected = b.x.clone()
        expected[ok] = atk(b.x[ok], b.y[ok])
        assert torch.equal(saved[b.index], (expected * 255).round().to(torch.uint8))
        # …and a PNG of the float example reloads as exactly these values
        buf = io.BytesIO()
        Image.fromarray((expected[1].clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()).save(buf, "PNG")
        png = torch.from_numpy(np.array(Image.open(buf))).permute(2, 0, 1)
        assert torch.equal(png, saved[b.index[1]])
    # within the ε-ball of 8-bit clean images after rounding (ε·255 an integer)
    x_all = torch.cat([b.x for b in batches])
    assert ((saved.float() / 255 - x_all).abs().max() * 255).round() <= 8
    spec = importlib.util.spec_from_file_location("robustbench_external", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "adv.pt"
    assert mod.main([str(tmp_path / res["saved"]["file"]), str(out), "--num-images", "12"]) == 0
    t = torch.load(out)
    assert t.dtype == torch.float32 and torch.equal(t, saved.float() / 255)
    assert mod.main([str(tmp_path / res["saved"]["file"]), str(out), "--num-images", "10000"]) == 2   # not the test set


def test_save_dtype_without_save_all_is_refused():
    with pytest.raises(RobustvitError, match="save_dtype= applies to save=all"):
        create_suite("pgd:save_dtype=uint8")
