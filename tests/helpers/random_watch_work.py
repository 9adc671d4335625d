"""Random watchpoint work for the property tests of the statistics engine: tensors of every dtype the debugger reads
(empty, tiny, chunked), their previous values and random conditions of every class."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from msdebug_hooks.conditions import (
    CONDITION_CLASSES, OperatorOverflowCondition, TensorAllZeroCondition, TensorChangeAboveThresholdCondition,
    TensorChangeBelowThresholdCondition, TensorInitializationCondition, TensorOverflowCondition,
    TensorRangeCondition, TensorTooLargeCondition, TensorTooSmallCondition, TensorUnchangedCondition)
from msdebug_hooks.conditions import stats as st

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "uint8", "bool"]
SIZES = [0, 1, 2, 5, 64, 1000, st.SMALL_TENSOR + 1, 70_001]


def _threshold(rng: np.random.Generator) -> float:
    return float(rng.choice([-3.0, -1.0, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0, 1e3]))


def _percentage(rng: np.random.Generator) -> float:
    return float(rng.choice([0.0, 5.0, 30.0, 50.0, 90.0, 100.0]))


def _ratio(rng: np.random.Generator) -> float:
    return float(rng.choice([0.0, 1e-6, 0.05, 0.3, 1.0, 5.0]))


def _random_condition(rng: np.random.Generator, cls: type):
    """An instance of ``cls`` with one random check parameter (the rules allow one per watchpoint)."""
    if cls in (TensorOverflowCondition, OperatorOverflowCondition):
        return cls()
    if cls is TensorInitializationCondition:
        choice = rng.integers(4)
        return cls(**[{}, {"zero_percentage_ge": _percentage(rng)}, {"max_gt": _threshold(rng)},
                      {"min_lt": _threshold(rng)}][choice])
    if cls is TensorTooLargeCondition:
        name = str(rng.choice(["abs_mean_gt", "max_gt", "min_gt", "mean_gt"]))
        return cls(**{name: abs(_threshold(rng)) if name == "abs_mean_gt" else _threshold(rng)})
    if cls is TensorTooSmallCondition:
        name = str(rng.choice(["abs_mean_lt", "max_lt", "min_lt", "mean_lt"]))
        return cls(**{name: abs(_threshold(rng)) if name == "abs_mean_lt" else _threshold(rng)})
    if cls is TensorAllZeroCondition:
        return cls(zero_percentage_ge=_percentage(rng))
    if cls is TensorChangeAboveThresholdCondition:
        return cls(abs_mean_update_ratio_gt=_ratio(rng))
    if cls is TensorChangeBelowThresholdCondition:
        return cls(abs_mean_update_ratio_lt=_ratio(rng))
    if cls is TensorUnchangedCondition:
        return cls(rtol=float(rng.choice([0.0, 1e-5, 0.1])), atol=float(rng.choice([0.0, 1e-8, 0.5])))
    if cls is TensorRangeCondition:
        choice = rng.integers(4)
        if choice < 2:
            start, end = sorted((_threshold(rng), _threshold(rng)))
            key = "range_percentage_lt" if choice == 0 else "range_percentage_gt"
            return cls(range_start_inclusive=start, range_end_inclusive=end, **{key: _percentage(rng)})
        if choice == 2:
            return cls(max_min_lt=float(rng.choice([0.5, 2.0, 7.0])))
        return cls(max_min_gt=abs(_threshold(rng)))
    raise AssertionError(f"no generator for {cls.__name__}")


def _random_tensor(rng: np.random.Generator, dtype: str, size: int) -> np.ndarray:
    if dtype == "bool":
        return rng.random(size) < float(rng.choice([0.0, 0.5, 1.0]))
    if dtype in ("int32", "uint8"):
        high = 3 if rng.random() < 0.5 else 100
        values = rng.integers(0, high, size=size)
        return (values - (high // 2 if dtype == "int32" else 0)).astype(dtype)
    style = rng.integers(5)
    if style == 0:
        values = np.zeros(size)
    else:
        values = rng.standard_normal(size) * float(rng.choice([1e-3, 0.3, 1.0, 5.0]))
        if style == 1 and size:
            values[rng.integers(0, size, size=rng.integers(1, 3))] = rng.choice([np.nan, np.inf, -np.inf])
        if style == 2 and size:
            values[:] = np.nan
    if dtype == "bfloat16":
        return values.astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def _random_previous(rng: np.random.Generator, value: np.ndarray):
    choice = rng.integers(5)
    if choice == 0:
        return None
    if choice == 1:
        return value.copy()                                              # unchanged: allclose, ratio 0
    if choice == 2:
        return _random_tensor(rng, "float32", value.size + 1)             # another element count
    with np.errstate(all="ignore"):
        noise = rng.standard_normal(value.size).astype(np.float64) * float(rng.choice([1e-7, 0.01, 1.0]))
        changed = value.astype(np.float64) + (noise if choice == 3 else 0.0)
        if choice == 4 and value.size:
            changed[0] = np.nan
    if value.dtype == ml_dtypes.bfloat16:
        return changed.astype(ml_dtypes.bfloat16)
    if value.dtype.kind in "biu":
        return value.copy()
    with np.errstate(all="ignore"):
        return changed.astype(value.dtype)


def random_batch(rng: np.random.Generator, count: int) -> tuple[list, list, list]:
    """(values, previous values, conditions): ``count`` random tensors of random dtypes and sizes, their random
    previous values, and 1-6 random conditions."""
    values = [_random_tensor(rng, str(rng.choice(DTYPES)), int(rng.choice(SIZES, p=[.1, .1, .1, .15, .2, .2, .1, .05])))
              for _ in range(count)]
    previous = [_random_previous(rng, v) for v in values]
    conditions = [_random_condition(rng, CONDITION_CLASSES[i])
                  for i in rng.choice(len(CONDITION_CLASSES), size=int(rng.integers(1, 7)))]
    return values, previous, conditions
