import json
import subprocess
import sys

import pytest

from robustvit.cli import main
from robustvit.models import create_model, save_checkpoint


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args,match", [
    (["eval", "--model", "vit_cifar_tiyn", "--data", "synthshapes:test", "--out", "X"], "unknown model 'vit_cifar_tiyn'; did you mean vit_cifar_tiny"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapez:test", "--out", "X"], "unknown data source 'synthshapez'"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapes:test", "--suite", "clena", "--out", "X"], "did you mean clean"),
    (["eval", "--model", "resnet_cifar18", "--data", "folder:/no/such/dir", "--out", "X"], "does not exist"),
    (["eval", "--model", "resnet_cifar18", "--data", "synthshapes:test,count=10", "--limit", "11", "--out", "X"], "--limit 11 is larger"),
    (["train", "--model", "resnet_cifar18"], "needs --data, --out"),
])
def test_errors_are_one_line(capsys, tmp_path, monkeypatch, args, match):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *args)
    assert code == 2
    errors = [line for line in err.strip().splitlines() if not line.startswith("robustvit: warning:")]
    assert len(errors) == 1 and errors[0].startswith("robustvit: error:") and "Traceback" not in err
    assert match in err


def test_debug_shows_traceback(capsys, tmp_path):
    code = main(["--debug", "eval", "--model", "nope_model", "--data", "synthshapes:test", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" in err


def test_eval_and_report(capsys, tmp_path):
    ck = save_checkpoint(create_model("resnet_cifar18", width_mult=0.0625).eval(), tmp_path / "ck")
    code, out, _ = run(capsys, "eval", "--model", str(ck), "--data", "synthshapes:test,count=40,size=16", "--out",
                       str(tmp_path / "e"), "--no-progress", "--device", "cpu")
    assert code == 0 and "resnet_cifar18" in out
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert res["run"]["command"].startswith("robustvit eval")
    code, out, _ = run(capsys, "report", str(tmp_path / "e"), "--out", str(tmp_path / "r"))
    assert code == 0
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Clean accuracy" in html and "data:image/png;base64" in html


def test_list(capsys):
    code, out, _ = run(capsys, "list", "models", "vit_cifar*")
    assert code == 0 and "vit_cifar_tiny" in out.split()
    code, out, _ = run(capsys, "list", "suites")
    assert "clean" in out.split()


def test_console_entry_point():
    proc = subprocess.run([sys.executable, "-m", "robustvit.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("robustvit ")
