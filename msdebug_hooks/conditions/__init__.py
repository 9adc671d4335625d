"""Watchpoint engine: tensor statistics and the conditions MindSpore's debugger evaluated.

``check(value, previous=None)`` on any condition, or ``check_many(conditions, value, previous)`` to share one
statistics pass, is the entry point the online debugger, the offline ``DumpAnalyzer`` and callbacks all use::

    from msdebug_hooks.conditions import TensorTooLargeCondition, TensorOverflowCondition, check_many
    results = check_many([TensorTooLargeCondition(abs_mean_gt=1e3), TensorOverflowCondition()], array)
    [r.hit for r in results]

Statistics run on compiled single-pass kernels (numba) when numba is installed (a core dependency), else on numpy's
chunked pass; call ``warm_up_statistics()`` when a debugger or monitor attaches so that the kernels are loaded (or
compiled, the first time on a machine) before the first training step needs them.

Modules, from the definitions up: ``tensor_statistics`` (what each statistic is, ``TensorStatistics``), ``totals``
(``Totals``, the running totals every route fills, and ``finish``, the final formulas), ``state`` (totals as
arrays: the kernels' state rows, a batch's ``BatchTotals``), the routes ``numpy_chunks`` / ``numpy_segments`` /
``compiled`` (with the numba kernels ``_kernels``, ``_block_kernels``, ``_step_kernels``) and ``layout`` (prepared
batch layouts), ``statistics_engine`` (the one interface in front of them: ``current_engine()``; ``_engine`` says
which engine runs and warms it up), ``stats`` (``compute_statistics``), ``batch`` (``compute_statistics_batch``),
``tensor_check`` (conditions on one tensor, what ``Condition.check`` runs), ``params`` / ``conditions`` (one class
per condition), ``rules`` / ``judging`` (conditions judged as arrays over a batch), ``checks`` (``check_many``,
``check_tensors``, ``find_hits``), ``protocol`` (proto ids, UI ids, ``name:param=value`` text); ``_dtypes``,
``_blas``, ``kept`` and ``error_codes`` are shared helpers.
"""
from __future__ import annotations

from msdebug_hooks.conditions.conditions import (
    CONDITION_CLASSES, ERROR_INF, ERROR_NAN, ERROR_NO_PREVIOUS, Condition, ConditionResult,
    OperatorOverflowCondition, ParamResult, TensorAllZeroCondition, TensorChangeAboveThresholdCondition,
    TensorChangeBelowThresholdCondition, TensorInitializationCondition, TensorOverflowCondition,
    TensorRangeCondition, TensorTooLargeCondition, TensorTooSmallCondition, TensorUnchangedCondition, error_list)
from msdebug_hooks.conditions._engine import engine_name as statistics_engine
from msdebug_hooks.conditions._engine import warm_up_statistics
from msdebug_hooks.conditions.batch import compute_statistics_batch
from msdebug_hooks.conditions.checks import Hit, check_many, check_tensors, find_hits
from msdebug_hooks.conditions.params import ParamSpec
from msdebug_hooks.conditions.protocol import (
    CONDITION_BY_ID, UI_CONDITIONS, UiCondition, condition_class, from_protocol, from_ui, parse_condition,
    should_evaluate)
from msdebug_hooks.conditions.stats import (
    ALL_STATISTICS, BASIC_STATISTICS, TensorStatistics, UnsupportedDtypeError, bfloat16_to_float32,
    compute_statistics)
from msdebug_hooks.conditions.tensor_check import statistics_plan

__all__ = [
    "ALL_STATISTICS", "BASIC_STATISTICS", "CONDITION_BY_ID", "CONDITION_CLASSES", "Condition", "ConditionResult",
    "ERROR_INF", "ERROR_NAN", "ERROR_NO_PREVIOUS", "Hit", "OperatorOverflowCondition", "ParamResult", "ParamSpec",
    "TensorAllZeroCondition", "TensorChangeAboveThresholdCondition", "TensorChangeBelowThresholdCondition",
    "TensorInitializationCondition", "TensorOverflowCondition", "TensorRangeCondition", "TensorStatistics",
    "TensorTooLargeCondition", "TensorTooSmallCondition", "TensorUnchangedCondition", "UI_CONDITIONS",
    "UiCondition", "UnsupportedDtypeError", "bfloat16_to_float32", "check_many", "check_tensors",
    "compute_statistics", "compute_statistics_batch", "condition_class", "error_list", "find_hits", "from_protocol",
    "from_ui",
    "parse_condition", "should_evaluate", "statistics_engine", "statistics_plan", "warm_up_statistics",
]
