"""The shared checker over the whole suite registry (as ``tests/attacks/test_registry.py`` for attacks).

Every registered suite that runs offline on a tiny ViT and synthshapes images is run through ``run_eval``:
it finalises to a JSON-serialisable result that records its parsed options, and an interrupted run resumed
from its unit store gives the same results as an uninterrupted one. Every suite refuses a bad option with one
line naming it. Suites that need data or models absent here (dense, shift) are skipped with the reason.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.evaluation.runner import EvalConfig, run_eval
from robustvit.evaluation.suites import create_suite, get_suite_class, list_suites
from robustvit.evaluation.suites.base import SuiteOptions
from robustvit.models import create_model, save_checkpoint
from robustvit.options import option_names, options_dict

DATA = "synthshapes:test,count=12,size=16"
#: Tiny settings for each suite that runs offline (a spec per suite; a test fails when a new offline suite is
#: registered without one, so the checker covers the whole registry).
SPECS: dict[str, str] = {
    "clean": "clean",
    "fgsm": "fgsm:checks=4",
    "pgd": "pgd:steps=2:checks=4:check_queries=5",
    "apgd": "apgd:steps=2:checks=0",
    "apgd_ce": "apgd_ce:steps=2:checks=0", "apgd_dlr": "apgd_dlr:steps=2:checks=0",
    "apgd_t": "apgd_t:steps=2:n_target_classes=2:checks=0", "fab": "fab:steps=2:restarts=1:checks=0",
    "fab_t": "fab_t:steps=2:n_target_classes=2:checks=0", "square": "square:n_queries=5:checks=0",
    "targeted_pgd": "targeted_pgd:steps=2:checks=0",
    "fmn": "fmn:steps=2:checks=0", "min_norm": "min_norm:steps=2",
    "autoattack": "autoattack:steps=2:n_queries=3:n_target_classes=2:checks=0",
    "spatial": "spatial:translations=2:rotations=2:checks=0",
    "patch_fool": "patch_fool:steps=2:checks=0",
    "transfer": "transfer:steps=1",
    "corruptions": "corruptions:corruptions=gaussian_noise+contrast:severities=1",
    "perturbations": "perturbations:perturbations=gaussian_noise+translate",
    "patch_occlusion": "patch_occlusion:rhos=0.25:masks=2",
    "shape_bias": "shape_bias:limit=6",
    "fewshot": "fewshot:shots=1:draws=2",
    "certify": "certify:n0=4:n=16:batch=64",
    "certify_patch": "certify_patch:size=4:patch=2:stride=8",
}
#: Suites that cannot run here, and why.
OFFLINE_SKIPS = {
    "seg_clean": "needs a segmentation model and masks (tests/dense)",
    "seg_corruptions": "needs a segmentation model and masks (tests/dense)",
    "det_clean": "needs a torchvision detector and boxes (tests/dense)",
    "det_corruptions": "needs a torchvision detector and boxes (tests/dense)",
    "imagenet_r": "needs ImageNet-R on disk",
    "imagenet_a": "needs ImageNet-A on disk",
    "imagenet_sketch": "needs ImageNet-Sketch on disk",
    "imagenet_v2": "needs ImageNet-V2 on disk",
    "model_vs_human": "needs a 1000-class ImageNet model or the 16 categories (tests/shifts)",
}
#: Result keys that measure time (they differ between any two runs).
TIMINGS = {"seconds", "transforms_per_s", "member_seconds", "checks_cost"}
PUBLIC = [n for n in list_suites() if not n.startswith("_")]


class Interrupt(Exception):
    """Raised by a suite's ``run`` after a number of units: a killed run."""


