"""Comparability decided in one place (``robustvit.protocols``): each mislabel of issue #35 (APGD shown as
AutoAttack, a partial AutoAttack unmarked, a one-corruption ``corruptions_acc`` comparable), per-cell image counts,
Wilson intervals and labels (#33), and the RobustBench export rendered by RobustBench's own leaderboard code."""

import importlib.util
import json
import math
import re
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures import write_run  # noqa: E402

from robustvit.leaderboard import format_rows, leaderboard, robustbench_entries  # noqa: E402
from robustvit.protocols import BENCHMARK_CORRUPTIONS, STANDARD_AUTOATTACK, assess, attach, wilson_interval  # noqa: E402
from robustvit.report.headline import rows as headline_rows  # noqa: E402
from robustvit.report.load import normalise  # noqa: E402
from robustvit.report.scorecard import scorecard_section  # noqa: E402
from robustvit.runs.results import results_document  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src" / "robustvit"


def attack(name, acc, n=10_000, eps=8 / 255, norm="linf", **kw):
    res = {"attack": name, "eps": eps, "norm": norm, "eps_source": "option", "accuracy": acc, "clean_accuracy": 0.9,
           "num_images": n, "flags": {}}
    if name == "autoattack":
        res.update(version="standard", attacks=list(STANDARD_AUTOATTACK), reduced=False, n_target_classes=9,
                   per_attack={m: acc for m in STANDARD_AUTOATTACK})
    return {**res, **kw}


def corruptions(mean, names=BENCHMARK_CORRUPTIONS, severities=(1, 2, 3, 4, 5), n=10_000, source="/data/CIFAR-10-C"):
    return {"corruptions": list(names), "severities": list(severities), "mean_accuracy": mean, "num_images": n,
            "source": source, "mce": None, "clean_accuracy": 0.9}


def run(name, suites, spec="cifar10:test", n=10_000, subset=None):
    return {"schema": 2, "kind": "eval", "run": {"finished": "2026-01-01"}, "notes": [], "comparable": True,
            "model": {"name": name, "params": 1_000_000, "weights": {"source": "checkpoint:x", "sha256": name}},
            "data": {"spec": spec, "num_images": n, "subset": subset},
            "suites": {"clean": {"top1": 0.9, "num_images": n}, **suites}}


def one_row(doc, threat="Linf"):
    return next(r for r in headline_rows(normalise(json.loads(json.dumps(doc)))) if r["threat_model"] == threat)


# ---- the mislabels of #35 ---------------------------------------------------------------------------------------
def test_apgd_only_run_is_not_an_autoattack_number():
    row = one_row(run("m", {"apgd:steps=5": attack("apgd_ce", 0.05, steps=5)}))
    assert row["autoattack"] is None and row["apgd"] == 0.05            # its own column
    written, skipped = robustbench_entries([row])
    assert written == [] and any("no AutoAttack number" in s for s in skipped)


def test_partial_autoattack_is_labelled_and_not_comparable():
    aa = attack("autoattack", 0.4, version="custom", attacks=["apgd_ce"])
    row = one_row(run("m", {"autoattack:attacks=apgd_ce": aa}))
    assert row["autoattack"] == 0.4 and row["comparable"] is False
    assert "partial AutoAttack: attacks=apgd_ce (standard: apgd_ce+apgd_t+fab_t+square)" in row["labels"]
    assert robustbench_entries([row])[0] == []
    full = one_row(run("m", {"autoattack": attack("autoattack", 0.4)}))
    assert full["comparable"] is True and full["labels"] == "comparable"


def test_one_corruption_mean_is_labelled_with_its_counts():
    row = one_row(run("m", {"corruptions:corruptions=gaussian_noise:severities=3":
                            corruptions(0.3, ["gaussian_noise"], [3], source=None)}), threat="none")
    assert row["corruption_mean"] == 0.3 and row["comparable"] is False
    assert "1 of 15 corruptions × 1 of 5 severities" in row["labels"] and "approximate" in row["labels"]
    entries = json.loads(format_rows([row], "json"))
    assert entries[0]["threat_model"] == "corruptions" and entries[0]["comparable"] is False
    assert robustbench_entries([row])[0] == []


