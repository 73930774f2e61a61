"""The report: run folders (eval, analysis, train), the scorecard first, the fixed group order, no Markdown in the
HTML, alt text on every figure, generic analysis and training sections, no analysis import; headless Chromium."""

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from chromium import check_page, find_chromium  # noqa: E402
from fixtures import eval_result, write_run  # noqa: E402

from robustvit.report import GROUPS, load_results, load_run, write_report  # noqa: E402
from robustvit.report.sections.training import training_section  # noqa: E402


def _png(path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path)
    plt.close(fig)
    return path


@pytest.fixture
def folders(tmp_path):
    """vit: an eval with its analysis and training runs beside it; cnn: eval, analysis and train in three folders."""
    transfer = {"attack": "pgd", "eps": 4 / 255, "accuracy": {"vit": 0.1, "cnn": 0.6}, "clean_accuracy": 0.8}
    vit = write_run(tmp_path / "vit", eval_result("vit", 0.8, {1 / 255: 0.5, 4 / 255: 0.2}, aa=0.15, corr=0.6,
                                                  comparable=False, suites={"transfer": transfer}))
    write_run(vit / "train", {"schema": 2, "kind": "train", "model": {"name": "vit"}, "data": {}, "comparable": True,
                              "notes": [], "run": {}, "train": {"config": {}, "checkpoints": [], "epochs": [
                                  {"epoch": e, "train_loss": 2.0 / e, "train_acc": 0.2 * e, "val_acc": 0.18 * e}
                                  for e in (1, 2, 3)]}})
    an = vit / "analysis"
    an.mkdir()
    _png(an / "lesion.png")
    _png(an / "made_up.png")
    write_run(an, {"schema": 2, "kind": "analysis", "model": {"name": "vit"}, "data": {}, "run": {},
                   "comparable": False, "notes": ["10 of 100 images"], "analyses": {
                       "lesion": {"analysis": "lesion", "clean_accuracy": 0.8, "num_images": 10,
                                  "single": {"block": [0.1, 0.7]}, "figures": ["lesion.png"],
                                  "comparable": False, "notes": ["10 of 100 images"]},
                       "made_up_analysis": {"score": 0.25, "figures": ["made_up.png"], "seed": 0}}})
    cnn = write_run(tmp_path / "cnn", eval_result("cnn", 0.9, {4 / 255: 0.05}, aa=0.01, corr=0.7, params=5_000_000,
                                                  schema=2, suites={"transfer": {**transfer, "accuracy": {"vit": 0.7, "cnn": 0.02}}}))
    _png(tmp_path / "cnn_an.png")
    write_run(tmp_path / "cnn_an", {"schema": 2, "kind": "analysis", "model": {"name": "cnn"}, "data": {"spec": "cifar10:test"},
                                    "comparable": True, "notes": [], "run": {},
                                    "analyses": {"made_up_analysis": {"score": 0.75, "figures": [str(tmp_path / "cnn_an.png")]}}})
    write_run(tmp_path / "cnn_train", {"schema": 2, "kind": "train", "model": {"name": "cnn"}, "data": {"spec": "x"},
                                       "comparable": True, "notes": [], "run": {},
                                       "train": {"config": {"lr": 0.1}, "checkpoints": ["last"],
                                                 "epochs": [{"epoch": 1, "train_loss": 1.5, "train_acc": 0.4},
                                                            {"epoch": 2, "train_loss": 1.0, "train_acc": 0.6}]}})
    return [vit, cnn, tmp_path / "cnn_an", tmp_path / "cnn_train"]


def test_reader_joins_runs_beside_an_eval(folders):
    vit = load_run(folders[0])
    assert vit["kind"] == "eval" and set(vit["analyses"]) == {"lesion", "made_up_analysis"}
    assert Path(vit["analyses"]["lesion"]["figures"][0]).is_file()               # resolved against the folder
    assert [e["epoch"] for e in vit["train"]["epochs"]] == [1, 2, 3]              # train/ beside it
    an, tr = load_run(folders[2]), load_run(folders[3])
    assert an["kind"] == "analysis" and an["analyses"]["made_up_analysis"]["score"] == 0.75
    assert tr["kind"] == "train" and tr["train"]["checkpoints"] == ["last"]
    merged = load_results(folders)
    assert [m["model"]["name"] for m in merged] == ["vit", "cnn"]
    cnn = merged[1]
    assert "clean" in cnn["suites"] and "made_up_analysis" in cnn["analyses"] and len(cnn["train"]["epochs"]) == 2


def test_scorecard_first_fixed_order_no_markdown(folders, tmp_path):
    md_path, html_path = write_report(load_results(folders), tmp_path / "rep", notes=["a **bold** note"])
    html, md = html_path.read_text(), md_path.read_text()
    assert html.index("<table") == html.index("<table id='scorecard'>")
    first = html[html.index("<table id='scorecard'>"):html.index("</table>")]
    assert "80.0" in first and "20.0" in first and "15.0" in first and "60.0" in first   # clean, PGD, AA, corruptions of vit
    assert "subset 100/10000 (stratified)" in first                                      # the label column
    ids = re.findall(r"<h2 id='(\w+)'>", html)
    assert ids == [g for g in GROUPS if g in ids] and ids[0] == "clean" and ids[-1] == "training"
    assert set(ids) == set(GROUPS)
    text = re.sub(r"<[^>]+>", "", re.sub(r"src='data:[^']+'", "", html))
    assert "**" not in text and "|---" not in text and "`" not in text and "<strong>bold</strong>" in html
    imgs = re.findall(r"<img [^>]*>", html)
    assert len(imgs) == len(list((tmp_path / "rep" / "figures").glob("*.png"))) >= 8
    assert all(re.search(r"alt='[^']+'", i) for i in imgs)
    assert "| clean accuracy (analysis images) | 0.8000 |" in md and "lesion: one block removed, worst" in md
    assert "made up analysis: score" in md                                                    # generic, from the schema
    assert "figures/training.png" in md and "transfer_matrix.png" in md and "robustness_vs_size.png" in md
    assert "corruptions_per_corruption.png" in md and "adversarial_accuracy_vs_eps.png" in md


