"""One class per watchpoint condition, evaluated exactly as MindSpore's debugger did (``IsWatchpointHit``).

Why one engine: the online debugger client, the offline ``DumpAnalyzer`` and training callbacks all call
``check(value, previous)`` so a watchpoint means the same thing everywhere, and the same as it did in MindSpore.

Evaluation, per (tensor, condition) (``evaluate``; ``tensor_check`` computes the statistics for ``check`` and
``checks.check_many``, the batch routes for ``checks.check_tensors`` / ``checks.find_hits``):

1. ``error_code`` starts as 1 if the tensor holds a NaN, plus 2 if it holds ±Inf.
2. ``TensorOverflowCondition`` resets it to 0 and hits on any NaN/Inf. A change condition (``needs_previous``)
   without a previous value adds 4. ``TensorUnchangedCondition`` with a previous value and no NaN/Inf hits on
   allclose.
3. Only when ``error_code`` is still 0, every parameter is compared (``>`` for ``*_gt``, ``<`` ``*_lt``, ``>=``
   ``*_ge``); the watchpoint hits when any does. A parameter whose statistic is NaN (e.g. the update ratio when
   the previous value has another element count) stays unevaluated: ``hit=False``, ``actual_value=None``.

Tensors without elements are never analysed (MindSpore skipped them) and unsupported dtypes never hit; both come
back with ``hit=False``, ``error_code=0`` and a ``note`` saying why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, ClassVar

from msdebug_hooks.conditions.error_codes import ERROR_INF, ERROR_NAN, ERROR_NO_PREVIOUS, error_list
from msdebug_hooks.conditions.params import CHECK, HIDDEN, OPERATORS, SUPPORT, ParamSpec, validate_params
from msdebug_hooks.conditions.tensor_check import check_one_tensor
from msdebug_hooks.conditions.tensor_statistics import UPDATE_RATIO, ZERO_COUNT, TensorStatistics


@dataclass(frozen=True)
class ParamResult:
    """One parameter after a check: ``actual_value`` is the statistic compared, None when not evaluated."""

    name: str
    value: float | bool
    hit: bool
    actual_value: float | None


@dataclass(frozen=True, eq=True)
class ConditionResult:
    """Outcome of one condition on one tensor. ``error_code`` bits: 1 NaN, 2 Inf, 4 no previous tensor.

    MindSpore reported a (tensor, watchpoint) pair when ``hit or error_code``: see ``reportable``.
    """

    hit: bool
    error_code: int
    params: tuple[ParamResult, ...]
    note: str = ""  # why nothing was evaluated (empty tensor, unsupported dtype, Ascend-only condition)

    @property
    def reportable(self) -> bool:
        return self.hit or self.error_code != 0

    @property
    def errors(self) -> list[str]:
        return error_list(self.error_code)

    def param(self, name: str) -> ParamResult:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


# "not given": TensorInitializationCondition's zero_percentage_ge defaults to 100 only when no other check is given
_UNSET: Any = type("_Default", (), {"__repr__": lambda self: "100.0 (unless max_gt or min_lt is given)"})()


class Condition:
    """Base of every watchpoint condition. Subclasses declare ``param_specs`` in the protocol's order."""

    condition_id: ClassVar[int]
    name: ClassVar[str]                 # protocol enum name, e.g. "tensor_too_large"
    api_name: ClassVar[str]             # MindInsight offline API name, e.g. "TensorTooLarge"
    needs_previous: ClassVar[bool] = False
    reads_values: ClassVar[bool] = True             # False: judged without statistics (Ascend's operator overflow)
    initial_suspension_only: ClassVar[bool] = False  # tensor_initialization: only on the initial values
    param_specs: ClassVar[tuple[ParamSpec, ...]] = ()

    params: dict[str, float | bool]

    def __init__(self, **params: Any) -> None:
        given = {k: v for k, v in params.items() if v is not None and v is not _UNSET}
        self.params = validate_params(type(self).__name__, self.param_specs, given)

    # --- what it needs and how it is judged -------------------------------------------------------------------
    def range_bounds(self) -> tuple[float, float] | None:
        """(start, end) of the range whose share of elements a ``range_percentage_*`` parameter checks."""
        if "range_start_inclusive" in self.params or "range_end_inclusive" in self.params:
            return (float(self.params.get("range_start_inclusive", -math.inf)),
                    float(self.params.get("range_end_inclusive", math.inf)))
        return None

    def allclose_tolerance(self) -> tuple[float, float] | None:
        """(rtol, atol) when the hit is allclose against the previous value (``TensorUnchangedCondition``)."""
        return None

    def statistics_needed(self) -> set[str]:
        """Names of ``ALL_STATISTICS`` this condition reads (nan/inf counts always come)."""
        need: set[str] = set()
        for spec in self.param_specs:
            if spec.name not in self.params or spec.role != CHECK:
                continue
            stat = spec.statistic
            if stat in ("max", "min", "mean", "sd", "abs_mean"):
                need.add(stat)
            elif stat == "max_min":
                need.update(("max", "min"))
            elif stat == "zero_percentage":
                need.add(ZERO_COUNT)
            elif stat == "abs_mean_update_ratio":
                need.add(UPDATE_RATIO)
        return need

    def _statistic_reader(self, spec: ParamSpec) -> Callable[[TensorStatistics], Any]:
        """MindSpore ``StatLookup``: reads the value a parameter compares from the statistics (None: not
        evaluated)."""
        stat = spec.statistic
        if stat == "max_min":
            return lambda s: s.max_min
        if stat == "zero_percentage":
            return lambda s: s.zero_percentage
        if stat == "abs_mean_update_ratio":
            return lambda s: s.update_ratio if s.has_previous else None
        if stat == "range_percentage":
            rng = self.range_bounds()
            return lambda s: s.range_percentages.get(rng) if rng is not None else None
        if stat in ("max", "min", "mean", "sd", "abs_mean"):
            return attrgetter(stat)
        return lambda s: None  # rtol, atol, equal_nan, epsilon, range_* bounds

    def _judging_plan(self) -> tuple[tuple[tuple[str, Any, Any, Any, ParamResult], ...],
                                     tuple[float, float] | None, tuple[ParamResult, ...]]:
        """((name, value, comparison, statistic reader, its not-evaluated result) per given parameter in protocol
        order, allclose tolerance, every parameter not evaluated), worked out once per parameter set: ``evaluate``
        runs per tensor and per step, where parsing names and building the same results each time showed."""
        key = tuple(self.params.items())
        plan = self.__dict__.get("_plan")
        if plan is None or plan[0] != key:
            entries = tuple((spec.name, self.params[spec.name], OPERATORS[spec.operator] if spec.operator else None,
                             self._statistic_reader(spec), ParamResult(spec.name, self.params[spec.name], False, None))
                            for spec in self.param_specs if spec.name in self.params)
            unevaluated = tuple(ParamResult(n, v, False, None) for n, v in self.params.items())
            plan = (key, entries, self.allclose_tolerance(), unevaluated)
            self.__dict__["_plan"] = plan
        return plan[1], plan[2], plan[3]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the judging plan (it holds small functions; it is rebuilt on first use)."""
        state = self.__dict__.copy()
        state.pop("_plan", None)
        return state

    def evaluate(self, s: TensorStatistics) -> ConditionResult:
        """Judge precomputed statistics (``check_many`` shares one statistics pass over several conditions)."""
        entries, tol, unevaluated = self._judging_plan()
        if s.count == 0:
            return ConditionResult(False, 0, unevaluated, note="tensor has no elements: not analysed")
        error = (ERROR_NAN if s.nan_count else 0) | (ERROR_INF if s.pos_inf_count or s.neg_inf_count else 0)
        hit = False
        if self.needs_previous and not s.has_previous:
            error |= ERROR_NO_PREVIOUS
        if error:
            return ConditionResult(False, error, unevaluated)
        if tol is not None:
            hit = bool(s.allclose.get(tol, False))
        results = []
        for name, value, compare, read, not_evaluated in entries:
            stat = read(s) if compare is not None else None
            if stat is None or stat != stat:  # None or NaN: not evaluated
                results.append(not_evaluated)
                continue
            stat = float(stat)
            param_hit = bool(compare(stat, value))
            hit = hit or param_hit
            results.append(ParamResult(name, value, param_hit, stat))
        return ConditionResult(hit, 0, tuple(results))

    def check(self, value: Any, previous: Any = None) -> ConditionResult:
        """Evaluate on a numpy array (``previous``: the same tensor one step earlier, for change conditions).

        >>> import numpy as np
        >>> TensorTooLargeCondition(max_gt=1.0).check(np.array([0.5, 2.0])).hit
        True
        """
        return check_one_tensor([self], value, previous)[0]

    def not_analysed(self, note: str) -> ConditionResult:
        """The result on a tensor that could not be analysed (``note`` says why): no hit, no error code, every
        parameter not evaluated."""
        return ConditionResult(False, 0, self._judging_plan()[2], note=note)

    # --- protocol ----------------------------------------------------------------------------------------------
    def protocol_params(self) -> list[tuple[str, float | bool, bool]]:
        """Every parameter of the condition in protocol order as (name, value, disabled), like a ``SetCMD``."""
        return [(s.name, self.params[s.name], False) if s.name in self.params else (s.name, 0.0, True)
                for s in self.param_specs]

    # --- plumbing ----------------------------------------------------------------------------------------------
    @property
    def param_dict(self) -> dict[str, float | bool]:
        """User-visible parameters (hidden defaults left out), as MindInsight's ``ConditionBase.param_dict``."""
        return {s.name: self.params[s.name] for s in self.param_specs
                if s.name in self.params and (s.role != HIDDEN or self.params[s.name] != s.default)}

    @property
    def param_names(self) -> list[str]:
        """Every parameter name of the condition, in protocol order (MindInsight's ``param_names``)."""
        return [s.name for s in self.param_specs]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.param_dict.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.params == other.params  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), tuple(self.params.items())))