def test_reduced_attack_label_is_per_suite_not_per_run():
    doc = run("m", {"autoattack": attack("autoattack", 0.3, eps=4 / 255, overrides={"steps": 5}, reduced=True),
                    "pgd:eps=1/255": attack("pgd", 0.6, eps=1 / 255, n=200, steps=10)})
    rows = {round(r["eps"] * 255): r for r in headline_rows(normalise(doc))}
    assert "reduced AutoAttack: steps=5" in rows[4]["labels"] and "reduced" not in rows[1]["labels"]
    assert rows[1]["comparable"] is True


# ---- #33: counts and intervals per cell -------------------------------------------------------------------------
@pytest.mark.parametrize("p, n", [(0.15, 20), (0.5, 100), (0.0, 50), (0.97, 1000)])
def test_wilson_interval_inverts_the_score_test(p, n):
    z = 1.959964
    lo, hi = wilson_interval(p, n)
    for p0 in (lo, hi):        # the bounds are exactly where the score statistic equals z (Wilson 1927)
        if 0 < p0 < 1:
            assert abs(abs(p - p0) / math.sqrt(p0 * (1 - p0) / n) - z) < 1e-6
    assert lo <= p <= hi and wilson_interval(p, None) is None


def test_cells_show_their_own_image_counts_and_intervals():
    doc = run("vit", {"autoattack": attack("autoattack", 0.15, n=20, eps=4 / 255, overrides={"steps": 5}, reduced=True),
                      "pgd": attack("pgd", 0.135, n=200, eps=4 / 255)}, n=200,
              subset={"method": "stratified", "seed": 0, "num_images": 200, "num_classes": 10, "of": 10_000})
    row = one_row(doc)
    assert (row["autoattack_n"], row["pgd_n"]) == (20, 200)
    assert row["autoattack_ci95"] == pytest.approx(wilson_interval(0.15, 20), abs=1e-6)
    assert "attacks on different images: PGD n=200, AutoAttack n=20" in row["labels"]
    md = scorecard_section([normalise(doc)]).markdown
    assert "15.0 (−75.0) [5.2, 36.0] (n=20)" in md and "13.5 (−76.5) [9.4, 18.9] (n=200)" in md and "Wilson" in md
    csv_head = format_rows([row], "csv").splitlines()[0].split(",")
    assert {"autoattack_n", "autoattack_ci95", "pgd_n", "pgd_ci95"} <= set(csv_head)


# ---- one place ------------------------------------------------------------------------------------------------
def test_results_document_records_each_numbers_protocol():
    suites = {"autoattack:attacks=apgd_ce": attack("autoattack", 0.4, version="custom", attacks=["apgd_ce"]),
              "clean": {"top1": 0.9, "num_images": 10_000}}
    doc = results_document("eval", run={}, model={"name": "m"}, data={"spec": "cifar10:test", "num_images": 10_000},
                           payload=suites)
    p = doc["suites"]["autoattack:attacks=apgd_ce"]["protocol"]
    assert p["name"] == "robustbench:cifar10:Linf" and p["comparable"] is False and p["deviations"]
    assert doc["suites"]["clean"]["protocol"]["comparable"] is True and doc["comparable"] is False


def test_certification_reduced_and_unknown_facts():
    p = assess("certify", {"settings": {"n": 1000, "n0": 100, "alpha": 0.001}}, {"data": {"spec": "cifar10:test"}})
    assert p["name"] == "randomized-smoothing" and p["deviations"] == ["reduced: n = 1000 (Cohen et al.: 100000)"]
    q = assess("patch_occlusion", {"per_rho": {}}, {"data": {}})
    assert q["comparable"] is False and q["deviations"][0].startswith("unknown occlusion-noise space")
    assert attach({"suites": {}, "notes": []})["comparable"] is True
    fan = {"corruptions": [f"c{i}" for i in range(16)], "severities": [1, 2, 3, 4, 5], "size_scaling": False}
    assert assess("seg_corruptions", fan, {"data": {"spec": "cityscapes:/d"}})["name"] == "cityscapes-c"
    coco = assess("det_corruptions", {**fan, "corruptions": fan["corruptions"][:15], "size_scaling": True},
                  {"data": {"spec": "coco:/d"}})
    assert coco["name"] == "coco-c" and coco["deviations"] == [
        "corruption strength scaled with image size (protocol: imagecorruptions unscaled)", "15 corruptions (FAN: 16)"]
    train = assess("autoattack", attack("autoattack", 0.4), {"data": {"spec": "cifar10:train"}})
    assert train["deviations"] == ["data 'cifar10:train' is a training split, not the test set"]


