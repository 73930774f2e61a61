"""The README's command-line examples: every command parses with the current CLI, and those that need no
download or outside file run as written (with tiny data and one epoch instead of the full budget)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robustvit.cli import build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"
#: the README's budget → a test budget (same commands, smaller data and fewer epochs)
SHRINK = [("synthshapes:train,size=64", "synthshapes:train,size=64,count=32"),
          ("synthshapes:train", "synthshapes:train,count=32"), ("synthshapes:test", "synthshapes:test,count=16"),
          ("--epochs 30", "--epochs 1"), ("--limit 200", "--limit 16")]
#: commands that need something outside the repository (weights, data sets, other runs): parsed only
NEEDS_OUTSIDE = ("--pretrained", "/data/", "runs/resnet", "eval/resnet", "list models 'vit_*' |", "robustbench:")


def readme_commands() -> list[str]:
    text = README.read_text()
    block = re.search(r"## Command line\n\n```bash\n(.*?)```", text, re.S).group(1)
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.startswith("robustvit ")]


def test_every_readme_command_parses():
    commands = readme_commands()
    assert len(commands) >= 10
    parser = build_parser()
    for cmd in commands:
        if "|" in cmd:                         # `robustvit list models 'vit_*' | suites | …` lists alternatives
            for what in ("models", "suites", "attacks", "corruptions", "data", "losses", "recipes", "analyses"):
                parser.parse_args(["list", what])
            continue
        parser.parse_args(shlex.split(cmd)[1:])


@pytest.mark.slow
def test_readme_commands_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = 0
    for cmd in readme_commands():
        if any(s in cmd for s in NEEDS_OUTSIDE):
            continue
        for a, b in SHRINK:
            cmd = cmd.replace(a, b)
        if cmd.startswith("robustvit train --recipe") or "--loss trades" in cmd:
            cmd += " --epochs 1"
        assert main(shlex.split(cmd)[1:]) == 0, cmd
        ran += 1
    assert ran >= 6
    assert (tmp_path / "runs/vit/checkpoint/spec.json").is_file() and (tmp_path / "eval/vit/results.json").is_file()
    assert (tmp_path / "eval/vit/analysis").is_dir() and (tmp_path / "runs/vit64/checkpoint").is_dir()


def test_design_doc_corruption_example_runs():
    """docs/design.md's "How to add a corruption" example, as written."""
    from robustvit.corruptions import CORRUPTIONS, list_corruptions

    text = (README.parent / "docs" / "design.md").read_text()
    section = text[text.index("## How to add a corruption"):text.index("## How to add an evaluation suite")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    try:
        exec(code, scope)
        y = scope["corrupt"](scope["torch"].rand(4, 3, 64, 64), "vignette", 3, seed=0)
        assert y.shape == (4, 3, 64, 64) and 0 <= float(y.min()) and float(y.max()) <= 1
        assert "vignette" in list_corruptions("extra")
    finally:
        CORRUPTIONS._items.pop("vignette", None)