def _specs(*specs: ParamSpec) -> tuple[ParamSpec, ...]:
    return specs


class TensorTooLargeCondition(Condition):
    """Hit when mean(|x|) > abs_mean_gt, max > max_gt, min > min_gt or mean > mean_gt (give exactly one)."""

    condition_id, name, api_name = 15, "tensor_too_large", "TensorTooLarge"
    param_specs = _specs(ParamSpec("abs_mean_gt", limit="abs"), ParamSpec("max_gt"), ParamSpec("min_gt"),
                         ParamSpec("mean_gt"))

    def __init__(self, abs_mean_gt: float | None = None, max_gt: float | None = None, min_gt: float | None = None,
                 mean_gt: float | None = None) -> None:
        super().__init__(abs_mean_gt=abs_mean_gt, max_gt=max_gt, min_gt=min_gt, mean_gt=mean_gt)


class TensorTooSmallCondition(Condition):
    """Hit when mean(|x|) < abs_mean_lt, max < max_lt, min < min_lt or mean < mean_lt (give exactly one)."""

    condition_id, name, api_name = 16, "tensor_too_small", "TensorTooSmall"
    param_specs = _specs(ParamSpec("abs_mean_lt", limit="abs"), ParamSpec("max_lt"), ParamSpec("min_lt"),
                         ParamSpec("mean_lt"))

    def __init__(self, abs_mean_lt: float | None = None, max_lt: float | None = None, min_lt: float | None = None,
                 mean_lt: float | None = None) -> None:
        super().__init__(abs_mean_lt=abs_mean_lt, max_lt=max_lt, min_lt=min_lt, mean_lt=mean_lt)