def test_comparability_is_decided_only_in_protocols():
    """The facts that decide comparability (reduced settings, versions, approximate protocols, counts of what
    ran) are read by robustvit.protocols only; the report, leaderboard and study read its entries."""
    facts = re.compile(r"\"reduced\"|reduced_grid|mce_protocol|\"approximate\"|comparable=not|"
                       r"\"comparable\": not|\"comparable\"\] = not")
    files = [SRC / "leaderboard.py", SRC / "study.py", *sorted((SRC / "report").rglob("*.py"))]
    bad = [f"{f.name}: {line.strip()}" for f in files for line in f.read_text().splitlines() if facts.search(line)]
    assert bad == []


#: ``comparable`` set as a key, keyword or item anywhere in ``src/``.
ASSIGNED = re.compile(r"\bcomparable\s*=[^=]|[\"']comparable[\"']\s*\]\s*=[^=]|[\"']comparable[\"']\s*:")


def test_no_module_but_protocols_sets_comparable():
    """#35's "grep finds comparability decided nowhere but the protocols module", over all of ``src/``: outside
    robustvit/protocols.py a ``comparable`` is only ever copied or combined from recorded entries (the line or
    the one before reads ``.get("comparable")``) or unknown (None)."""
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        if f.name == "protocols.py" and f.parent == SRC:
            continue
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if not ASSIGNED.search(line) or line.lstrip().startswith("#"):
                continue
            derived = 'get("comparable")' in line or (i and 'get("comparable")' in lines[i - 1])
            if not (derived or '"comparable": None' in line):
                bad.append(f"{f.relative_to(SRC)}:{i + 1}: {line.strip()}")
    assert bad == []
    assert ASSIGNED.search('doc["comparable"] = not notes') and ASSIGNED.search("meta.update(comparable=x)")


def test_run_notes_and_analysis_settings_are_decided_from_recorded_facts():
    """The run-level notes (a sample of the data, a suite's own sample, random weights) and the analyses' paper
    settings are computed by protocols from what the run recorded, with the texts the modules used to write."""
    from robustvit.protocols import analysis_protocol, run_deviations

    sample = {"method": "stratified", "seed": 3, "num_images": 8, "num_classes": 4, "of": 40}
    doc = {"kind": "eval", "data": {"subset": sample}, "model": {"weights": {"source": "random", "note": "random!"}},
           "suites": {"pgd": {"subset": None}, "spatial:limit=4": {"subset": {**sample, "num_images": 4,
                                                                              "method": "first"}}}}
    assert run_deviations(doc) == [
        "8 of 40 images (a class-stratified sample, seed 3, 4 classes), not the whole data set or a published subset",
        "spatial:limit=4: 4 of 40 images (the first images, 4 classes), not the whole data set or a published subset",
        "random!"]
    assert run_deviations({"data": {"subset": {**sample, "method": "file"}}, "model": {}}) == []
    run = {"data": {}, "model": {}}
    fan = analysis_protocol("grouping", {"sigma": 1.0, "threshold_kind": "absolute", "notes": []}, run)
    assert fan == {"name": "grouping", "comparable": True, "deviations": []}
    mild = analysis_protocol("grouping", {"sigma": 0.1, "threshold_kind": "absolute"}, run)
    assert mild["deviations"] == ["noise σ = 0.1 (FAN writes the noise x ~ N(0, 1): σ = 1)"]
    stab = {"noise_space": "pixel", "rho": 0.1, "num_masks": 100, "occluded_patches": 1, "num_patches": 16,
            "options": {"patch_size": 0}, "model_patch_size": 4, "num_images": 10, "paper_images": None}
    assert analysis_protocol("attention_stability", stab, run)["deviations"] == [
        "occlusion noise U[0, 1) in pixel space (RSPC: in the normalised input space)"]
    few = {**stab, "noise_space": "normalized", "rho": 0.01, "occluded_patches": 0, "options": {"patch_size": 8}}
    assert analysis_protocol("attention_stability", few, run)["deviations"] == [
        "rho = 0.01 of 16 patches rounds to none occluded", "rho = 0.01 of the patches occluded (AFAT: 0.1)",
        "occluded 8-px patches, not the model's 4-px patches"]
    corr = analysis_protocol("correlation", {"num_images": 100, "paper_images": 4096, "level": "block",
                                             "notes": ["no CLS token"]}, run)
    assert corr["deviations"] == ["100 images (the paper used 4096)", "no CLS token"]
    assert analysis_protocol("attention_stability", {"rho": 0.1}, run)["deviations"] == [
        "unknown occlusion-noise space (noise_space not recorded)"]                    # never assumed
    assert assess("patch_occlusion", {"mode": "drop", "noise_space": None}, run)["deviations"] == [
        "patches zeroed (mode=drop; AFAT: noise)"]


