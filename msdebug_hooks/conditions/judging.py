"""Judge conditions over a batch of tensors at once: one numpy comparison per condition parameter over all tensors.

Why: a step's check is hundreds of (tensor, condition) pairs of which almost none is reportable. Building a
``TensorStatistics`` and calling ``Condition.evaluate`` for each pair cost more than the statistics pass itself.
Here the batch's running totals (``state.BatchTotals.columns``: ``Totals`` of arrays) become one array per
statistic with ``totals.finish``'s formulas, each condition's error code and hit are computed as masks over all
tensors with ``Condition.evaluate``'s rules (``rules.JudgingRule``, worked out once per condition list), and only
the pairs the masks mark reportable are evaluated the usual way, on that tensor's ``TensorStatistics``: a reported
result is exactly the one ``check_tensors`` gives.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from msdebug_hooks.conditions.conditions import Condition, OperatorOverflowCondition, TensorOverflowCondition
from msdebug_hooks.conditions.params import OPERATORS
from msdebug_hooks.conditions.rules import ALL, COMPARE, NEVER, OVERFLOW, Comparison, JudgingRule
from msdebug_hooks.conditions.state import BatchTotals
from msdebug_hooks.conditions.tensor_statistics import UPDATE_RATIO_EPSILON

__all__ = ["StatisticArrays", "judging_rules", "reportable_mask", "reportable_pairs"]


class StatisticArrays:
    """The statistics of every tensor of a batch as float64 arrays, computed on first use with ``totals.finish``'s
    formulas. A value is exact where the tensor has elements and no NaN/Inf (and, for the previous-value ones, a
    paired previous value); elsewhere an error code or "not evaluated" decides, so it is not guarded (NaN marks
    "not evaluated" where that matters). Call it inside ``np.errstate(all="ignore")``."""

    def __init__(self, found: BatchTotals) -> None:
        self.found = found
        # n_safe: empty tensors are never judged, so there is no 0/0 to look at
        self.n, self.n_safe, self.counted, self.has_previous, self.paired = found.descriptions()
        self.all_paired = all(found.paired_list)
        self.t = found.columns()
        t = self.t
        self.special = (t.nan | t.pinf | t.ninf) != 0  # evaluate's NaN / Inf error bits
        #: every tensor has elements and no NaN/Inf (the usual step): a mask is the hit itself
        self.clean = 0 not in found.counts_list and not np.count_nonzero(self.special)
        self.clean_with_previous = self.clean and all(found.has_previous_list)
        self._cache: dict[Any, np.ndarray] = {}

    def _get(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = make()
        return value

    def maximum(self) -> np.ndarray:
        return self.t.mx        # a tensor without NaN has a number

    def minimum(self) -> np.ndarray:
        return self.t.mn

    def mean(self) -> np.ndarray:
        t = self.t
        return self._get("mean", lambda: np.where(np.isfinite(t.mean) & np.isfinite(t.sum), t.mean,
                                                  t.sum / self.n_safe))

    def sd(self) -> np.ndarray:
        t, n = self.t, self.n
        return self._get("sd", lambda: np.where(
            n == 1, 0.0, np.where(np.isfinite(t.m2) & np.isfinite(t.mean), np.sqrt(t.m2 / np.maximum(n - 1, 1)),
                                  np.nan)))

    def abs_mean(self) -> np.ndarray:
        return self._get("abs_mean", lambda: self.t.abs_sum / self.n_safe)

    def zero_percentage(self) -> np.ndarray:
        return self._get("zero%", lambda: 100.0 * self.t.zero / self.n_safe)

    def max_min(self) -> np.ndarray:
        return self._get("max_min", lambda: self.t.mx - self.t.mn)

    def update_ratio(self) -> np.ndarray:
        """NaN (not evaluated) where the previous value has another element count."""
        t, n = self.t, self.n_safe
        if self.all_paired:
            return self._get("update_ratio", lambda: (t.diff_sum / n) / (t.prev_abs_sum / n + UPDATE_RATIO_EPSILON))
        return self._get("update_ratio", lambda: np.where(
            self.paired, (t.diff_sum / n) / (t.prev_abs_sum / n + UPDATE_RATIO_EPSILON), np.nan))

    def range_percentage(self, bounds: tuple[float, float]) -> np.ndarray:
        column = self.found.ranges.index(bounds)
        return self._get(("range", bounds), lambda: 100.0 * self.t.in_range[:, column] / self.n_safe)

    def allclose(self, tolerance: tuple[float, float]) -> np.ndarray:
        """False where the previous value has another element count (``totals.finish``)."""
        column = self.found.tolerances.index(tolerance)
        if self.all_paired:
            return self._get(("close", tolerance), lambda: self.t.close[:, column])
        return self._get(("close", tolerance), lambda: self.paired & self.t.close[:, column])

    def no_previous(self) -> np.ndarray:
        """Where a change condition has an error code: NaN, Inf or no previous value."""
        return self._get("no_previous", lambda: self.special | ~self.has_previous)


#: parameter statistic name -> the ``StatisticArrays`` method that gives it
_READERS = {"max": "maximum", "min": "minimum", "mean": "mean", "sd": "sd", "abs_mean": "abs_mean",
            "max_min": "max_min", "zero_percentage": "zero_percentage", "abs_mean_update_ratio": "update_ratio"}


#: the condition classes whose ``evaluate`` ``reportable_mask`` reproduces (any other subclass is evaluated on
#: every tensor: it may judge differently)
_KNOWN_EVALUATE = {Condition.evaluate, TensorOverflowCondition.evaluate, OperatorOverflowCondition.evaluate}


def reportable_mask(condition: Condition, arrays: StatisticArrays) -> np.ndarray:
    """Per tensor, whether ``condition.evaluate`` on its statistics is reportable (hit or error code); inside
    ``np.errstate(all="ignore")``."""
    return _mask(_rule(condition), arrays)


def _rule(condition: Condition) -> JudgingRule:
    """How ``reportable_mask`` judges ``condition``, worked out once per condition list: every tensor for a subclass
    with its own ``evaluate``, never, on NaN/Inf, or by its parameters' comparisons."""
    if type(condition).evaluate not in _KNOWN_EVALUATE:
        return JudgingRule(ALL)
    if isinstance(condition, OperatorOverflowCondition):
        return JudgingRule(NEVER)
    if isinstance(condition, TensorOverflowCondition):
        return JudgingRule(OVERFLOW)
    compares = []
    for spec in condition.param_specs:
        if spec.name not in condition.params or not spec.operator:
            continue
        reader = _READERS.get(spec.statistic)
        bounds = condition.range_bounds() if spec.statistic == "range_percentage" else None
        if reader is not None or bounds is not None:
            compares.append(Comparison(reader, bounds, spec.operator, condition.params[spec.name]))
    return JudgingRule(COMPARE, condition.allclose_tolerance(), tuple(compares), condition.needs_previous)


