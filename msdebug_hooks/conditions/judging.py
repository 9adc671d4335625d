"""Judge conditions over a batch of tensors at once: one numpy comparison per condition parameter over all tensors.

Why: a step's check is hundreds of (tensor, condition) pairs of which almost none is reportable. Building a
``TensorStatistics`` and calling ``Condition.evaluate`` for each pair cost more than the statistics pass itself
(about 8 us per pair). Here the batch's running totals (``batch.BatchTotals``) become one array per statistic with
``stats._finish``'s formulas, each condition's error code and hit are computed as masks over all tensors with
``Condition.evaluate``'s rules, and only the pairs the masks mark reportable are evaluated the usual way, on that
tensor's ``TensorStatistics``: a reported result is exactly the one ``check_tensors`` gives.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np

from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions.batch import BatchTotals
from msdebug_hooks.conditions.conditions import (Condition, OperatorOverflowCondition, TensorOverflowCondition)
from msdebug_hooks.conditions.error_codes import ERROR_INF, ERROR_NAN, ERROR_NO_PREVIOUS
from msdebug_hooks.conditions.params import OPERATORS

__all__ = ["StatisticArrays", "reportable_mask"]


class StatisticArrays:
    """The statistics of every tensor of a batch as float64 arrays (NaN where ``TensorStatistics`` holds NaN or
    None), computed on first use with ``stats._finish``'s formulas."""

    def __init__(self, found: BatchTotals) -> None:
        self.found = found
        self.n = found.count
        self.t: SimpleNamespace = found.columns()
        self._cache: dict[Any, np.ndarray] = {}

    def _get(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        value = self._cache.get(key)
        if value is None:
            with np.errstate(all="ignore"):
                value = self._cache[key] = make()
        return value

    @property
    def _counted(self) -> np.ndarray:
        return self._get("counted", lambda: self.n > 0)

    def maximum(self) -> np.ndarray:
        return self._get("max", lambda: np.where(self._counted & self.t.any_number, self.t.mx, np.nan))

    def minimum(self) -> np.ndarray:
        return self._get("min", lambda: np.where(self._counted & self.t.any_number, self.t.mn, np.nan))

    def mean(self) -> np.ndarray:
        t = self.t
        return self._get("mean", lambda: np.where(
            self._counted, np.where(np.isfinite(t.mean) & np.isfinite(t.sum), t.mean, t.sum / self.n), np.nan))

    def sd(self) -> np.ndarray:
        t, n = self.t, self.n
        return self._get("sd", lambda: np.where(
            n == 0, np.nan, np.where(n == 1, 0.0, np.where(np.isfinite(t.m2) & np.isfinite(t.mean),
                                                           np.sqrt(t.m2 / (n - 1)), np.nan))))

    def abs_mean(self) -> np.ndarray:
        return self._get("abs_mean", lambda: np.where(self._counted, self.t.abs_sum / self.n, np.nan))

    def zero_percentage(self) -> np.ndarray:
        return self._get("zero%", lambda: np.where(self._counted, 100.0 * self.t.zero / self.n, 0.0))

    def max_min(self) -> np.ndarray:
        return self._get("max_min", lambda: self.maximum() - self.minimum())

    def update_ratio(self) -> np.ndarray:
        """NaN where there is no previous value too (the statistic is None then: not evaluated)."""
        t, n, found = self.t, self.n, self.found
        return self._get("update_ratio", lambda: np.where(
            found.has_previous & found.paired,
            np.where(self._counted, (t.diff_sum / n) / (t.prev_abs_sum / n + st.UPDATE_RATIO_EPSILON),
                     0.0 / st.UPDATE_RATIO_EPSILON),
            np.nan))

    def range_percentage(self, bounds: tuple[float, float]) -> np.ndarray:
        column = self.found.ranges.index(bounds)
        return self._get(("range", bounds), lambda: np.where(
            self._counted, 100.0 * self.t.in_range[:, column] / self.n, 0.0))

    def allclose(self, tolerance: tuple[float, float]) -> np.ndarray:
        """False where there is no previous value (``TensorStatistics.allclose`` is empty then)."""
        column = self.found.tolerances.index(tolerance)
        found = self.found
        return self._get(("close", tolerance), lambda: found.has_previous & np.where(
            found.paired, self.t.close[:, column], self.n == 0))

    def error_codes(self) -> np.ndarray:
        """``Condition.evaluate``'s NaN / Inf bits per tensor."""
        t = self.t
        return self._get("errors", lambda: np.where(t.nan > 0, ERROR_NAN, 0) | np.where(
            (t.pinf > 0) | (t.ninf > 0), ERROR_INF, 0))

    def statistic(self, condition: Condition, name: str) -> np.ndarray | None:
        """The array a parameter compares (``Condition._statistic_reader``'s value per tensor), None for a name
        that is not a statistic."""
        readers = {"max": self.maximum, "min": self.minimum, "mean": self.mean, "sd": self.sd,
                   "abs_mean": self.abs_mean, "max_min": self.max_min, "zero_percentage": self.zero_percentage,
                   "abs_mean_update_ratio": self.update_ratio}
        if name in readers:
            return readers[name]()
        if name == "range_percentage":
            bounds = condition.range_bounds()
            return None if bounds is None else self.range_percentage(bounds)
        return None


#: the condition classes whose ``evaluate`` ``reportable_mask`` reproduces (any other subclass is evaluated on
#: every tensor: it may judge differently)
_KNOWN_EVALUATE = {Condition.evaluate, TensorOverflowCondition.evaluate, OperatorOverflowCondition.evaluate}


def reportable_mask(condition: Condition, arrays: StatisticArrays) -> np.ndarray:
    """Per tensor, whether ``condition.evaluate`` on its statistics is reportable (hit or error code)."""
    counted = arrays.n > 0
    evaluate = type(condition).evaluate
    if evaluate not in _KNOWN_EVALUATE:
        return counted | True
    if isinstance(condition, OperatorOverflowCondition):
        return np.zeros(arrays.n.shape, np.bool_)
    if isinstance(condition, TensorOverflowCondition):
        return counted & (arrays.error_codes() != 0)
    errors = arrays.error_codes()
    if condition.needs_previous:
        errors = errors | np.where(arrays.found.has_previous, 0, ERROR_NO_PREVIOUS)
    hit = np.zeros(arrays.n.shape, np.bool_)
    tolerance = condition.allclose_tolerance()
    if tolerance is not None:
        hit |= arrays.allclose(tolerance)
    for spec in condition.param_specs:
        if spec.name not in condition.params or not spec.operator:
            continue
        values = arrays.statistic(condition, spec.statistic)
        if values is not None:
            with np.errstate(invalid="ignore"):
                hit |= OPERATORS[spec.operator](values, condition.params[spec.name])   # NaN: never a hit
    return counted & ((errors != 0) | hit)


def masks(conditions: Sequence[Condition], arrays: StatisticArrays) -> np.ndarray:
    """(tensors, conditions) booleans: the pairs to evaluate and report."""
    if not conditions:
        return np.zeros((arrays.n.shape[0], 0), np.bool_)
    return np.stack([reportable_mask(c, arrays) for c in conditions], axis=1)