def test_training_curves_have_integer_epoch_ticks(folders):
    sec = training_section(load_results(folders))
    fig = sec.figures[0].fig
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)
    lines = fig.axes[0].lines
    assert [list(line.get_ydata()) for line in lines] == [[2.0, 1.0, 2.0 / 3], [1.5, 1.0]]
    plt.close(fig)


def test_training_configs_stay_with_their_own_runs():
    def run(name, epochs, lr):
        return {"model": {"name": name}, "train": {"config": {"lr": lr, "batch_size": 8, "data": "d"},
                                                   "epochs": [{"epoch": 1, "train_loss": 1.0}] if epochs else []}}
    sec = training_section([run("untrained", False, 0.5), run("a", True, 0.1), run("b", True, 0.2)])
    assert "a: ce loss, lr 0.1" in sec.markdown and "b: ce loss, lr 0.2" in sec.markdown
    assert "untrained" not in sec.markdown
    plt.close(sec.figures[0].fig)


def test_report_imports_no_analysis_module(folders, tmp_path):
    code = ("import sys; from robustvit.report import load_results, write_report; from robustvit import leaderboard; "
            f"write_report(load_results({[str(f) for f in folders]!r}), __import__('pathlib').Path({str(tmp_path / 'r')!r})); "
            "bad = [m for m in sys.modules if m.startswith('robustvit.analysis')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_chromium_renders_report(folders, tmp_path):
    if find_chromium() is None:
        pytest.skip("chromium is not installed (`apt-get install -y chromium`; .ci/run installs it)")
    _, html = write_report(load_results(folders), tmp_path / "rep")
    shot = tmp_path / "report.png"
    r = check_page(html, shot)
    assert r["errors"] == [] and r["console_errors"] == []
    assert r["images"] >= 8 and r["broken"] == [] and r["missing_alt"] == 0
    assert r["first_table_id"] == "scorecard"
    assert 0 <= r["scorecard"]["top"] and r["scorecard"]["bottom"] <= min(800, r["viewport"][1])   # above the fold
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schema2_analysis_beside_an_eval(tmp_path):
    """``analyze`` writing ``OUT/results.json`` (kind analysis, ``analyses`` with the aggregate ``figures`` list)
    into ``<eval>/analysis`` is read as the eval's analyses."""
    ev = write_run(tmp_path / "ev", eval_result("vit", 0.5, {}))
    png = _png(tmp_path / "ev_lesion.png")
    write_run(ev / "analysis", {"schema": 2, "kind": "analysis", "model": {"name": "vit"}, "data": {}, "run": {},
                                "comparable": True, "notes": [],
                                "analyses": {"lesion": {"clean_accuracy": 0.5, "figures": [str(png)]},
                                             "figures": [str(png)]}})
    run = load_run(ev)
    assert set(run["analyses"]) == {"lesion"} and run["analyses"]["lesion"]["figures"] == [str(png)]


def test_two_evaluations_under_one_name_stay_apart(tmp_path):
    a = write_run(tmp_path / "run_a", eval_result("vit", 0.5, {}))
    b = write_run(tmp_path / "run_b", eval_result("vit", 0.7, {}))
    t = write_run(tmp_path / "run_t", eval_result("vit", 0.5, {}, suites={"transfer": {"accuracy": {"vit": 0.1}}}))
    t_res = json.loads((t / "results.json").read_text())
    del t_res["suites"]["clean"]
    (t / "results.json").write_text(json.dumps(t_res))
    merged = load_results([a, b, t])
    assert [(m["model"]["name"], m["suites"]["clean"]["top1"]) for m in merged] == [("vit", 0.5), ("vit (run_b)", 0.7)]
    assert "transfer" in merged[0]["suites"]            # disjoint suites of one model are joined


def test_autoattack_members_line_up_across_old_and_new_member_names():
    """A file written when the members were ``apgd-ce``/``apgd-t`` and one with ``apgd_ce``/``apgd_t``: one row
    per member, both models' numbers in it."""
    from robustvit.report.sections.adversarial import attack_table_section

    old = eval_result("old", 0.9, {}, aa=0.4)
    new = eval_result("new", 0.8, {}, aa=0.3)
    new["suites"]["autoattack"]["per_attack"] = {"apgd_ce": 0.35, "apgd_t": 0.3}
    md = attack_table_section("autoattack", [old, new]).markdown
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
            for line in md.splitlines() if line.startswith("| after")}
    assert set(rows) == {"after apgd_ce", "after apgd_t"}
    assert all(c and c != "–" and c != "None" for cells in rows.values() for c in cells), rows
