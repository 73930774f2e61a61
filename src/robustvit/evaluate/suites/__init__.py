"""Built-in evaluation suites; importing this package registers them (one module per family)."""

import importlib as _importlib
import pkgutil as _pkgutil

from robustvit.evaluate.suites.base import (Batch, EvalContext, Suite, SuiteOptions, create_suite, get_suite_class,
                                            list_suites, parse_suite_spec, register_suite, suite_options)

for _m in _pkgutil.iter_modules(__path__):
    if _m.name != "base" and not _m.name.startswith("_"):
        _importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["Batch", "EvalContext", "Suite", "SuiteOptions", "create_suite", "get_suite_class", "list_suites",
           "parse_suite_spec", "register_suite", "suite_options"]
