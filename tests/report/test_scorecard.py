"""The scorecard answers "which is more robust, by how much" (#33): runs found below a parent folder, the best cell
of each column marked, the gap to clean beside each robustness number (checked against an independent
computation), the verdict sentence decided by the 95 % intervals, AutoAttack against PGD only on the same images,
the near-chance warning; "Inside the models" filled and the restricted-attention title true for a no-CLS model."""

import csv
import io
import json
import math
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures import eval_result, write_run  # noqa: E402

from robustvit.cli import main  # noqa: E402
from robustvit.errors import RobustvitError  # noqa: E402
from robustvit.leaderboard import format_rows, leaderboard  # noqa: E402
from robustvit.report import load_results, load_runs, write_report  # noqa: E402
from robustvit.report.scorecard import scorecard_section  # noqa: E402
from robustvit.report.sections.analysis import analysis_sections  # noqa: E402


def wilson(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval, written out again (independent of robustvit.protocols)."""
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def run(name: str, clean: float, aa: float, pgd: float, n: int = 1000, aa_n: int | None = None,
        aa_clean: float | None = None, classes: int = 10, **suites):
    """An eval run whose suites record their image counts; AutoAttack's own clean accuracy may differ from the
    clean column (its images are a part of the clean suite's)."""
    res = eval_result(name, clean, {}, suites={
        "pgd:eps=4/255": {"attack": "pgd", "eps": 4 / 255, "norm": "linf", "accuracy": pgd, "clean_accuracy": clean,
                          "num_images": n},
        "autoattack": {"attack": "autoattack", "eps": 4 / 255, "norm": "linf", "accuracy": aa, "num_images": aa_n or n,
                       "clean_accuracy": clean if aa_clean is None else aa_clean}, **suites})
    res["suites"]["clean"]["num_images"] = n
    res["model"]["spec"]["num_classes"] = classes
    return res


@pytest.fixture
def parent(tmp_path):
    """``eval --model vit,cnn --out E`` lays out E/<model>/; one more run two levels down; an analysis beside vit."""
    e = tmp_path / "E"
    write_run(e / "vit", run("vit", 0.80, 0.40, 0.45, spatial={"accuracy": 0.5, "num_images": 1000}))
    lesion = {"clean_accuracy": 0.8, "num_blocks": 3, "single": {"block": [0.2, 0.7, 0.6]}}
    write_run(e / "vit" / "analysis", {"schema": 2, "kind": "analysis", "model": {"name": "vit"}, "data": {}, "run": {},
                                       "comparable": True, "notes": [], "analyses": {"lesion": lesion}})
    write_run(e / "more" / "deep" / "cnn", run("cnn", 0.90, 0.10, 0.12, aa_clean=0.85))
    return e


def test_a_parent_folder_stands_for_every_run_below_it(parent, tmp_path, capsys):
    runs = load_runs([parent])
    assert sorted(r["model"]["name"] for r in runs) == ["cnn", "vit"]            # the analysis joined, not a run
    assert next(r for r in runs if r["model"]["name"] == "vit")["analyses"]["lesion"]["num_blocks"] == 3
    assert {r["model"] for r in leaderboard([parent])} == {"vit", "cnn"}
    assert main(["report", str(parent), "--out", str(tmp_path / "rep")]) == 0
    first = (tmp_path / "rep" / "report.md").read_text().split("## Clean accuracy")[0]
    assert "| vit |" in first and "| cnn |" in first                              # the multi-model scorecard
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(RobustvitError, match="holds no results.json at any depth"):
        load_runs([tmp_path / "empty"])
    capsys.readouterr()
    assert main(["leaderboard", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_best_cell_of_each_column_is_marked(parent, tmp_path):
    sec = scorecard_section(load_results([parent]))
    table = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in sec.markdown.splitlines() if line.startswith("| vit") or line.startswith("| cnn")}
    head = next(line for line in sec.markdown.splitlines() if line.startswith("| model"))
    cols = [c.strip() for c in head.split("|")[2:-1]]
    clean, aa = cols.index("clean (%)"), cols.index("AutoAttack ε=4/255 (%)")
    assert table["cnn"][clean].startswith("**90.0** ▲") and "▲" not in table["vit"][clean]     # higher is better
    assert table["vit"][aa].startswith("**40.0** ▲") and "▲" not in table["cnn"][aa]
    _, html = write_report(load_results([parent]), tmp_path / "rep")
    best = re.findall(r"<td class='best' title='best of this column'><strong>([\d.]+)</strong>", html.read_text())
    assert sorted(best) == ["40.0", "45.0", "90.0"]        # AutoAttack, PGD, clean; spatial: one model, no mark
    md = format_rows(leaderboard([parent]), "md")
    assert "**90.0** ▲" in md and "**40.0** ▲" in md and "**10.0** ▲" not in md


def test_leaderboard_compares_models_not_a_models_rows(tmp_path):
    """A model with two threat models has two leaderboard rows; its clean accuracy is compared with the other
    model's once, never with itself, and marked best on both of its rows."""
    a = run("a", 0.9, 0.4, 0.45, n=500)
    a["suites"]["pgd:eps=1/255"] = {"attack": "pgd", "eps": 1 / 255, "norm": "linf", "accuracy": 0.8, "num_images": 500}
    write_run(tmp_path / "E" / "a", a)
    write_run(tmp_path / "E" / "b", run("b", 0.6, 0.3, 0.35, n=500))
    rows = leaderboard([tmp_path / "E"])
    assert len(rows) == 3
    md = format_rows(rows, "md")
    said = [line for line in md.splitlines() if "clean images" in line]
    assert said == ["**a** is more accurate than **b** on clean images by 30.0 points (95 % intervals do not overlap)."]
    assert "tie" not in md and md.count("**90.0** ▲") == 2


def test_gap_to_clean_equals_an_independent_computation(parent, tmp_path):
    rows = {r["model"]: r for r in leaderboard([parent])}
    # AutoAttack's own images had clean accuracy 0.85: the gap is taken on them, not on the clean column's 0.90
    assert rows["cnn"]["autoattack_gap"] == pytest.approx(0.10 - 0.85)
    assert rows["cnn"]["pgd_gap"] == pytest.approx(0.12 - 0.90)
    assert rows["vit"]["spatial_gap"] == pytest.approx(0.50 - 0.80)         # no clean of its own: the clean column
    assert "clean_gap" not in rows["vit"] and "mce_gap" not in rows["vit"]
    table = list(csv.DictReader(io.StringIO(format_rows(list(rows.values()), "csv"))))
    got = {r["model"]: r for r in table}
    assert float(got["cnn"]["autoattack_gap"]) == pytest.approx(-0.75) and "clean_gap" not in got["cnn"]
    entries = json.loads(format_rows(list(rows.values()), "json"))
    cnn = next(e for e in entries if e["name"] == "cnn")
    assert cnn["autoattack_acc_gap"] == pytest.approx(-75.0) and "clean_acc_gap" not in cnn
    md = scorecard_section(load_results([parent])).markdown
    assert "10.0 (−75.0) [" in md and "40.0** ▲ (−40.0) [" in md


def test_verdict_directional_when_intervals_separate_not_significant_when_they_overlap(tmp_path):
    write_run(tmp_path / "far" / "a", run("a", 0.9, 0.60, 0.62, n=500))
    write_run(tmp_path / "far" / "b", run("b", 0.9, 0.40, 0.42, n=500))
    lo_a, _ = wilson(0.60, 500)
    _, hi_b = wilson(0.40, 500)
    assert lo_a > hi_b                                                         # separated, independently
    md = scorecard_section(load_results([tmp_path / "far"])).markdown
    assert md.splitlines()[0] == ("**a** is more robust than **b** under AutoAttack ε=4/255 by 20.0 points "
                                  "(95 % intervals do not overlap).")
    write_run(tmp_path / "near" / "a", run("a", 0.9, 0.15, 0.2, n=20))
    write_run(tmp_path / "near" / "b", run("b", 0.9, 0.10, 0.2, n=20))
    assert wilson(0.15, 20)[0] < wilson(0.10, 20)[1]                           # overlapping, independently
    sec = scorecard_section(load_results([tmp_path / "near"]))
    assert sec.markdown.splitlines()[0] == ("**a** is more robust than **b** under AutoAttack ε=4/255 by 5.0 points "
                                            "(not significant: the 95 % intervals overlap).")
    assert any("PGD" in d and "tie" in d for d in sec.details)                  # PGD equal: a tie, said so
    write_run(tmp_path / "mixed" / "a", run("a", 0.9, 0.60, 0.62, n=500))
    write_run(tmp_path / "mixed" / "b", run("b", 0.9, 0.10, 0.42, n=500, aa_n=20))
    first = scorecard_section(load_results([tmp_path / "mixed"])).markdown.splitlines()[0]
    assert first.endswith("(95 % intervals do not overlap, measured on different images (n=500 vs n=20)).")


def test_autoattack_is_compared_with_pgd_only_on_the_same_images(tmp_path):
    write_run(tmp_path / "E" / "vit", run("vit", 0.8, 0.15, 0.135, n=200, aa_n=20))
    write_run(tmp_path / "E" / "cnn", run("cnn", 0.8, 0.10, 0.30, n=200))
    sec = scorecard_section(load_results([tmp_path / "E"]))
    said = "\n".join(sec.details)
    assert "vit: AutoAttack (n=20) and PGD (n=200) ran on different images" in said
    assert "cnn: AutoAttack is 20.0 points below PGD on the same 200 images." in said
    vit_row = next(line for line in sec.markdown.splitlines() if line.startswith("| vit"))
    assert "attacks on different images: PGD n=200, AutoAttack n=20" in vit_row


def test_the_same_count_of_other_images_is_not_the_same_images(tmp_path):
    """Two runs drawing 500 images with other seeds, and AutoAttack on its own sample of as many images as PGD's:
    compared as different images (the subset records differ), though the counts are equal."""
    for name, seed, aa in (("a", 0, 0.60), ("b", 1, 0.10)):
        res = run(name, 0.9, aa, 0.62, n=500)
        res["data"]["subset"] = {"method": "stratified", "seed": seed, "num_images": 500, "of": 10000}
        write_run(tmp_path / "E" / name, res)
    first = scorecard_section(load_results([tmp_path / "E"])).markdown.splitlines()[0]
    assert first.endswith("measured on different images (n=500 vs n=500)).")
    res = run("vit", 0.8, 0.15, 0.30, n=200)
    res["suites"]["autoattack"]["subset"] = {"method": "first", "seed": 0, "num_images": 200, "of": 1000}
    write_run(tmp_path / "F" / "vit", res)
    said = "\n".join(scorecard_section(load_results([tmp_path / "F"])).details)
    assert "vit: AutoAttack (n=200) and PGD (n=200) ran on different images" in said


def test_near_chance_is_warned(tmp_path):
    write_run(tmp_path / "E" / "guess", run("guess", 0.12, 0.0, 0.0, n=100))          # 10 classes: chance 10 %
    write_run(tmp_path / "E" / "good", run("good", 0.85, 0.5, 0.55, n=100))
    lo, hi = wilson(0.12, 100)
    assert lo <= 0.1 <= hi and not wilson(0.85, 100)[0] <= 0.1
    md = scorecard_section(load_results([tmp_path / "E"])).markdown
    warn = [line for line in md.splitlines() if line.startswith("**Warning:")]
    assert len(warn) == 1 and warn[0].startswith("**Warning: near chance** (1/10 = 10.0 %)")
    assert "**guess** on clean" in warn[0] and "good" not in warn[0]
    assert md.index("**Warning:") < md.index("| model")                               # above the table


def test_inside_the_models_table_is_filled_and_shows_clean_accuracy_once():
    results = [{"model": {"name": m}, "suites": {}, "analyses": {
        "attention_distance": {"distance": [[10.0, 14.0], [20.0, 30.0 + k]], "num_layers": 2, "num_heads": 2},
        "lesion": {"clean_accuracy": 0.75, "num_blocks": 3, "single": {"block": [0.5, 0.25 + k / 100, 0.7]}},
        "restricted_attention": {"clean_accuracy": 0.75, "local": {"1": 0.6, "2": 0.7}, "random": {"1": 0.5},
                                 "cls_only_first": {"0": 0.75, "2": 0.1}, "has_class_token": False},
        "correlation": {"method": "cka", "all_tokens": [[1.0, 0.8, 0.3], [0.8, 1.0, 0.6], [0.3, 0.6, 1.0]]}}}
        for k, m in enumerate(("vit", "deit"))]
    md = analysis_sections(results)[0].markdown
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in md.splitlines()[2:] if line.startswith("|")}
    assert [k for k in rows if "clean accuracy" in k] == ["clean accuracy (analysis images)"]
    assert rows["clean accuracy (analysis images)"] == ["0.7500", "0.7500"]
    assert rows["attention distance: first block (px)"] == ["12.0000", "12.0000"]
    assert rows["attention distance: last block (px)"] == ["25.0000", "25.5000"]
    assert rows["lesion: one block removed, worst"] == ["0.2500", "0.2600"]
    assert rows["correlation: first vs last layer (cka)"] == ["0.3000", "0.3000"]
    assert rows["correlation: adjacent layers, mean (cka)"] == ["0.7000", "0.7000"]
    assert rows["restricted attention: patches attend only to themselves (no class token), all blocks"] == ["0.1000"] * 2


def test_restricted_attention_title_follows_the_recorded_tokens(tmp_path, monkeypatch):
    import robustvit.analysis.restricted as restricted

    titles = []
    monkeypatch.setattr(restricted, "finish_figure",
                        lambda fig, path, *a, **k: titles.append([ax.get_title() for ax in fig.axes]) or str(path))
    base = {"local": {"1": 0.5}, "random": {"1": 0.4}, "clean_accuracy": 0.6, "cls_only_first": {"0": 0.6, "1": 0.2},
            "cls_only_last": {"0": 0.6, "1": 0.3}, "cls_only": "cls", "model": "m"}
    restricted.plot_restricted({**base, "has_class_token": False}, tmp_path)
    restricted.plot_restricted({**base, "has_class_token": True}, tmp_path)
    assert titles[0][1] == "Patches attend only to themselves (no class token)"
    assert titles[1][1] == "Patches attend only to CLS"
