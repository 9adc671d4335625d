"""Watchpoint engine: tensor statistics and the conditions MindSpore's debugger evaluated.

``check(value, previous=None)`` on any condition, or ``check_many(conditions, value, previous)`` to share one
statistics pass, is the entry point the online debugger, the offline ``DumpAnalyzer`` and callbacks all use::

    from msdebug_hooks.conditions import TensorTooLargeCondition, TensorOverflowCondition, check_many
    results = check_many([TensorTooLargeCondition(abs_mean_gt=1e3), TensorOverflowCondition()], array)
    [r.hit for r in results]

Statistics run on compiled single-pass kernels (numba) when numba is installed (a core dependency), else on numpy's
chunked pass; call ``warm_up_statistics()`` when a debugger or monitor attaches so that the kernels are loaded (or
compiled, the first time on a machine) before the first training step needs them.

Modules: ``stats`` (statistics of one tensor, definitions, numpy's chunked pass), ``batch`` (many small tensors in
one call), ``_engine`` (which engine runs; warm-up), ``_kernels`` (the compiled pass), ``_step_kernels`` (one-call
kernels over a step's tensors), ``params`` (parameter rules), ``conditions`` (one class per condition), ``engine``
(``check_many``: one statistics pass shared by several conditions; ``find_hits``: the reportable results of a
batch), ``judging`` (conditions judged as arrays over a batch's statistics), ``protocol`` (proto ids, UI ids,
``name:param=value`` text), ``_blas`` (keeps numpy's BLAS on the calling thread).
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
from msdebug_hooks.conditions.engine import check_many, check_tensors, find_hits, statistics_plan
from msdebug_hooks.conditions.params import ParamSpec
from msdebug_hooks.conditions.protocol import (
    CONDITION_BY_ID, UI_CONDITIONS, UiCondition, condition_class, from_protocol, from_ui, parse_condition,
    should_evaluate)
from msdebug_hooks.conditions.stats import (
    ALL_STATISTICS, BASIC_STATISTICS, TensorStatistics, UnsupportedDtypeError, bfloat16_to_float32,
    compute_statistics)

__all__ = [
    "ALL_STATISTICS", "BASIC_STATISTICS", "CONDITION_BY_ID", "CONDITION_CLASSES", "Condition", "ConditionResult",
    "ERROR_INF", "ERROR_NAN", "ERROR_NO_PREVIOUS", "OperatorOverflowCondition", "ParamResult", "ParamSpec",
    "TensorAllZeroCondition", "TensorChangeAboveThresholdCondition", "TensorChangeBelowThresholdCondition",
    "TensorInitializationCondition", "TensorOverflowCondition", "TensorRangeCondition", "TensorStatistics",
    "TensorTooLargeCondition", "TensorTooSmallCondition", "TensorUnchangedCondition", "UI_CONDITIONS",
    "UiCondition", "UnsupportedDtypeError", "bfloat16_to_float32", "check_many", "check_tensors",
    "compute_statistics", "compute_statistics_batch", "condition_class", "error_list", "find_hits", "from_protocol",
    "from_ui",
    "parse_condition", "should_evaluate", "statistics_engine", "statistics_plan", "warm_up_statistics",
]
