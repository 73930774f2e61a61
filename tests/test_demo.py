import json

import pytest

from robustvit.corruptions import list_corruptions
from robustvit.demo import DEMO_MODELS, demo_suites, run_demo
from robustvit.evaluation.suites import create_suite, get_suite_class, list_suites


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path):
    results = run_demo(out=tmp_path, quick=True, device="cpu", progress=False)
    assert set(results) == set(DEMO_MODELS)
    for name, dm in DEMO_MODELS.items():
        res = json.loads((tmp_path / name / "results.json").read_text())
        assert res["model"]["spec"]["family"] == dm.family
        for analysis in dm.analyses:   # explain: every planned analysis wrote its JSON
            assert (tmp_path / name / "analysis" / f"{analysis}.json").is_file(), (name, analysis)
        assert (tmp_path / name / "train" / "checkpoint" / "model.safetensors").is_file()
        assert 0.0 <= res["suites"]["clean"]["top1"] <= 1.0
    # the quick plan is too short for the ViT to take off (ViTs start slowly from scratch); the CNN learns
    assert results["resnet_cifar18"]["suites"]["clean"]["top1"] > 0.3
    html = (tmp_path / "report.html").read_text()
    assert all(name in html for name in DEMO_MODELS) and "data:image/png;base64" in html
    # the demo is a study: the scorecard opens the report, the leaderboard lists every model, names as planned
    assert html.index("<table") == html.index("<table id='scorecard'>")
    assert all((tmp_path / f"leaderboard.{f}").is_file() for f in ("md", "csv", "json"))
    board = (tmp_path / "leaderboard.csv").read_text()
    assert all(f"\n{name}," in board for name in DEMO_MODELS)
    for name in DEMO_MODELS:
        assert json.loads((tmp_path / name / "results.json").read_text())["model"]["name"] == name
    assert "figures/training.png" in (tmp_path / "report.md").read_text()      # curves from metrics.jsonl
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# robustvit demo") and "Inside the models" in md
    # the note says how the analyses' images were drawn (run_analyses' default: a stratified sample)
    assert "analyses on a class-stratified sample of 50" in md
    analysed = json.loads((tmp_path / "vit_cifar_demo" / "analysis" / "results.json").read_text())
    assert analysed["data"]["subset"]["method"] == "stratified", analysed["data"]
    # ViT and ResNet perturbations side by side (Bhojanapalli et al. Fig. 5) from the examples the suites saved
    assert "figures/adversarial_examples.png" in md and (tmp_path / "figures" / "adversarial_examples.png").is_file()
    # re-running resumes: nothing is trained or evaluated again, the results are the same
    again = run_demo(out=tmp_path, quick=True, device="cpu", progress=False)
    for name in DEMO_MODELS:
        assert again[name]["suites"]["clean"] == results[name]["suites"]["clean"]
    # …and its note gives the models' whole training time as their runs recorded it, not this (resumed) command's
    seconds = sum(json.loads((tmp_path / name / "train" / "results.json").read_text())["run"]["training_seconds"]
                  for name in DEMO_MODELS)
    assert f"training took {seconds:.0f} s" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("quick", [False, True])
def test_demo_plan_covers_every_suite(quick):
    """The plan is read from the suite classes (``demo``, ``demo_skip``): every public suite is planned or
    skipped with its reason, each planned spec names its own suite, and the expensive suites are capped."""
    specs, skipped = demo_suites(quick)
    public = [n for n in list_suites() if not n.startswith("_")]
    planned = {create_suite(s).name for s in specs}
    assert skipped == [f"{n}: {get_suite_class(n).demo_skip}" for n in public if get_suite_class(n).demo_skip]
    assert planned | {line.split(":")[0] for line in skipped} == set(public) and not planned & {
        line.split(":")[0] for line in skipped}
    for name in public:
        plan = get_suite_class(name).demo
        mine = [s for s in specs if create_suite(s).name == name]
        assert mine == ([] if get_suite_class(name).demo_skip else list(plan[quick] if plan else (name,)))
    assert {"apgd", "transfer", "imagenet_r", "seg_clean", "det_corruptions"} <= {line.split(":")[0] for line in skipped}
    for spec in specs:   # every planned spec parses, and the expensive suites are capped
        suite = create_suite(spec)
        if suite.name not in ("clean", "shape_bias"):
            assert suite.max_images is not None and suite.max_images <= 500, spec
        if suite.name == "corruptions":
            assert suite.names == list_corruptions()
