"""Agreement of robustvit's model-vs-human metrics with bethgelab/model-vs-human's own computation.

Data: the human raw data model-vs-human publishes (``raw-data/<set>/<set>_subject-XX_session_1.csv``, 17 data
sets). The repository holds no model's raw data, so every human observer in turn plays the decision maker
against the other observers of its data set — the computation model-vs-human runs for a model and for its
"humans" row (``get_raw_benchmark_df``).

- reference: model-vs-human's ``SixteenClassAccuracy``, ``SixteenClassAccuracyDifference`` and
  ``ErrorConsistency`` (``modelvshuman/plotting/analyses.py``) on its pandas frames (``get_experimental_data``:
  ``read_all_csv_files_from_directory``, ``condition.astype(str)``, ``get_short_imagename``), its conditions
  minus ``EXCLUDE_CONDITIONS`` (read from its ``plot.py``), averaged over conditions, then over the other
  observers (``format_benchmark_df``), run in a subprocess with pandas (its modules that need matplotlib and
  its model zoo are stubbed: the analyses do not call them);
- robustvit: :func:`robustvit.data.modelvshuman.read_human_trials` and
  :func:`robustvit.metrics.modelvshuman.compare_with_humans`.

Printed: per data set the largest |difference| over observers of OOD accuracy, accuracy difference, observed
and error consistency, and the number of (observer, metric) values compared.

Usage (an environment with pandas for the reference; the checkout from ``git clone
https://github.com/bethgelab/model-vs-human``):

    python3 -m venv /tmp/mvhref && /tmp/mvhref/bin/pip install pandas numpy
    python benchmarks/modelvshuman_agreement.py --mvh PATH/model-vs-human --ref-python /tmp/mvhref/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import textwrap
from pathlib import Path

from robustvit.data.modelvshuman import DATASETS, read_human_trials
from robustvit.metrics.modelvshuman import compare_with_humans

METRICS = ("ood_accuracy", "accuracy_difference", "observed_consistency", "error_consistency")

REFERENCE = textwrap.dedent(r'''
    import ast, importlib.util, json, sys, types
    from pathlib import Path
    import numpy as np
    root = Path(sys.argv[1]); pkg = root / "modelvshuman"
    def stub(name, path=None, **attrs):
        m = types.ModuleType(name); m.__dict__.update(attrs)
        if path is not None: m.__path__ = [str(path)]
        sys.modules[name] = m; return m
    stub("modelvshuman", pkg); stub("modelvshuman.plotting", pkg / "plotting"); stub("modelvshuman.helper", pkg / "helper")
    stub("modelvshuman.constants", RAW_DATA_DIR=str(root / "raw-data"), CODE_DIR=str(pkg))
    stub("modelvshuman.plotting.decision_makers")
    def load(name, file):
        spec = importlib.util.spec_from_file_location(name, file); mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod; spec.loader.exec_module(mod); return mod
    load("modelvshuman.helper.human_categories", pkg / "helper" / "human_categories.py")
    a = load("modelvshuman.plotting.analyses", pkg / "plotting" / "analyses.py")
    ph = load("modelvshuman.helper.plotting_helper", pkg / "helper" / "plotting_helper.py")
    tree = ast.parse((pkg / "plotting" / "plot.py").read_text())
    exclude = next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "EXCLUDE_CONDITIONS")
    out = {}
    for ds in json.loads(sys.argv[2]):
        df = ph.read_all_csv_files_from_directory(str(root / "raw-data" / ds))
        df.condition = df.condition.astype(str)
        df["image_id"] = df["imagename"].apply(ph.get_short_imagename)
        subjects = sorted(df.subj.unique())
        conds = [c for c in json.loads(sys.argv[3])[ds] if c not in exclude.get(ds, [])]
        res = {}
        for s in subjects:
            acc = np.mean([a.SixteenClassAccuracy().analysis(df[(df.subj == s) & (df.condition == c)])["16-class-accuracy"]
                           for c in conds])
            vals = {"ood_accuracy": acc, "accuracy_difference": [], "observed_consistency": [], "error_consistency": []}
            for h in subjects:
                if h == s: continue
                per = {"accuracy_difference": [], "observed_consistency": [], "error_consistency": []}
                for c in conds:
                    d1 = df[(df.subj == s) & (df.condition == c)]; d2 = df[(df.subj == h) & (df.condition == c)]
                    per["accuracy_difference"].append(a.SixteenClassAccuracyDifference().analysis(d1, d2)["16-class-accuracy-difference"])
                    ec = a.ErrorConsistency().analysis(d1, d2)
                    per["observed_consistency"].append(ec["observed-consistency"]); per["error_consistency"].append(ec["error-consistency"])
                for k, v in per.items(): vals[k].append(np.mean(v))
            res[s] = {k: float(np.mean(v)) for k, v in vals.items()}
        out[ds] = res
    print(json.dumps(out))
''')


def ours(raw: Path, dataset: str) -> dict[str, dict[str, float]]:
    trials = read_human_trials(raw, dataset)
    subjects = sorted({t.subject for t in trials})
    out = {}
    for s in subjects:
        r = compare_with_humans(dataset, [t for t in trials if t.subject == s], trials, DATASETS[dataset])
        out[s] = {k: float(r[k]) for k in METRICS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mvh", type=Path, required=True, help="a model-vs-human checkout (raw-data/, modelvshuman/)")
    ap.add_argument("--ref-python", default="python3", help="a Python with pandas and numpy for the reference")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    names = [d for d in a.datasets.split(",") if (a.mvh / "raw-data" / d).is_dir()]
    conditions = {d: list(DATASETS[d]) if len(DATASETS[d]) > 1 else ["0"] for d in names}
    run = subprocess.run([a.ref_python, "-c", REFERENCE, str(a.mvh), json.dumps(names), json.dumps(conditions)],
                         capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"the reference failed:\n{run.stderr[-3000:]}")
    ref = json.loads(run.stdout)
    report, worst = {}, 0.0
    print(f"{'data set':20s} {'observers':>9s}  " + "  ".join(f"{m:>22s}" for m in METRICS))
    for d in names:
        mine = ours(a.mvh / "raw-data", d)
        diffs = {m: max(abs(mine[s][m] - ref[d][s][m]) for s in ref[d]) for m in METRICS}
        worst = max(worst, *diffs.values())
        report[d] = {"observers": len(ref[d]), "max_abs_diff": diffs, "ours": mine, "reference": ref[d]}
        print(f"{d:20s} {len(ref[d]):9d}  " + "  ".join(f"{diffs[m]:22.2e}" for m in METRICS))
    print(f"largest |difference| over all data sets, observers and metrics: {worst:.2e}")
    if a.out:
        a.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
