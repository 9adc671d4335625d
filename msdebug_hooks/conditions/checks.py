"""Evaluate conditions on tensors: one statistics pass per tensor, shared by every condition that watches it.

Why separate from the condition classes: this is the loop the online debugger, the dump analyzer and callbacks run
per tensor; the classes only say what they need (``statistics_needed``) and how they judge (``evaluate``).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions import _engine
from msdebug_hooks.conditions.batch import BatchTotals, batch_totals, compute_statistics_batch
from msdebug_hooks.conditions.conditions import Condition, ConditionResult, OperatorOverflowCondition, ParamResult
from msdebug_hooks.conditions.judging import judging_rules, reportable_pairs
from msdebug_hooks.conditions.layout import prepared_layout
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
        return _one_by_one(conditions, values, prevs, prevs if keep_previous else None)   # names a bad condition
    need, ranges, tolerances = statistics_plan(active)
    wants_previous = any(c.needs_previous for c in active)
    try:
        all_stats = compute_statistics_batch(values, prevs if wants_previous or keep_previous else None, need,
                                             ranges=ranges, allclose_tolerances=tolerances,
                                             keep_previous=keep_previous)
    except st.UnsupportedDtypeError:   # one tensor the engine does not analyse: each gets its own note
        return _one_by_one(conditions, values, prevs, prevs if keep_previous else None)
    return [[c.evaluate(None) if isinstance(c, OperatorOverflowCondition) else c.evaluate(stats) for c in conditions]
            for stats in all_stats]


def find_hits(conditions: Sequence[Condition], tensors: Iterable[Any], previous: Iterable[Any] | None = None, *,
              keep_previous: bool = False,
              keep_into: Iterable[Any] | None = None) -> list[tuple[int, int, ConditionResult]]:
    """The reportable results of ``check_tensors`` (hit, or an error code), as (tensor index, condition index,
    result), in (tensor, condition) order, without judging every pair in Python.

    The batch's statistics are judged as arrays (one comparison per condition parameter over all tensors,
    ``judging``); only the pairs found reportable are evaluated by ``Condition.evaluate`` on their tensor's
    ``TensorStatistics``, so a result is exactly the one ``check_tensors`` gives. ``keep_previous=True`` as in
    ``check_tensors``; ``keep_into`` (one entry per tensor, None or a writable C-contiguous array of its dtype and
    size) receives each tensor's values instead, copied in the statistics pass where possible: a caller keeping
    last step's values in a second buffer (so that ``previous`` stays as it was) pays no separate copy pass.
    """
    values = list(tensors)
    prevs = list(previous) if previous is not None else [None] * len(values)
    if keep_previous and keep_into is not None:
        raise ConfigError("keep_into", "given with keep_previous=True", "one of them: keep_previous copies into "
                                                                         "previous, keep_into into other arrays")
    targets = prevs if keep_previous else (list(keep_into) if keep_into is not None else None)
    plan = _batch_plan(conditions)
    if plan is None:
        return _reportable(_one_by_one(conditions, values, prevs, targets))
    need, ranges, tolerances, wants_previous, rules = plan
    read = prevs if wants_previous or targets is not None else None
    compiled = _engine.kernels()
    layout = (prepared_layout(compiled, need, ranges, tolerances, wants_previous, values,
                              read if read is not None else [None] * len(values), targets)
              if compiled is not None else None)
    if layout is not None:   # the same statistics as batch_totals, from buffers made on an earlier call
        try:
            found = layout.fill(values, prevs, targets)
            return _hits(conditions, found, rules, layout.reportable_pairs(rules))
        finally:
            layout.release()
    try:
        found = batch_totals(values, read, need, ranges=ranges,
                             allclose_tolerances=tolerances, keep_into=targets)
    except st.UnsupportedDtypeError:   # nothing was computed or copied: each tensor gets its own note
        return _reportable(_one_by_one(conditions, values, prevs, targets))
    return _hits(conditions, found, rules)


def _hits(conditions: Sequence[Condition], found: BatchTotals, rules: list[tuple],
          pairs: list[list[int]] | None = None) -> list[tuple[int, int, ConditionResult]]:
    """The reportable (tensor, condition, result) of a batch's totals: judged as arrays (or ``pairs``, marked by
    the compiled pre-judging of a prepared layout), evaluated where marked."""
    hits: list[tuple[int, int, ConditionResult]] = []
    statistics: dict[int, st.TensorStatistics] = {}
    for tensor, index in (reportable_pairs(conditions, found, rules) if pairs is None else pairs):
        stats = statistics.get(tensor)
        if stats is None:
            stats = statistics[tensor] = found.statistics(tensor)
        condition = conditions[index]
        result = condition.evaluate(None if isinstance(condition, OperatorOverflowCondition) else stats)
        if result.reportable:
            hits.append((tensor, index, result))
    return hits


_PLANS: dict[tuple, tuple] = {}   # condition list -> its batch plan (a debugger checks the same list each step)


def _batch_plan(conditions: Sequence[Condition]) -> tuple[frozenset[str], tuple, tuple, bool, list] | None:
    """(statistics needed, ranges, tolerances, whether a previous value is read, judging rules) for a batch, or
    None when ``check_many`` must judge one by one (no condition that reads values, or an entry that is not a
    condition)."""
    if any(not isinstance(c, Condition) for c in conditions):
        return None
    key = tuple(conditions)       # conditions hash and compare by type and parameters
    plan = _PLANS.get(key)
    if plan is None:
        active = [c for c in conditions if not isinstance(c, OperatorOverflowCondition)]
        if not active:
            return None
        need, ranges, tolerances = statistics_plan(active)
        if len(_PLANS) > 64:
            _PLANS.clear()
        plan = _PLANS[key] = (st.checked_statistic_names(need), tuple(ranges), tuple(tolerances),
                              any(c.needs_previous for c in active), judging_rules(conditions))
    return plan


def _reportable(results: list[list[ConditionResult]]) -> list[tuple[int, int, ConditionResult]]:
    return [(t, c, r) for t, per_tensor in enumerate(results) for c, r in enumerate(per_tensor) if r.reportable]


def _one_by_one(conditions: Sequence[Condition], values: list, prevs: list,
                targets: list | None) -> list[list[ConditionResult]]:
    """``check_many`` per tensor; ``targets`` (None, or one entry per tensor) receive the values afterwards."""
    if targets is not None and len(targets) != len(values):
        raise ConfigError("keep_into", f"{len(targets)} entries", f"one entry per value ({len(values)})")
    field_name = "previous" if targets is prevs else "keep_into"
    keep = [st.kept_view(v, t, f"{field_name}[{i}]") if targets is not None and t is not None else None
            for i, (v, t) in enumerate(zip(values, targets or [None] * len(values)))]
    results = [check_many(conditions, v, p) for v, p in zip(values, prevs)]
    for value, target in zip(values, keep):
        if target is not None:
            np.copyto(target, np.asarray(value).reshape(-1))
    return results


__all__ = ["check_many", "check_tensors", "find_hits", "statistics_plan"]
