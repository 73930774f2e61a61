"""Evaluation suites, one module per family; the registry imports every module of this package before its
first lookup."""

from robustvit.evaluation.suites.base import (Batch, EvalContext, Suite, SuiteOptions, create_suite, get_suite_class,
                                            list_suites, parse_suite_spec, register_suite, suite_options)

__all__ = ["Batch", "EvalContext", "Suite", "SuiteOptions", "create_suite", "get_suite_class", "list_suites",
           "parse_suite_spec", "register_suite", "suite_options"]
