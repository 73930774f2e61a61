"""Shared fixtures of the fault tests: one tiny checkpoint and each scenario's reference run, computed once."""

from __future__ import annotations

import os

import pytest

import scenarios as S

# Each faulted run starts a fresh interpreter: pytest's own process has run multi-threaded OpenMP regions by now,
# and a child forked after those may hang (benchmarks/faults.py forks from a process that has not).
os.environ.setdefault("FAULTS_SUBPROCESS", "1")


@pytest.fixture(scope="session")
def ck(tmp_path_factory):
    return S.tiny_checkpoint(tmp_path_factory.mktemp("faults") / "ck")


class _Refs(dict):
    """{scenario: (snapshot, write points)} of uninterrupted runs, each computed on first use."""

    def __init__(self, ck, root):
        super().__init__()
        self.scen, self.root = S.standard(ck, root), root

    def __missing__(self, name):
        if name == "leaderboard":                # its inputs are the eval and analyze reference runs
            self["eval"], self["analyze"]          # noqa: B018
        self[name] = S.reference(self.scen[name], self.root / name)
        return self[name]


@pytest.fixture(scope="session")
def refs(ck, tmp_path_factory):
    return _Refs(ck, tmp_path_factory.mktemp("refs"))
