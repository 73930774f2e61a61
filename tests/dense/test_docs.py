"""docs/dense.md: every ``robustvit`` command in it parses with the current CLI."""

import re
import shlex
from pathlib import Path

from robustvit.cli import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "dense.md"


def test_dense_doc_commands_parse() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    commands = [line.strip() for b in blocks for line in re.sub(r"\\\n\s*", " ", b).splitlines()
                if line.strip().startswith("robustvit ")]
    assert len(commands) >= 4
    parser = build_parser()
    for cmd in commands:
        parser.parse_args(shlex.split(cmd)[1:])
