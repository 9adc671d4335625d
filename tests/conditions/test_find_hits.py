"""``find_hits`` judges a batch's conditions as arrays and evaluates only the reportable pairs: its results must be
exactly the reportable subset of ``check_tensors`` (and of ``check_many`` tensor by tensor), on both engines, for
every condition class with random parameters, on random tensors with NaN/Inf, empty ones, no previous value,
a previous value of another size, unchanged ones, and every dtype.
"""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.conditions import (
    OperatorOverflowCondition, TensorAllZeroCondition, TensorChangeAboveThresholdCondition,
    TensorChangeBelowThresholdCondition, TensorInitializationCondition, TensorOverflowCondition,
    TensorRangeCondition, TensorTooLargeCondition, TensorTooSmallCondition, TensorUnchangedCondition, check_many,
    check_tensors, find_hits)
from msdebug_hooks.conditions import _engine
from msdebug_hooks.errors import ConfigError

from random_watch_work import random_batch

ENGINES = ["compiled", "numpy"]
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