# ---- RobustBench's own code reads the export -----------------------------------------------------------------
def robustbench_template(monkeypatch):
    """``robustbench.leaderboard.template`` without running the package's ``__init__`` (it loads the model zoo and
    pkg_resources); the leaderboard code, ``ModelInfo`` and the enums are RobustBench's own.

    The PyPI wheel of robustbench does not ship ``leaderboard/leaderboard.html.j2`` (only its GitHub repository
    has it), so when that file is absent the test gives jinja a minimal stand-in template with one row per model
    (name, clean accuracy, the leaderboard's accuracy field, ε). Everything else ``generate_leaderboard`` does is
    RobustBench's code and runs here: the ``BenchmarkDataset`` / ``ThreatModel`` enums, ``ACC_FIELDS``, reading
    ``<dir>/<dataset>/<threat_model>/*.json``, sorting by ``float(acc)`` and rendering; ``loader_calls`` records
    that it asked for its own package template."""
    spec = importlib.util.find_spec("robustbench")
    if spec is None or spec.origin is None:
        pytest.skip("robustbench is not installed (`pip install --no-deps robustbench`; `make test` installs it)")
    root = Path(spec.origin).parent
    for name, path in (("robustbench", root), ("robustbench.model_zoo", root / "model_zoo")):
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]
        monkeypatch.setitem(sys.modules, name, mod)
    sys.modules["robustbench.model_zoo"].model_dicts = {}                # type: ignore[attr-defined]
    for sub in ("robustbench.leaderboard", "robustbench.leaderboard.template", "robustbench.utils",
                "robustbench.model_zoo.enums"):
        monkeypatch.delitem(sys.modules, sub, raising=False)
    from robustbench.leaderboard import template
    from robustbench.utils import ModelInfo

    loader_calls: list[tuple] = []
    if not (root / "leaderboard" / "leaderboard.html.j2").is_file():    # the PyPI wheel ships no template
        import jinja2
        row = ("{% for model in models %}<tr><td>{{ model.name }}</td><td>{{ model.clean_acc }}%</td>"
               "<td>{{ model[acc_field] }}%</td><td>{{ model.eps }}</td></tr>{% endfor %}")

        def stand_in(*args):
            loader_calls.append(args)
            return jinja2.DictLoader({"leaderboard.html.j2": f"<table>{row}</table>"})
        monkeypatch.setattr(template, "PackageLoader", stand_in)
    return template, ModelInfo, loader_calls


