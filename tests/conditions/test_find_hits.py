"""``find_hits`` judges a batch's conditions as arrays and evaluates only the reportable pairs: its results must be
exactly the reportable subset of ``check_tensors`` (and of ``check_many`` tensor by tensor), on both engines, for
every condition class with random parameters, on random tensors with NaN/Inf, empty ones, no previous value,
a previous value of another size, unchanged ones, and every dtype.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from msdebug_hooks.conditions import (
    CONDITION_CLASSES, OperatorOverflowCondition, TensorAllZeroCondition, TensorChangeAboveThresholdCondition,
    TensorChangeBelowThresholdCondition, TensorInitializationCondition, TensorOverflowCondition,
    TensorRangeCondition, TensorTooLargeCondition, TensorTooSmallCondition, TensorUnchangedCondition, check_many,
    check_tensors, find_hits)
from msdebug_hooks.conditions import _engine
from msdebug_hooks.conditions import stats as st
from msdebug_hooks.errors import ConfigError

ENGINES = ["compiled", "numpy"]
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


def _reportable(results) -> list:
    return [(t, c, r) for t, per_tensor in enumerate(results) for c, r in enumerate(per_tensor) if r.reportable]


def _assert_same_judgement(got: list, want: list) -> None:
    """Same pairs, hits, error codes and parameter outcomes; actual values to 1e-9 (tensor by tensor, numpy's
    fallback sums some tensors in another order than the batched pass: the last digit may differ)."""
    assert [(t, c, r.hit, r.error_code, r.note, [(p.name, p.hit, p.actual_value is None) for p in r.params])
            for t, c, r in got] == [(t, c, r.hit, r.error_code, r.note,
                                     [(p.name, p.hit, p.actual_value is None) for p in r.params])
                                    for t, c, r in want]
    for (_, _, a), (_, _, b) in zip(got, want):
        for p, q in zip(a.params, b.params):
            if p.actual_value is not None:
                assert p.actual_value == pytest.approx(q.actual_value, rel=1e-9, nan_ok=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_find_hits_equals_the_reportable_results_of_check_tensors(engine):
    rng = np.random.default_rng(14 if engine == "compiled" else 41)
    compared = hits_seen = 0
    with _engine.forced_engine(engine):
        for _ in range(150):
            values, previous, conditions = random_batch(rng, int(rng.integers(1, 10)))
            count = len(values)
            got = find_hits(conditions, values, previous)
            assert got == _reportable(check_tensors(conditions, values, previous))
            _assert_same_judgement(got, _reportable([check_many(conditions, v, p) for v, p in zip(values, previous)]))
            if rng.random() < 0.3:
                assert find_hits(conditions, values) == _reportable(check_tensors(conditions, values))
            compared += count * len(conditions)
            hits_seen += len(got)
    assert hits_seen > 50 and compared > hits_seen   # the run saw both reportable and silent pairs


@pytest.mark.parametrize("engine", ENGINES)
def test_every_condition_class_reaches_a_hit_and_an_error(engine):
    """A check that could not look must not read as clean: NaN, Inf and no-previous come back as errors."""
    rng = np.random.default_rng(3)
    values = [np.array([np.nan, 1.0], np.float32), np.array([np.inf, 1.0], np.float32),
              np.zeros(50, np.float32), (rng.standard_normal(40_000) * 9).astype(np.float32),
              np.array([], np.float32)]
    previous = [None, values[1].copy(), values[2].copy(), values[3] * 2, np.array([], np.float32)]
    conditions = [TensorOverflowCondition(), OperatorOverflowCondition(), TensorInitializationCondition(),
                  TensorTooLargeCondition(max_gt=1.0), TensorTooSmallCondition(min_lt=-1.0),
                  TensorAllZeroCondition(), TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.1),
                  TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=0.1), TensorUnchangedCondition(),
                  TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1, range_percentage_lt=50),
                  TensorRangeCondition(max_min_gt=1.0)]
    with _engine.forced_engine(engine):
        got = find_hits(conditions, values, previous)
        assert got == _reportable(check_tensors(conditions, values, previous))
    pairs = {(t, c): r for t, c, r in got}
    assert pairs[(0, 0)].hit and pairs[(1, 0)].hit and (2, 0) not in pairs              # overflow
    assert all(pairs[(0, c)].error_code & 1 for c in range(2, 11))                    # NaN: not evaluated
    assert pairs[(1, 3)].error_code == 2                                              # Inf
    assert not any(c == 1 for _, c in pairs)                                          # operator overflow
    assert pairs[(2, 2)].hit and pairs[(2, 5)].hit and pairs[(2, 8)].hit              # zeros, unchanged
    assert pairs[(2, 7)].hit and (2, 6) not in pairs                                  # ratio 0 < 0.1
    assert pairs[(3, 6)].hit and pairs[(3, 9)].hit and pairs[(3, 10)].hit             # changed, range, spread
    assert not any(t == 4 for t, _ in pairs)                                          # empty: never reported


@pytest.mark.parametrize("engine", ENGINES)
def test_keeping_values_in_the_pass(engine):
    """``keep_previous`` fills the previous arrays, ``keep_into`` other arrays (previous untouched), with the
    same hits as without keeping."""
    rng = np.random.default_rng(5)
    values = [rng.standard_normal(n).astype(dtype) for n, dtype in
              ((10, np.float32), (70_001, np.float32), (40_000, np.float64), (300, np.float16))]
    values.append(np.arange(7, dtype=np.int32))
    before = [(v * 0.5).astype(v.dtype) for v in values]
    conditions = [TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.2), TensorUnchangedCondition(),
                  TensorTooLargeCondition(max_gt=2.0)]
    with _engine.forced_engine(engine):
        want = find_hits(conditions, values, [b.copy() for b in before])
        targets = [np.empty_like(v) for v in values]
        targets[4] = None
        previous = [b.copy() for b in before]
        assert find_hits(conditions, values, previous, keep_into=targets) == want
        for b, p in zip(before, previous):
            np.testing.assert_array_equal(p, b)
        for v, t in zip(values[:4], targets):
            np.testing.assert_array_equal(t, v)
        assert find_hits(conditions, values, previous, keep_previous=True) == want
        for v, p in zip(values, previous):
            np.testing.assert_array_equal(p, v)
        first_step = [np.empty_like(v) for v in values]
        hits = find_hits(conditions, values, None, keep_into=first_step)
        assert {r.error_code for _, c, r in hits if c < 2} == {4}                   # no previous yet
        for v, t in zip(values, first_step):
            np.testing.assert_array_equal(t, v)


def test_a_bad_keep_target_is_refused_before_anything_is_copied():
    values = [np.ones(3, np.float32), np.ones(4, np.float32)]
    targets = [np.zeros(3, np.float32), np.zeros(4, np.float64)]
    with pytest.raises(ConfigError, match=r"keep_into\[1\]"):
        find_hits([TensorTooLargeCondition(max_gt=0.0)], values, keep_into=targets)
    assert not targets[0].any()
    with pytest.raises(ConfigError, match="keep_into"):
        find_hits([TensorTooLargeCondition(max_gt=0.0)], values, values, keep_previous=True,
                  keep_into=targets)


def test_an_unsupported_dtype_is_noted_and_the_others_still_judged():
    values = [np.array([1.0, np.nan], np.float32), np.array(["a", "b"]), np.array([5.0], np.float32)]
    previous = [np.zeros(2, np.float32), None, np.zeros(1, np.float32)]
    conditions = [TensorOverflowCondition(), TensorTooLargeCondition(max_gt=1.0)]
    got = find_hits(conditions, values, previous, keep_previous=True)
    assert [(t, c) for t, c, _ in got] == [(0, 0), (0, 1), (2, 1)]
    np.testing.assert_array_equal(previous[2], values[2])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_hit_names_its_tensor_condition_and_result(engine):
    """``find_hits`` returns named ``Hit`` tuples: read by name, or unpacked and compared as the plain
    (tensor, condition, result) tuples callers had."""
    from msdebug_hooks.conditions import Hit

    values = [np.ones(8, np.float32), np.array([1.0, np.nan], np.float32)]
    conditions = [TensorTooLargeCondition(max_gt=0.5), TensorOverflowCondition()]
    with _engine.forced_engine(engine):
        hits = find_hits(conditions, values)
    assert all(isinstance(h, Hit) for h in hits)
    assert [(h.tensor, h.condition, h.result.hit, h.result.error_code) for h in hits] == \
        [(0, 0, True, 0), (1, 0, False, 1), (1, 1, True, 0)]
    assert hits == [(t, c, r) for t, c, r in hits]
