"""Evaluate conditions on tensors: one statistics pass per tensor, shared by every condition that watches it.

Why separate from the condition classes: this is the loop the online debugger, the dump analyzer and callbacks run
per tensor; the classes only say what they need (``statistics_needed``) and how they judge (``evaluate``).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions.batch import compute_statistics_batch
from msdebug_hooks.conditions.conditions import Condition, ConditionResult, OperatorOverflowCondition, ParamResult
from msdebug_hooks.errors import ConfigError


def statistics_plan(conditions: Iterable[Condition]) -> tuple[set[str], list[tuple[float, float]],
                                                             list[tuple[float, float]]]:
    """Union of what ``conditions`` need: (statistic names, ranges, allclose tolerances)."""
    need: set[str] = set()
    ranges: list[tuple[float, float]] = []
    tolerances: list[tuple[float, float]] = []
    for c in conditions:
        need |= c.statistics_needed()
        rng = c.range_bounds()
        if rng is not None and rng not in ranges:
            ranges.append(rng)
        tol = c.allclose_tolerance()
        if tol is not None and tol not in tolerances:
            tolerances.append(tol)
    return need, ranges, tolerances


def check_many(conditions: Sequence[Condition], value: Any, previous: Any = None, *,
               bfloat16: bool = False) -> list[ConditionResult]:
    """Evaluate several conditions on one tensor with a single statistics pass; results in the given order.

    ``previous`` is read only if some condition needs it. ``bfloat16=True`` reads 2-byte words as bfloat16.
    """
    for i, c in enumerate(conditions):
        if not isinstance(c, Condition):
            raise ConfigError(f"conditions[{i}]", c, "a Condition instance (e.g. TensorTooLargeCondition(...))")
    active = [c for c in conditions if not isinstance(c, OperatorOverflowCondition)]
    stats = None
    note = ""
    if active:
        need, ranges, tolerances = statistics_plan(active)
        wants_previous = any(c.needs_previous for c in active)
        try:
            stats = st.compute_statistics(value, previous if wants_previous else None, need, ranges=ranges,
                                          allclose_tolerances=tolerances, bfloat16=bfloat16)
        except st.UnsupportedDtypeError as exc:
            note = f"not analysed: {exc}"
    results = []
    for c in conditions:
        if isinstance(c, OperatorOverflowCondition):
            results.append(c.evaluate(None))
        elif stats is None:
            results.append(ConditionResult(False, 0, tuple(ParamResult(n, v, False, None)
                                                           for n, v in c.params.items()), note=note))
        else:
            results.append(c.evaluate(stats))
    return results


def check_tensors(conditions: Sequence[Condition], tensors: Iterable[Any], previous: Iterable[Any] | None = None, *,
                  keep_previous: bool = False) -> list[list[ConditionResult]]:
    """``check_many`` over many tensors (e.g. a step's parameters): one result list per tensor, in order.

    The statistics of all tensors are computed together (``batch.compute_statistics_batch``: one kernel call for
    all small tensors), which is what makes a step of many small tensors cheap. ``keep_previous=True``: afterwards
    each previous entry that is not None holds its tensor's current values (a writable C-contiguous array of the
    tensor's dtype and size, else ``ConfigError`` before anything is checked), copied during the check itself where
    possible: a caller keeping last step's values then pays no separate copy pass.
    """
    values = list(tensors)
    prevs = list(previous) if previous is not None else [None] * len(values)
    active = [c for c in conditions if not isinstance(c, OperatorOverflowCondition)]
    if not active or any(not isinstance(c, Condition) for c in conditions):
        return _one_by_one(conditions, values, prevs, keep_previous)   # check_many names a bad condition
    need, ranges, tolerances = statistics_plan(active)
    wants_previous = any(c.needs_previous for c in active)
    try:
        all_stats = compute_statistics_batch(values, prevs if wants_previous or keep_previous else None, need,
                                             ranges=ranges, allclose_tolerances=tolerances,
                                             keep_previous=keep_previous)
    except st.UnsupportedDtypeError:   # one tensor the engine does not analyse: each gets its own note
        return _one_by_one(conditions, values, prevs, keep_previous)
    return [[c.evaluate(None) if isinstance(c, OperatorOverflowCondition) else c.evaluate(stats) for c in conditions]
            for stats in all_stats]


def _one_by_one(conditions: Sequence[Condition], values: list, prevs: list,
                keep_previous: bool) -> list[list[ConditionResult]]:
    keep = [st.kept_view(v, p, f"previous[{i}]") if keep_previous and p is not None else None
            for i, (v, p) in enumerate(zip(values, prevs))]
    results = [check_many(conditions, v, p) for v, p in zip(values, prevs)]
    for value, target in zip(values, keep):
        if target is not None:
            np.copyto(target, np.asarray(value).reshape(-1))
    return results


__all__ = ["check_many", "check_tensors", "statistics_plan"]