def _run(ck: str, out, specs: list[str]) -> dict:
    cfg = EvalConfig(models=[ck], data=DATA, suites=specs, out=str(out), batch_size=5, device="cpu", progress=False)
    return next(iter(run_eval(cfg).values()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninterrupted run of every offline suite, and one interrupted halfway then resumed."""
    tmp = tmp_path_factory.mktemp("contract")
    torch.manual_seed(0)
    model = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=10).eval()
    ck = str(save_checkpoint(model, tmp / "ck"))
    specs = list(SPECS.values())
    classes = {get_suite_class(s.split(":")[0]) for s in specs}
    calls = {"n": 0, "stop": None}
    originals = {cls: cls.__dict__.get("run") for cls in classes}

    def counting(run):
        def wrapped(self, ctx, part, batch):
            calls["n"] += 1
            if calls["stop"] is not None and calls["n"] > calls["stop"]:
                raise Interrupt()
            return run(self, ctx, part, batch)
        return wrapped

    mp = pytest.MonkeyPatch()
    try:
        for cls in classes:
            mp.setattr(cls, "run", counting(cls.run))
        reference = _run(ck, tmp / "ref", specs)
        total = calls["n"]
        calls["n"], calls["stop"] = 0, total // 2
        with pytest.raises(Interrupt):
            _run(ck, tmp / "resumed", specs)
        calls["n"], calls["stop"] = 0, None
        resumed = _run(ck, tmp / "resumed", specs)
        remaining = calls["n"]
    finally:
        mp.undo()
    assert all(cls.__dict__.get("run") is originals[cls] for cls in classes)
    return {"reference": reference, "resumed": resumed, "total": total, "remaining": remaining,
            "file": json.loads((tmp / "ref" / "results.json").read_text())}


def test_every_suite_is_covered():
    missing = [n for n in PUBLIC if n not in SPECS and n not in OFFLINE_SKIPS]
    assert not missing, f"give these suites tiny settings in SPECS (or a reason in OFFLINE_SKIPS): {missing}"


def test_resume_did_not_redo_stored_units(runs):
    assert 0 < runs["remaining"] < runs["total"]


@pytest.mark.parametrize("name", PUBLIC)
def test_suite_contract(name, runs):
    if name in OFFLINE_SKIPS:
        pytest.skip(OFFLINE_SKIPS[name])
    key = SPECS[name]
    res = runs["reference"]["suites"][key]
    text = json.dumps(res)                                                   # JSON-serialisable
    if not _has_nan(res):
        assert json.loads(text) == runs["file"]["suites"][key]              # and written to results.json as is
    suite = create_suite(key)
    assert res["options"] == options_dict(suite.opts)
    assert set(res["options"]) == set(option_names(type(suite).Options)) >= {"limit", "subset"}
    again = runs["resumed"]["suites"][key]
    strip = lambda r: {k: v for k, v in r.items() if k not in TIMINGS}  # noqa: E731
    assert strip(again) == strip(res), f"{name}: the resumed run differs from the uninterrupted one"


def _has_nan(obj) -> bool:
    if isinstance(obj, float):
        return math.isnan(obj)
    if isinstance(obj, dict):
        return any(_has_nan(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_nan(v) for v in obj)
    return False


@pytest.mark.parametrize("name", PUBLIC)
def test_bad_options_are_one_line_errors(name):
    cases = [(f"{name}:no_such_option=1", ["no_such_option", name]),
             (f"{name}:limit=", ["limit", "no value"]),
             (f"{name}:limit=-3", ["limit", "-3", ">= 1"]),
             (f"{name}:limit=nan", ["limit", "nan"]),
             (f"{name}:subset=random", ["subset", "random", "stratified"])]
    for spec, words in cases:
        with pytest.raises(RobustvitError) as e:
            create_suite(spec)
        msg = str(e.value)
        assert "\n" not in msg and all(w in msg for w in words), (spec, msg)


@pytest.mark.parametrize("name", PUBLIC)
def test_options_dataclass(name):
    cls = get_suite_class(name)
    assert issubclass(cls.Options, SuiteOptions)
    assert not hasattr(cls, "option_names")


@pytest.mark.parametrize("spec, words", [
    ("pgd:eps=nan", ["eps", "finite"]), ("pgd:steps=0", ["steps", ">= 1"]), ("pgd:norm=l3", ["norm", "linf, l2"]),
    ("apgd:attack=pgd", ["attack", "apgd_ce"]), ("patch_occlusion:rhos=0.2+1.5", ["rhos", "<= 1"]),
    ("corruptions:jpeg_quality=0", ["jpeg_quality", ">= 1"]), ("fewshot:l2=-1", ["l2", "> 0"]),
    ("perturbations:difficulty=4", ["difficulty", "<= 3"]), ("autoattack:version=fast", ["version", "standard"]),
    ("transfer:attack=pgdd", ["pgdd", "did you mean"]), ("clean:limit=", ["limit", "no value"]),
])
def test_bad_values_name_the_value(spec, words):
    with pytest.raises(RobustvitError) as e:
        create_suite(spec)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_typed_values_and_aliases():
    s = create_suite("apgd:attack=apgd-t:steps=3:eps=2/255")
    assert s.opts.attack == "apgd_t" and s.opts.steps == 3 and s.opts.eps == pytest.approx(2 / 255)
    assert create_suite("autoattack:attacks=apgd-ce+square").opts.attacks == ["apgd-ce", "square"]
    assert create_suite("patch_occlusion:rhos=0.5+0.1").rhos == (0.1, 0.5)
    assert create_suite("clean:limit=7:subset=first").max_images == 7
