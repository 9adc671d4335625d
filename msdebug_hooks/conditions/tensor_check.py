"""Conditions judged on one tensor: what they need (``statistics_plan``, ``check_plan``) and one statistics pass
shared by them all (``check_one_tensor``).

Why below the condition classes: ``Condition.check`` is this with one condition, and ``checks.check_many`` with
several; the classes say what they need and how they judge, and this module only asks a condition for that (the
``Checked`` protocol), so the classes can use it without the batch machinery above them.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Protocol, Sequence

from msdebug_hooks.conditions._dtypes import UnsupportedDtypeError
from msdebug_hooks.conditions.stats import request_statistics
from msdebug_hooks.conditions.tensor_statistics import TensorStatistics
from msdebug_hooks.conditions.totals import Bounds, StatisticsRequest


class Checked(Protocol):
    """What a check reads of a condition (``conditions.Condition`` provides it)."""

    reads_values: bool
    needs_previous: bool

    def statistics_needed(self) -> set[str]: ...

    def range_bounds(self) -> Bounds | None: ...

    def allclose_tolerance(self) -> Bounds | None: ...

    def evaluate(self, s: TensorStatistics | None) -> Any: ...

    def not_analysed(self, note: str) -> Any: ...


class StatisticsPlan(NamedTuple):
    """Union of what conditions need: statistic names, (start, end) ranges, (rtol, atol) allclose tolerances."""

    needed: set[str]
    ranges: list[Bounds]
    tolerances: list[Bounds]


def statistics_plan(conditions: Iterable[Checked]) -> StatisticsPlan:
    """Union of what ``conditions`` need: (statistic names, ranges, allclose tolerances)."""
    need: set[str] = set()
    ranges: list[Bounds] = []
    tolerances: list[Bounds] = []
    for c in conditions:
        need |= c.statistics_needed()
        rng = c.range_bounds()
        if rng is not None and rng not in ranges:
            ranges.append(rng)
        tol = c.allclose_tolerance()
        if tol is not None and tol not in tolerances:
            tolerances.append(tol)
    return StatisticsPlan(need, ranges, tolerances)


class CheckPlan(NamedTuple):
    """What a condition list asks of a tensor, worked out once per list: the statistics request, and whether any
    condition reads the previous value."""

    request: StatisticsRequest
    reads_previous: bool


_PLANS: dict[tuple, CheckPlan | None] = {}   # condition list -> its plan (a check repeats the same list)
_MISSING: Any = object()


def check_plan(conditions: Sequence[Checked]) -> CheckPlan | None:
    """The plan of ``conditions``, or None when no condition reads values. Kept per condition list (conditions hash
    and compare by type and parameters); a list with an unhashable condition is planned anew each time."""
    key = tuple(conditions)
    try:
        plan = _PLANS.get(key, _MISSING)
    except TypeError:
        return _new_plan(conditions)
    if plan is _MISSING:
        if len(_PLANS) > 64:
            _PLANS.clear()
        plan = _PLANS[key] = _new_plan(conditions)
    return plan


def _new_plan(conditions: Sequence[Checked]) -> CheckPlan | None:
    active = [c for c in conditions if c.reads_values]
    if not active:
        return None
    need, ranges, tolerances = statistics_plan(active)
    return CheckPlan(StatisticsRequest.checked(need, ranges, tolerances), any(c.needs_previous for c in active))


def check_one_tensor(conditions: Sequence[Checked], value: Any, previous: Any = None, *,
                     bfloat16: bool = False) -> list[Any]:
    """Every condition's ``ConditionResult`` on ``value``, from one statistics pass, in the given order.

    ``previous`` is read only if some condition needs it. A tensor of a dtype the engine does not analyse gets a
    result saying so from every condition that reads values.
    """
    plan = check_plan(conditions)
    stats = None
    note = ""
    if plan is not None:
        try:
            stats = request_statistics(value, previous if plan.reads_previous else None, plan.request,
                                       bfloat16=bfloat16)
        except UnsupportedDtypeError as exc:
            note = f"not analysed: {exc}"
    return [c.evaluate(None) if not c.reads_values else c.not_analysed(note) if stats is None else c.evaluate(stats)
            for c in conditions]
