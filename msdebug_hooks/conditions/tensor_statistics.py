"""What the watchpoint statistics are: their names, ``TensorStatistics``, and MindSpore's rules for each.

Why a module of its own: every route that computes statistics (``statistics_engine``), the final formulas
(``totals.finish``) and the conditions that read them (``conditions``) share these definitions, and none of them
needs the others to know what a statistic is.

Semantics (MindSpore ``tensor_summary.cc`` ``SummarizeTensor``; every element cast to ``double``):

* ``max`` / ``min``: over every non-NaN element, ±Inf included. The C++ folded ``std::max(max, x)``, which keeps the
  accumulator when ``x`` is NaN, so NaN never became the max. With no non-NaN element we report NaN (the C++ kept its
  ±DBL_MAX start values, which never surfaced: a NaN in the tensor stops every comparison).
* ``mean`` / ``sd`` / ``abs_mean``: over all elements, so any NaN makes them NaN and ±Inf makes them ±Inf or NaN, as
  the C++ Welford loop did. ``sd`` is the sample standard deviation (divisor n-1; 0 for one element).
* ``update_ratio`` = mean(|x-p|) / (mean(|p|) + 1e-9) and ``allclose`` = AND of |x-p| <= atol + rtol*|p|, in float64,
  with ``p`` the previous value at the same flat (C-order) index. No previous value: ``has_previous`` is False and
  both are None. Element counts differ: MindSpore used p = NaN, so ``update_ratio`` is NaN and ``allclose`` False.
* ``range_percentage`` = 100 * #{start <= x <= end} / n, bounds compared in double precision.
* Empty tensors: counts 0, every float statistic NaN (MindSpore skipped tensors without elements).

Dtypes: bool, int8-64, uint8-64, float16/32/64 (as MindSpore's ``GetSummaryPtr``) and bfloat16 (an ``ml_dtypes``
array, or raw uint16 words with ``bfloat16=True``), read as float32. Anything else raises ``UnsupportedDtypeError``.

Accuracy: tensors of up to ``SMALL_TENSOR`` elements are summed in float64, like the C++ loop. Larger float32
tensors are summed in float32 per block or chunk and combined in float64 across them (about 1e-7 relative), each
summed around a mean so that ``sd`` does not cancel. Max, min, every count, range shares and allclose are exact in
both engines.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Collection

# --- names of the statistics a caller can ask for ------------------------------------------------------------------
MAX, MIN, MEAN, SD, ABS_MEAN = "max", "min", "mean", "sd", "abs_mean"
ZERO_COUNT, POSITIVE_COUNT, NEGATIVE_COUNT = "zero_count", "positive_count", "negative_count"
UPDATE_RATIO = "update_ratio"
#: nan / +inf / -inf counts are always computed: every watchpoint needs them for its error code.
BASIC_STATISTICS = frozenset({MAX, MIN, MEAN, SD, ABS_MEAN, ZERO_COUNT, POSITIVE_COUNT, NEGATIVE_COUNT})
ALL_STATISTICS = BASIC_STATISTICS | {UPDATE_RATIO}

#: the C++ constant in mean(|x-p|) / (mean(|p|) + epsilon); MindSpore never read the ``epsilon`` parameter.
UPDATE_RATIO_EPSILON = 1e-9

#: up to this many elements, float32 data is summed in float64 (as the C++ double loop did)
SMALL_TENSOR = 1 << 15


def checked_statistic_names(needed: Collection[str]) -> frozenset[str]:
    """``needed`` as a frozenset, or a ``ConfigError`` naming the unknown statistic names."""
    needed = frozenset(needed)
    unknown = needed - ALL_STATISTICS
    if unknown:
        from msdebug_hooks.errors import ConfigError
        raise ConfigError("needed", sorted(unknown), f"statistic names from {sorted(ALL_STATISTICS)}")
    return needed


@dataclass(frozen=True)
class TensorStatistics:
    """Statistics of one tensor. A field is None when it was not asked for (or, for previous-value ones, when there
    was no previous value)."""

    count: int
    dtype: str
    nan_count: int
    pos_inf_count: int
    neg_inf_count: int
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    sd: float | None = None
    abs_mean: float | None = None
    zero_count: int | None = None
    positive_count: int | None = None
    negative_count: int | None = None
    has_previous: bool = False
    update_ratio: float | None = None
    #: (start, end) -> percentage of elements in [start, end]
    range_percentages: dict[tuple[float, float], float] = field(default_factory=dict)
    #: (rtol, atol) -> allclose(current, previous)
    allclose: dict[tuple[float, float], bool] = field(default_factory=dict)

    @property
    def inf_count(self) -> int:
        return self.pos_inf_count + self.neg_inf_count

    @property
    def zero_percentage(self) -> float | None:
        """100 * zeros / n; 0 for an empty tensor, as the C++ ``GetZeroValPercent``."""
        if self.zero_count is None:
            return None
        return 100.0 * self.zero_count / self.count if self.count else 0.0

    @property
    def max_min(self) -> float | None:
        if self.max is None or self.min is None:
            return None
        return self.max - self.min

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON or a table."""
        out = {k: getattr(self, k) for k in ("count", "dtype", "nan_count", "pos_inf_count", "neg_inf_count", "max",
                                             "min", "mean", "sd", "abs_mean", "zero_count", "positive_count",
                                             "negative_count", "has_previous", "update_ratio")}
        out["zero_percentage"] = self.zero_percentage
        return out


_UNSET_FIELDS = {f.name: None for f in fields(TensorStatistics)}
_UNSET_FIELDS["has_previous"] = False


def new_statistics(values: dict[str, Any]) -> TensorStatistics:
    """``TensorStatistics(**values)`` for values already checked, without the frozen dataclass's generated
    ``__init__`` (one ``object.__setattr__`` per field, and a step finishes hundreds). The instance is the same:
    same fields, equality, repr, hash, and still frozen."""
    stats = object.__new__(TensorStatistics)
    stats.__dict__.update(_UNSET_FIELDS)
    stats.__dict__.update(values)
    return stats