def test_robustbench_export_renders_in_robustbench(monkeypatch, tmp_path, capsys):
    template, model_info, loader_calls = robustbench_template(monkeypatch)
    imagenet_c = {**corruptions(0.4, n=50_000, source="/data/ImageNet-C"), "mce": 61.234, "mce_protocol": "imagenet-c"}
    folders = [
        write_run(tmp_path / "a", run("vit_a", {"autoattack": attack("autoattack", 0.41234),
                                                "corruptions": corruptions(0.8)})),
        write_run(tmp_path / "b", run("vit_b", {"autoattack": attack("autoattack", 0.55, eps=0.5, norm="l2"),
                                                "apgd": attack("apgd_ce", 0.3)})),
        write_run(tmp_path / "c", run("vit_c", {"autoattack": attack("autoattack", 0.2, version="custom",
                                                                     attacks=["apgd_ce"])})),
        write_run(tmp_path / "e", run("vit_e", {"autoattack": attack("autoattack", 0.6)})),
        write_run(tmp_path / "d", run("vit_d", {"autoattack": attack("autoattack", 0.3, eps=4 / 255, n=50_000),
                                                "corruptions": imagenet_c}, spec="imagenet:/val", n=50_000)),
    ]
    out = tmp_path / "rb"
    leaderboard(folders, fmt="robustbench", out=out)
    err = capsys.readouterr().err
    assert re.search(r"not written to RobustBench: vit_c cifar10:test Linf: .*partial AutoAttack: attacks=apgd_ce", err)
    assert len([line for line in err.splitlines() if "vit_c" in line]) == 1
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.json"))
    assert files == ["cifar10/L2/vit_b.json", "cifar10/Linf/vit_a.json", "cifar10/Linf/vit_e.json",
                     "cifar10/corruptions/vit_a.json",
                     "imagenet/Linf/vit_d.json", "imagenet/corruptions/vit_d.json"]
    fields = set(model_info.__dataclass_fields__)
    for f in out.rglob("*.json"):
        entry = json.loads(f.read_text())
        assert set(entry) <= fields and None not in entry.values(), (f, entry)
    a = json.loads((out / "cifar10/Linf/vit_a.json").read_text())
    assert (a["autoattack_acc"], a["clean_acc"], a["eps"], a["dataset"]) == ("41.23", "90.00", "8/255", "cifar10")
    assert json.loads((out / "cifar10/L2/vit_b.json").read_text())["eps"] == "0.5"
    d = json.loads((out / "imagenet/corruptions/vit_d.json").read_text())
    assert d["corruptions_acc"] == "40.00" and d["corruptions_mce"] == "61.23"
    html = template.generate_leaderboard("cifar10", "Linf", str(out))
    assert "vit_a" in html and "41.23%" in html and "vit_c" not in html
    assert html.index("vit_e") < html.index("vit_a")          # RobustBench's sort: float(autoattack_acc), descending
    assert loader_calls in ([], [("robustbench", "leaderboard")])
    assert "80.00%" in template.generate_leaderboard("cifar10", "corruptions", str(out))
    assert "55.00%" in template.generate_leaderboard("cifar10", "L2", str(out))
    assert "40.00%" in template.generate_leaderboard("imagenet", "corruptions", str(out))


def test_size_plot_joins_points_within_a_family_only():
    from robustvit.report.scorecard import size_section

    docs = []
    for name, family, params, clean in (("vit_t", "vit", 5e6, 0.7), ("vit_s", "vit", 2e7, 0.8),
                                        ("resnet18", "resnet", 1e7, 0.6)):
        d = run(name, {})
        d["model"].update(params=params, spec={"family": family})
        d["suites"]["clean"]["top1"] = clean
        docs.append(normalise(d))
    fig = size_section(docs).figures[0].fig
    lines = [ln for ln in fig.axes[0].lines if len(ln.get_xdata())]
    assert sorted((list(ln.get_xdata()), ln.get_linestyle()) for ln in lines) == [([5e6, 2e7], "-"), ([1e7], "None")]


def test_patch_certification_against_the_published_setting_of_its_data():
    lf = {"settings": {"ablation": "column", "size_pixels": 4, "patch_pixels": [2, 5]}}
    p = assess("certify_patch", lf, {"data": {"spec": "cifar10:test"}})
    assert p["name"] == "derandomized-smoothing" and p["comparable"] is True
    block = {"settings": {"ablation": "block", "size_pixels": 12, "patch_pixels": [4]}}
    assert assess("certify_patch", block, {"data": {"spec": "cifar10:test"}})["deviations"] == [
        "block ablation of 12 px (published: column of 4 px)", "patches of [4] px (published: 5×5)"]
    salman = {"settings": {"ablation": "column", "size_pixels": 19, "patch_pixels": [32]}}
    assert assess("certify_patch", salman, {"data": {"spec": "imagenet:/d/val"}})["comparable"] is True
    assert assess("certify_patch", lf, {"data": {"spec": "synthshapes:test"}})["name"] == "none"
