"""Every ``>>>`` example in the package runs and prints what it shows (``doctest`` over every module of
``robustvit``, one test per module with examples).

As in kornia's test suite, the examples may use ``torch``, ``create_model`` and ``create_dataset`` without
importing them; any other name they use comes from their module or from an import they show. Lines marked
``# doctest: +SKIP`` need data, weights or a network that a test cannot have. The examples run in a temporary
folder (some write figures or results).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import torch

import robustvit

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules_with_examples() -> list[str]:
    names = ["robustvit"] + [m.name for m in pkgutil.walk_packages(robustvit.__path__, "robustvit.")]
    return [n for n in names if any(t.examples for t in doctest.DocTestFinder().find(importlib.import_module(n), n))]


MODULES = modules_with_examples()


def test_the_package_has_examples() -> None:
    assert {"robustvit.registry", "robustvit.facade", "robustvit.models.factory", "robustvit.corruptions.engine"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name: str, tmp_path, monkeypatch) -> None:
    from robustvit.data import create_dataset
    from robustvit.models import create_model

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in doctest.DocTestFinder().find(module, name):
        test.globs = {**test.globs, "torch": torch, "create_model": create_model, "create_dataset": create_dataset}
        torch.manual_seed(0)
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
