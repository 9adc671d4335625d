"""Evaluate conditions on tensors: ``check_many`` (one tensor), ``check_tensors`` (a step's tensors, every result)
and ``find_hits`` (a step's tensors, only what is reportable).

Why separate from the condition classes: this is the loop the online debugger, the dump analyzer and callbacks run
per step; the classes only say what they need (``statistics_needed``) and how they judge (``evaluate``). Every
statistic comes from the engine ``statistics_engine.current_engine()`` gives.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np

from msdebug_hooks.conditions._dtypes import UnsupportedDtypeError
from msdebug_hooks.conditions.batch import batch_totals, compute_statistics_batch
from msdebug_hooks.conditions.conditions import Condition, ConditionResult
from msdebug_hooks.conditions.judging import judging_rules, reportable_pairs
from msdebug_hooks.conditions.kept import kept_views
from msdebug_hooks.conditions.rules import JudgingRule
from msdebug_hooks.conditions.state import BatchTotals
from msdebug_hooks.conditions.statistics_engine import current_engine
from msdebug_hooks.conditions.tensor_check import check_one_tensor, check_plan, statistics_plan
from msdebug_hooks.conditions.tensor_statistics import TensorStatistics
from msdebug_hooks.conditions.totals import StatisticsRequest
from msdebug_hooks.errors import ConfigError


class Hit(NamedTuple):
    """A reportable result of ``find_hits``: which tensor, which condition (indices into the call's lists), and
    the result ``check_tensors`` gives for the pair."""

    tensor: int
    condition: int
    result: ConditionResult


class BatchPlan(NamedTuple):
    """What a condition list asks of a batch, worked out once per list: the statistics request, whether any
    condition reads the previous values (``tensor_check.CheckPlan``), and each condition's judging rule."""

    request: StatisticsRequest
    reads_previous: bool
    rules: list[JudgingRule]


def check_many(conditions: Sequence[Condition], value: Any, previous: Any = None, *,
               bfloat16: bool = False) -> list[ConditionResult]:
    """Evaluate several conditions on one tensor with a single statistics pass; results in the given order.

    ``previous`` is read only if some condition needs it. ``bfloat16=True`` reads 2-byte words as bfloat16.
    """
    for i, c in enumerate(conditions):
        if not isinstance(c, Condition):
            raise ConfigError(f"conditions[{i}]", c, "a Condition instance (e.g. TensorTooLargeCondition(...))")
    return check_one_tensor(conditions, value, previous, bfloat16=bfloat16)


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
    plan = _batch_plan(conditions)
    if plan is None:
        return _one_by_one(conditions, values, prevs, prevs if keep_previous else None)   # names a bad condition
    request = plan.request
    try:
        all_stats = compute_statistics_batch(values, prevs if plan.reads_previous or keep_previous else None,
                                             request.needed, ranges=request.ranges,
                                             allclose_tolerances=request.tolerances, keep_previous=keep_previous)
    except UnsupportedDtypeError:   # one tensor the engine does not analyse: each gets its own note
        return _one_by_one(conditions, values, prevs, prevs if keep_previous else None)
    return [[c.evaluate(stats if c.reads_values else None) for c in conditions] for stats in all_stats]


def find_hits(conditions: Sequence[Condition], tensors: Iterable[Any], previous: Iterable[Any] | None = None, *,
              keep_previous: bool = False, keep_into: Iterable[Any] | None = None) -> list[Hit]:
    """The reportable results of ``check_tensors`` (hit, or an error code), as ``Hit`` (tensor index, condition
    index, result), in (tensor, condition) order, without judging every pair in Python.

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
    request = plan.request
    read = prevs if plan.reads_previous or targets is not None else None
    layout = current_engine().prepared_layout(request, values, read if read is not None else [None] * len(values),
                                              targets)
    if layout is not None:   # the same statistics as batch_totals, from buffers made on an earlier call
        try:
            found = layout.fill(values, prevs, targets)
            return _hits(conditions, found, plan.rules, layout.reportable_pairs(plan.rules))
        finally:
            layout.release()
    try:
        found = batch_totals(values, read, request.needed, ranges=request.ranges,
                             allclose_tolerances=request.tolerances, keep_into=targets)
    except UnsupportedDtypeError:   # nothing was computed or copied: each tensor gets its own note
        return _reportable(_one_by_one(conditions, values, prevs, targets))
    return _hits(conditions, found, plan.rules)


def _hits(conditions: Sequence[Condition], found: BatchTotals, rules: list[JudgingRule],
          pairs: list[list[int]] | None = None) -> list[Hit]:
    """The reportable hits of a batch's totals: judged as arrays (or ``pairs``, marked by the compiled pre-judging
    of a prepared layout), evaluated where marked."""
    hits: list[Hit] = []
    statistics: dict[int, TensorStatistics] = {}
    for tensor, index in (reportable_pairs(conditions, found, rules) if pairs is None else pairs):
        stats = statistics.get(tensor)
        if stats is None:
            stats = statistics[tensor] = found.statistics(tensor)
        condition = conditions[index]
        result = condition.evaluate(stats if condition.reads_values else None)
        if result.reportable:
            hits.append(Hit(tensor, index, result))
    return hits


_PLANS: dict[tuple, BatchPlan] = {}   # condition list -> its batch plan (a debugger checks the same list each step)


def _batch_plan(conditions: Sequence[Condition]) -> BatchPlan | None:
    """The plan of a batch, or None when ``check_many`` must judge one by one (no condition that reads values, or
    an entry that is not a condition)."""
    if any(not isinstance(c, Condition) for c in conditions):
        return None
    key = tuple(conditions)       # conditions hash and compare by type and parameters
    plan = _PLANS.get(key)
    if plan is None:
        checked = check_plan(key)
        if checked is None:
            return None
        if len(_PLANS) > 64:
            _PLANS.clear()
        plan = _PLANS[key] = BatchPlan(checked.request, checked.reads_previous, judging_rules(conditions))
    return plan


def _reportable(results: list[list[ConditionResult]]) -> list[Hit]:
    return [Hit(t, c, r) for t, per_tensor in enumerate(results) for c, r in enumerate(per_tensor) if r.reportable]


def _one_by_one(conditions: Sequence[Condition], values: list, prevs: list,
                targets: list | None) -> list[list[ConditionResult]]:
    """``check_many`` per tensor; ``targets`` (None, or one entry per tensor) receive the values afterwards."""
    if targets is not None and len(targets) != len(values):
        raise ConfigError("keep_into", f"{len(targets)} entries", f"one entry per value ({len(values)})")
    field_name = "previous" if targets is prevs else "keep_into"
    keep = kept_views(values, targets, field_name)
    results = [check_many(conditions, v, p) for v, p in zip(values, prevs)]
    for value, target in zip(values, keep):
        if target is not None:
            np.copyto(target, np.asarray(value).reshape(-1))
    return results


__all__ = ["BatchPlan", "Hit", "check_many", "check_tensors", "find_hits", "statistics_plan"]
