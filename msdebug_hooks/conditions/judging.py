"""Judge conditions over a batch of tensors at once: one numpy comparison per condition parameter over all tensors.

Why: a step's check is hundreds of (tensor, condition) pairs of which almost none is reportable. Building a
``TensorStatistics`` and calling ``Condition.evaluate`` for each pair cost more than the statistics pass itself
(about 8 us per pair). Here the batch's running totals (``batch.BatchTotals``) become one array per statistic with
``stats._finish``'s formulas, each condition's error code and hit are computed as masks over all tensors with
``Condition.evaluate``'s rules, and only the pairs the masks mark reportable are evaluated the usual way, on that
tensor's ``TensorStatistics``: a reported result is exactly the one ``check_tensors`` gives.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions.batch import BatchTotals
from msdebug_hooks.conditions.conditions import Condition, OperatorOverflowCondition, TensorOverflowCondition
from msdebug_hooks.conditions.params import OPERATORS

__all__ = ["StatisticArrays", "compiled_rules", "judging_rules", "reportable_mask", "reportable_pairs"]


class StatisticArrays:
    """The statistics of every tensor of a batch as float64 arrays, computed on first use with ``stats._finish``'s
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
            return self._get("update_ratio", lambda: (t.diff_sum / n) / (t.prev_abs_sum / n + st.UPDATE_RATIO_EPSILON))
        return self._get("update_ratio", lambda: np.where(
            self.paired, (t.diff_sum / n) / (t.prev_abs_sum / n + st.UPDATE_RATIO_EPSILON), np.nan))

    def range_percentage(self, bounds: tuple[float, float]) -> np.ndarray:
        column = self.found.ranges.index(bounds)
        return self._get(("range", bounds), lambda: 100.0 * self.t.in_range[:, column] / self.n_safe)

    def allclose(self, tolerance: tuple[float, float]) -> np.ndarray:
        """False where the previous value has another element count (``stats._finish``)."""
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


def _rule(condition: Condition) -> tuple:
    """How ``reportable_mask`` judges ``condition``, worked out once per condition list: ("all",)
    for a subclass with its own ``evaluate``, ("never",), ("overflow",), or ("compare", allclose tolerance or None,
    [(reader, range bounds or None, operator name, parameter value)], whether a previous value is needed)."""
    if type(condition).evaluate not in _KNOWN_EVALUATE:
        return ("all",)
    if isinstance(condition, OperatorOverflowCondition):
        return ("never",)
    if isinstance(condition, TensorOverflowCondition):
        return ("overflow",)
    compares = []
    for spec in condition.param_specs:
        if spec.name not in condition.params or not spec.operator:
            continue
        reader = _READERS.get(spec.statistic)
        bounds = condition.range_bounds() if spec.statistic == "range_percentage" else None
        if reader is not None or bounds is not None:
            compares.append((reader, bounds, spec.operator, condition.params[spec.name]))
    return ("compare", condition.allclose_tolerance(), compares, condition.needs_previous)


def judging_rules(conditions: Sequence[Condition]) -> list[tuple]:
    """The rule of each condition (``_rule``): a caller judging the same list every step keeps them."""
    return [_rule(c) for c in conditions]


def compiled_rules(k: Any, rules: Sequence[tuple], ranges: tuple, tolerances: tuple) -> tuple[np.ndarray, ...]:
    """``rules`` as the tables of the compiled pre-judging kernel (``k.mark_reportable``): per condition (kind,
    allclose column or -1, needs previous, first and end comparison row); per comparison (statistic, range column
    or -1, operator); the comparisons' limits."""
    kinds = {"all": k.JUDGE_ALL, "never": k.JUDGE_NEVER, "overflow": k.JUDGE_OVERFLOW, "compare": k.JUDGE_COMPARE}
    statistics = {"maximum": k.STAT_MAX, "minimum": k.STAT_MIN, "mean": k.STAT_MEAN, "sd": k.STAT_SD,
                  "abs_mean": k.STAT_ABS_MEAN, "zero_percentage": k.STAT_ZERO_PERCENTAGE,
                  "max_min": k.STAT_MAX_MIN, "update_ratio": k.STAT_UPDATE_RATIO}
    operators = {"gt": k.OP_GT, "lt": k.OP_LT, "ge": k.OP_GE, "le": k.OP_LE}
    conditions, comparisons, limits = [], [], []
    for rule in rules:
        if rule[0] != "compare":
            conditions.append((kinds[rule[0]], -1, 0, 0, 0))
            continue
        _, tolerance, compares, needs_previous = rule
        first = len(comparisons)
        for reader, bounds, operator, limit in compares:
            if reader is None:
                comparisons.append((k.STAT_RANGE, ranges.index(bounds), operators[operator]))
            else:
                comparisons.append((statistics[reader], -1, operators[operator]))
            limits.append(float(limit))
        column = -1 if tolerance is None else tolerances.index(tolerance)
        conditions.append((k.JUDGE_COMPARE, column, int(bool(needs_previous)), first, len(comparisons)))
    return (np.array(conditions, np.int64).reshape(-1, 5), np.array(comparisons, np.int64).reshape(-1, 3),
            np.array(limits, np.float64))


def _mask(rule: tuple, arrays: StatisticArrays) -> np.ndarray:
    counted = arrays.counted
    what = rule[0]
    if what == "all":
        return counted | True
    if what == "never":
        return np.zeros(arrays.n.shape, np.bool_)
    if what == "overflow":
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
                     rules: list[tuple] | None = None) -> list[list[int]]:
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
    costs about 1 us where ``np.errstate`` costs about 7 (a step's whole judging is a few tens)."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        self.saved = np.geterrobj()
        np.seterrobj([self.saved[0], 0, self.saved[2]])   # error mask 0: every floating-point error ignored

    def __exit__(self, *exc: object) -> None:
        np.seterrobj(self.saved)


def _float_errors_ignored() -> Any:
    return _ErrorObjectIgnored() if hasattr(np, "seterrobj") else np.errstate(all="ignore")