class TensorAllZeroCondition(Condition):
    """Hit when 100 * zeros / n >= zero_percentage_ge (default 100: every element is zero)."""

    condition_id, name, api_name = 17, "tensor_all_zero", "TensorAllZero"
    param_specs = _specs(ParamSpec("zero_percentage_ge", limit="percentage", default=100.0))

    def __init__(self, zero_percentage_ge: float = 100.0) -> None:
        super().__init__(zero_percentage_ge=zero_percentage_ge)


class TensorRangeCondition(Condition):
    """Hit on the share of elements in [range_start_inclusive, range_end_inclusive] (< range_percentage_lt or
    > range_percentage_gt; both bounds required) or on max - min (< max_min_lt, > max_min_gt). One check only."""

    condition_id, name, api_name = 21, "tensor_range", "TensorRange"
    _bounds = ("range_start_inclusive", "range_end_inclusive")
    param_specs = _specs(ParamSpec("range_start_inclusive", role=SUPPORT),
                         ParamSpec("range_end_inclusive", role=SUPPORT),
                         ParamSpec("range_percentage_lt", limit="percentage", requires=_bounds),
                         ParamSpec("range_percentage_gt", limit="percentage", requires=_bounds),
                         ParamSpec("max_min_lt", limit="positive"), ParamSpec("max_min_gt"))

    def __init__(self, range_start_inclusive: float | None = None, range_end_inclusive: float | None = None,
                 range_percentage_lt: float | None = None, range_percentage_gt: float | None = None,
                 max_min_lt: float | None = None, max_min_gt: float | None = None) -> None:
        super().__init__(range_start_inclusive=range_start_inclusive, range_end_inclusive=range_end_inclusive,
                         range_percentage_lt=range_percentage_lt, range_percentage_gt=range_percentage_gt,
                         max_min_lt=max_min_lt, max_min_gt=max_min_gt)


class TensorOverflowCondition(Condition):
    """Hit when the tensor holds a NaN or ±Inf; its ``error_code`` is always 0 (NaN/Inf *is* the hit)."""

    condition_id, name, api_name = 13, "tensor_general_overflow", "TensorOverflow"

    def __init__(self) -> None:
        super().__init__()

    def evaluate(self, s: TensorStatistics) -> ConditionResult:
        if s.count == 0:
            return ConditionResult(False, 0, (), note="tensor has no elements: not analysed")
        return ConditionResult(bool(s.nan_count or s.inf_count), 0, ())


