"""compute_statistics_batch gives what compute_statistics gives, tensor by tensor, for every dtype and edge case."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions.batch import compute_statistics_batch
from msdebug_hooks.errors import ConfigError

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bfloat16"]
RANGES = [(-0.5, 0.5), (0.0, math.inf)]
TOLERANCES = [(1e-5, 1e-8), (0.1, 0.01)]


def _random_tensor(rng: np.random.Generator, dtype: str, size: int, specials: bool) -> np.ndarray:
    if dtype == "bool":
        return rng.random(size) < 0.3
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        low, high = max(info.min, -1000), min(info.max, 1000)
        values = rng.integers(low, high, size=size, endpoint=True).astype(dtype)
        values[rng.random(size) < 0.1] = 0
        return values
    values = rng.standard_normal(size) * 10 ** rng.uniform(-3, 3)
    values[rng.random(size) < 0.05] = 0.0
    values[rng.random(size) < 0.02] = -0.0
    if specials and size:
        for special in (np.nan, np.inf, -np.inf):
            if rng.random() < 0.5:
                values[rng.integers(0, size, size=rng.integers(1, 3))] = special
    if dtype == "bfloat16":
        return values.astype(ml_dtypes.bfloat16)
    return values.astype(dtype)


def _same(a: st.TensorStatistics, b: st.TensorStatistics) -> None:
    da, db = a.as_dict(), b.as_dict()
    assert da.keys() == db.keys()
    for key in da:
        x, y = da[key], db[key]
        if isinstance(x, float) or isinstance(y, float):
            assert x is not None and y is not None, key
            assert (math.isnan(x) and math.isnan(y)) or x == y or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-300), \
                (key, x, y)
        else:
            assert x == y, (key, x, y)
    assert a.allclose == b.allclose
    assert a.range_percentages.keys() == b.range_percentages.keys()
    for key, value in a.range_percentages.items():
        assert math.isclose(value, b.range_percentages[key], rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_batch_equals_one_by_one_for_every_dtype_and_edge_case(seed):
    rng = np.random.default_rng(seed)
    values, previous = [], []
    for dtype in DTYPES:
        for size in (0, 1, 2, 7, 300, 5000):
            value = _random_tensor(rng, dtype, size, specials=rng.random() < 0.4)
            values.append(value.reshape((size,)) if size % 2 else value)
            choice = rng.random()
            if choice < 0.25:
                previous.append(None)
            elif choice < 0.4:     # another element count: MindSpore compared against NaN
                previous.append(_random_tensor(rng, dtype, size + 1, specials=False))
            else:
                previous.append(_random_tensor(rng, dtype, size, specials=rng.random() < 0.2))
    values.append(rng.standard_normal(st.SMALL_TENSOR + 5).astype(np.float32))   # a large one in the same call
    previous.append(values[-1] * np.float32(1.01))
    needed = st.ALL_STATISTICS
    batch = compute_statistics_batch(values, previous, needed, ranges=RANGES, allclose_tolerances=TOLERANCES)
    assert len(batch) == len(values)
    for value, prev, got in zip(values, previous, batch):
        expected = st.compute_statistics(value, prev, needed, ranges=RANGES, allclose_tolerances=TOLERANCES)
        _same(got, expected)


@pytest.mark.parametrize("needed", [{"max"}, {"abs_mean"}, {"zero_count"}, {"sd", "mean"}, set()])
def test_subsets_of_statistics_agree(needed):
    rng = np.random.default_rng(7)
    values = [_random_tensor(rng, "float32", size, specials=size % 3 == 0) for size in (1, 3, 10, 100, 1000)]
    batch = compute_statistics_batch(values, needed=needed)
    for value, got in zip(values, batch):
        _same(got, st.compute_statistics(value, needed=needed))


def test_all_nan_and_raw_bfloat16_words():
    words = np.array([1.5, -2.0, 0.0], dtype=ml_dtypes.bfloat16).view(np.uint16)
    values = [np.full(4, np.nan, np.float32), words]
    batch = compute_statistics_batch(values, needed=st.ALL_STATISTICS, bfloat16=False)
    assert math.isnan(batch[0].max) and batch[0].nan_count == 4
    assert batch[1].max == 2.0 ** 15 + 2 ** 14 or batch[1].dtype == "uint16"   # uint16 read as integers
    as_bf16 = compute_statistics_batch([words], needed={"max", "min"}, bfloat16=True)[0]
    assert (as_bf16.max, as_bf16.min, as_bf16.dtype) == (1.5, -2.0, "bfloat16")


def test_bad_arguments_are_named():
    with pytest.raises(ConfigError, match="previous"):
        compute_statistics_batch([np.zeros(2)], previous=[None, None])
    with pytest.raises(ConfigError, match="needed"):
        compute_statistics_batch([np.zeros(2)], needed={"median"})
    with pytest.raises(st.UnsupportedDtypeError):
        compute_statistics_batch([np.zeros(2, np.complex64)])


def test_check_tensors_agrees_with_check_many_tensor_by_tensor():
    from msdebug_hooks.conditions import (TensorChangeAboveThresholdCondition, TensorOverflowCondition,
                                          TensorRangeCondition, TensorTooLargeCondition, TensorUnchangedCondition,
                                          check_many, check_tensors)

    rng = np.random.default_rng(11)
    values = [_random_tensor(rng, dtype, size, specials=size == 7) for dtype in ("float32", "float16", "int32")
              for size in (0, 1, 7, 500, st.SMALL_TENSOR + 1)]
    previous = [v if i % 3 else None for i, v in enumerate(values)]
    conditions = [TensorOverflowCondition(), TensorTooLargeCondition(abs_mean_gt=0.5),
                  TensorTooLargeCondition(max_gt=1.0),
                  TensorRangeCondition(range_start_inclusive=-0.5, range_end_inclusive=0.5,
                                       range_percentage_gt=20.0),
                  TensorUnchangedCondition(), TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.1)]
    batched = check_tensors(conditions, values, previous)
    assert batched == [check_many(conditions, v, p) for v, p in zip(values, previous)]
    with_complex = check_tensors(conditions, [values[2], np.zeros(3, np.complex64)])   # falls back, notes the dtype
    assert with_complex[0] == check_many(conditions, values[2]) and "not analysed" in with_complex[1][1].note