def judging_rules(conditions: Sequence[Condition]) -> list[JudgingRule]:
    """The rule of each condition (``_rule``): a caller judging the same list every step keeps them."""
    return [_rule(c) for c in conditions]


def _mask(rule: JudgingRule, arrays: StatisticArrays) -> np.ndarray:
    counted = arrays.counted
    what = rule.kind
    if what == ALL:
        return counted | True
    if what == NEVER:
        return np.zeros(arrays.n.shape, np.bool_)
    if what == OVERFLOW:
        return counted & arrays.special
    _, tolerance, compares, needs_previous = rule
    hit = arrays.allclose(tolerance) if tolerance is not None else None
    for reader, bounds, operator, limit in compares:
        values = getattr(arrays, reader)() if reader is not None else arrays.range_percentage(bounds)
        param_hit = OPERATORS[operator](values, limit)   # NaN: never a hit
        hit = param_hit if hit is None else hit | param_hit
    if hit is not None and (arrays.clean_with_previous if needs_previous else arrays.clean):
        return hit
    errors = arrays.no_previous() if needs_previous else arrays.special
    return counted & (errors if hit is None else errors | hit)


def reportable_pairs(conditions: Sequence[Condition], found: BatchTotals,
                     rules: list[JudgingRule] | None = None) -> list[list[int]]:
    """[tensor index, condition index] of the pairs to evaluate and report, in (tensor, condition) order;
    ``rules``: ``judging_rules(conditions)`` when the caller keeps them."""
    if not conditions or not found.size:
        return []
    marked = np.empty((found.size, len(conditions)), np.bool_)
    with _float_errors_ignored():
        arrays = StatisticArrays(found)
        for j, rule in enumerate(rules if rules is not None else judging_rules(conditions)):
            marked[:, j] = _mask(rule, arrays)
    return np.argwhere(marked).tolist() if marked.any() else []


class _ErrorObjectIgnored:
    """``np.errstate(all="ignore")`` for numpy 1.x, whose per-thread error state is one list: setting it directly
    costs a fraction of what ``np.errstate`` costs, which shows against a step's whole judging."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        self.saved = np.geterrobj()
        np.seterrobj([self.saved[0], 0, self.saved[2]])   # error mask 0: every floating-point error ignored

    def __exit__(self, *exc: object) -> None:
        np.seterrobj(self.saved)


def _float_errors_ignored() -> Any:
    return _ErrorObjectIgnored() if hasattr(np, "seterrobj") else np.errstate(all="ignore")