class TensorInitializationCondition(Condition):
    """Checks initial weights: 100 * zeros / n >= zero_percentage_ge, max > max_gt or min < min_lt (one of them;
    zero_percentage_ge=100 when none is given). The online debugger evaluates it only at the initial suspension."""

    condition_id, name, api_name = 14, "tensor_initialization", "TensorInitialization"
    initial_suspension_only = True
    param_specs = _specs(ParamSpec("zero_percentage_ge", limit="percentage", default=100.0), ParamSpec("max_gt"),
                         ParamSpec("min_lt"))

    def __init__(self, zero_percentage_ge: float = _UNSET, max_gt: float | None = None,
                 min_lt: float | None = None) -> None:
        super().__init__(zero_percentage_ge=zero_percentage_ge, max_gt=max_gt, min_lt=min_lt)


class TensorUnchangedCondition(Condition):
    """Hit when every |x - p| <= atol + rtol * |p| against the previous step (no NaN/Inf in x). ``equal_nan`` is
    accepted for compatibility and ignored, as MindSpore ignored it."""

    condition_id, name, api_name = 20, "tensor_not_changed", "TensorUnchanged"
    needs_previous = True
    param_specs = _specs(ParamSpec("rtol", limit="abs", default=1e-5),
                         ParamSpec("atol", role=HIDDEN, limit="abs", default=1e-8),
                         ParamSpec("equal_nan", role=HIDDEN, limit="bool", default=False))

    def __init__(self, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> None:
        super().__init__(rtol=rtol, atol=atol, equal_nan=equal_nan)

    def allclose_tolerance(self) -> tuple[float, float]:
        return float(self.params["rtol"]), float(self.params["atol"])


class _ChangeCondition(Condition):
    needs_previous = True

    def statistics_needed(self) -> set[str]:
        return {UPDATE_RATIO}


class TensorChangeAboveThresholdCondition(_ChangeCondition):
    """Hit when mean(|x - p|) / (mean(|p|) + 1e-9) > abs_mean_update_ratio_gt against the previous step.
    ``epsilon`` is accepted for compatibility; MindSpore always used 1e-9."""

    condition_id, name, api_name = 18, "tensor_change_too_large", "TensorChangeAboveThreshold"
    param_specs = _specs(ParamSpec("abs_mean_update_ratio_gt", limit="abs", default=0.1),
                         ParamSpec("epsilon", role=HIDDEN, limit="abs", default=1e-9))

    def __init__(self, abs_mean_update_ratio_gt: float = 0.1, epsilon: float = 1e-9) -> None:
        super().__init__(abs_mean_update_ratio_gt=abs_mean_update_ratio_gt, epsilon=epsilon)


class TensorChangeBelowThresholdCondition(_ChangeCondition):
    """Hit when mean(|x - p|) / (mean(|p|) + 1e-9) < abs_mean_update_ratio_lt against the previous step."""

    condition_id, name, api_name = 19, "tensor_change_too_small", "TensorChangeBelowThreshold"
    param_specs = _specs(ParamSpec("abs_mean_update_ratio_lt", limit="abs", default=1e-4),
                         ParamSpec("epsilon", role=HIDDEN, limit="abs", default=1e-9))

    def __init__(self, abs_mean_update_ratio_lt: float = 1e-4, epsilon: float = 1e-9) -> None:
        super().__init__(abs_mean_update_ratio_lt=abs_mean_update_ratio_lt, epsilon=epsilon)


ASCEND_ONLY_NOTE = ("operator overflow is detected by Ascend hardware from its overflow dump files; "
                    "it cannot be evaluated on a tensor value (use TensorOverflowCondition for NaN/Inf)")


class OperatorOverflowCondition(Condition):
    """Ascend-only operator overflow (id 2). ``check`` never hits here and says why in ``note``."""

    condition_id, name, api_name = 2, "overflow", "OperatorOverflow"
    reads_values = False

    def __init__(self) -> None:
        super().__init__()

    def evaluate(self, s: TensorStatistics | None) -> ConditionResult:
        return ConditionResult(False, 0, (), note=ASCEND_ONLY_NOTE)


CONDITION_CLASSES: tuple[type[Condition], ...] = (
    OperatorOverflowCondition, TensorOverflowCondition, TensorInitializationCondition, TensorTooLargeCondition,
    TensorTooSmallCondition, TensorAllZeroCondition, TensorChangeAboveThresholdCondition,
    TensorChangeBelowThresholdCondition, TensorUnchangedCondition, TensorRangeCondition)


__all__ = ["Condition", "ConditionResult", "ParamResult", "ERROR_NAN", "ERROR_INF", "ERROR_NO_PREVIOUS",
           "error_list", "CONDITION_CLASSES", *[c.__name__ for c in CONDITION_CLASSES]]
