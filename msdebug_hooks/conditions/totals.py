"""The running totals of a statistics pass: the one type every route fills, and the one function that finishes it.

Why: four routes compute the same statistics (numpy over chunks, numpy over segments, the compiled pass over one
tensor, the compiled pass over a batch's segments). Each ends in ``Totals`` (a batch keeps them as state arrays,
``state``, whose rows and columns read out as ``Totals``), and ``finish`` is the only place that turns totals into
``TensorStatistics`` with MindSpore's formulas (``tensor_statistics``). ``StatisticsRequest`` is what a caller asks
for, checked once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Iterable, NamedTuple, Sequence, Union

import numpy as np

from msdebug_hooks.conditions.tensor_statistics import (
    ABS_MEAN, MAX, MEAN, MIN, NEGATIVE_COUNT, POSITIVE_COUNT, SD, UPDATE_RATIO, UPDATE_RATIO_EPSILON, ZERO_COUNT,
    TensorStatistics, checked_statistic_names, new_statistics)

Bounds = tuple[float, float]
#: a total of one tensor, or one entry per tensor of a batch (``state.columns``)
Count = Union[int, np.ndarray]
Real = Union[float, np.ndarray]


class StatisticsRequest(NamedTuple):
    """What a pass computes: statistic names (``ALL_STATISTICS``; nan/inf counts always come), (start, end) ranges
    whose share of elements is counted, and (rtol, atol) allclose tolerances against the previous value."""

    needed: frozenset[str]
    ranges: tuple[Bounds, ...] = ()
    tolerances: tuple[Bounds, ...] = ()

    @classmethod
    def checked(cls, needed: Collection[str], ranges: Iterable[Bounds] = (),
                tolerances: Iterable[Bounds] = ()) -> "StatisticsRequest":
        """The request with its names checked (``ConfigError`` naming unknown ones) and its bounds as floats; kept
        for arguments that can be a dictionary key (a caller asks the same every step)."""
        try:
            key: tuple | None = (needed, ranges, tolerances)
            found = _CHECKED.get(key)
        except TypeError:      # a set or a list: checked anew
            key = found = None
        if found is None:
            found = cls(checked_statistic_names(needed), tuple((float(a), float(b)) for a, b in ranges),
                        tuple((float(r), float(a)) for r, a in tolerances))
            if key is not None:
                if len(_CHECKED) > 256:
                    _CHECKED.clear()
                _CHECKED[key] = found
        return found

    @property
    def wants_previous(self) -> bool:
        """Whether a statistic of the request reads the previous value."""
        return UPDATE_RATIO in self.needed or bool(self.tolerances)


_CHECKED: dict[tuple, StatisticsRequest] = {}


@dataclass(slots=True)
class Totals:
    """Running totals of a pass: of one tensor (Python numbers), or of a batch's tensors (``state.columns``: one
    array entry per tensor; ``in_range`` and ``close`` then of shape (tensors, ranges) and (tensors, tolerances)).

    ``mx`` / ``mn`` skip NaN (``any_number``: a non-NaN element was seen); ``sum``, ``mean`` and ``m2`` are the
    running sum, mean and sum of squared deviations (Chan et al.'s merge); ``diff_sum`` / ``prev_abs_sum`` are
    sum |x - p| and sum |p|; ``in_range`` counts per range, ``close`` per tolerance whether every element was close.
    """

    n: Count
    nan: Count
    pinf: Count
    ninf: Count
    zero: Count
    pos: Count
    any_number: Union[bool, np.ndarray]
    mx: Real
    mn: Real
    sum: Real
    mean: Real
    m2: Real
    abs_sum: Real
    diff_sum: Real
    prev_abs_sum: Real
    in_range: Union[Sequence[int], np.ndarray]
    close: Union[Sequence[bool], np.ndarray]

    @classmethod
    def empty(cls, n_ranges: int, n_tolerances: int) -> "Totals":
        """The totals of no element: where every pass starts."""
        return cls(0, 0, 0, 0, 0, 0, False, -math.inf, math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, [0] * n_ranges,
                   [True] * n_tolerances)


class TensorTotals(NamedTuple):
    """One tensor's totals, and whether the pass already copied the tensor into the caller's keep buffer."""

    totals: Totals
    kept: bool


def finish(t: Totals, request: StatisticsRequest, dtype_name: str, has_previous: bool,
           paired: bool) -> TensorStatistics:
    """``TensorStatistics`` from one tensor's totals. ``has_previous``: a previous value was given; ``paired``: it
    was read element by element (same element count)."""
    n = t.n
    nan = math.nan
    needed = request.needed
    has_numbers = n > 0 and t.any_number
    values: dict[str, Any] = {}
    if MAX in needed:
        values["max"] = t.mx if has_numbers else nan
    if MIN in needed:
        values["min"] = t.mn if has_numbers else nan
    if MEAN in needed:
        if not n:
            values["mean"] = nan
        else:  # with ±Inf/NaN the chunk merge would turn inf into NaN: report sum / n, as numpy does
            values["mean"] = t.mean if math.isfinite(t.mean) and math.isfinite(t.sum) else t.sum / n
    if SD in needed:
        if not n:
            values["sd"] = nan
        elif n == 1:
            values["sd"] = 0.0  # the C++ returned variance 0 below two elements, whatever the element
        elif not math.isfinite(t.m2) or not math.isfinite(t.mean):
            values["sd"] = nan  # an Inf or NaN element: the C++ Welford m2 became NaN
        else:
            values["sd"] = math.sqrt(t.m2 / (n - 1))
    if ABS_MEAN in needed:
        values["abs_mean"] = t.abs_sum / n if n else nan
    if ZERO_COUNT in needed:
        values["zero_count"] = t.zero
    if POSITIVE_COUNT in needed:
        values["positive_count"] = t.pos
    if NEGATIVE_COUNT in needed:
        values["negative_count"] = n - t.nan - t.zero - t.pos
    tolerances = request.tolerances
    if has_previous and request.wants_previous:
        if UPDATE_RATIO in needed:
            if paired and n:
                values["update_ratio"] = (t.diff_sum / n) / (t.prev_abs_sum / n + UPDATE_RATIO_EPSILON)
            elif paired:
                values["update_ratio"] = 0.0 / UPDATE_RATIO_EPSILON  # empty: 0 / (0 + eps)
            else:
                values["update_ratio"] = nan  # element counts differ: p was NaN everywhere
        allclose = {tol: (t.close[i] if paired else n == 0) for i, tol in enumerate(tolerances)}
    else:
        allclose = {}
    range_pct = {rng: (100.0 * t.in_range[i] / n if n else 0.0) for i, rng in enumerate(request.ranges)}
    values.update(count=n, dtype=dtype_name, nan_count=t.nan, pos_inf_count=t.pinf, neg_inf_count=t.ninf,
                  has_previous=has_previous, range_percentages=range_pct, allclose=allclose)
    return new_statistics(values)
