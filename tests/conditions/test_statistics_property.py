"""Every statistics path against a slow, plainly written float64 reference, on random tensors of every dtype.

The paths: the compiled single-tensor pass, numpy's chunked fallback, and the batched call (small tensors in one
buffer) with either engine. Sizes straddle the kernel's block (4096 elements), the float64-sum threshold
(``stats.SMALL_TENSOR``) and numpy's chunk (65536 float32); NaN, +Inf, -Inf, +0 and -0 are sprinkled in, and all-NaN,
all-zero, empty, large-offset and near-float32-max tensors come too. The reference shares no code with the engine:
each element cast to float64 as MindSpore's ``SummarizeTensor`` did, exact sums (``math.fsum``), NaN skipped by
max/min and poisoning the sums, sample standard deviation, counts by comparison.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from msdebug_hooks.conditions import _engine
from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions.batch import compute_statistics_batch

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bfloat16"]
SIZES = [0, 1, 2, 7, 300, 4095, 4097, st.SMALL_TENSOR, st.SMALL_TENSOR + 1, 70_001]
RANGES = [(-0.5, 0.5), (0.0, math.inf), (-math.inf, -1e-3)]
TOLERANCES = [(1e-5, 1e-8), (0.1, 0.01)]
NEEDED = st.ALL_STATISTICS


def _random(rng: np.random.Generator, dtype: str, size: int, style: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(size) < rng.random()
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=size, endpoint=True, dtype=dtype)
        values[rng.random(size) < 0.1] = 0
        return values
    if style == "all_nan":
        values = np.full(size, np.nan)
    elif style == "zeros":
        values = np.where(rng.random(size) < 0.5, 0.0, -0.0)
    elif style == "offset":  # a mean far larger than the spread: sd must not cancel away
        values = 1e4 + rng.standard_normal(size) * 1e-2
        if size and rng.random() < 0.5:
            values[0] = 0.0  # and a first element far from the mean, which a pass might have centred on
    elif style == "huge" and dtype == "float32":  # float32 block sums overflow: the careful float64 redo
        values = rng.choice([-1.0, 1.0], size) * rng.uniform(1e36, 3e38, size)
    elif style == "wide" and dtype == "float32":  # sums of |x| fit in float32, sums of squares do not
        values = rng.choice([-1.0, 1.0], size) * 10.0 ** rng.uniform(19, 30, size)
    else:
        values = rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 3)
        values[rng.random(size) < 0.05] = 0.0
        values[rng.random(size) < 0.02] = -0.0
        if style == "specials" and size:
            for special in (np.nan, np.inf, -np.inf):
                if rng.random() < 0.6:
                    values[rng.integers(0, size, size=rng.integers(1, 4))] = special
    if dtype == "bfloat16":
        return values.astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def _exact_sum(values: np.ndarray) -> float:
    """Sum in exact arithmetic rounded once; IEEE rules for NaN and ±Inf (math.fsum raises on inf - inf)."""
    if np.isnan(values).any():
        return math.nan
    pos, neg = bool(np.isposinf(values).any()), bool(np.isneginf(values).any())
    if pos and neg:
        return math.nan
    if pos or neg:
        return math.inf if pos else -math.inf
    return math.fsum(values.tolist())


def _reference(value: np.ndarray, previous: np.ndarray | None) -> dict:
    x = value.astype(np.float64).ravel()
    n = x.size
    numbers = x[~np.isnan(x)]
    out = {"count": n, "nan_count": int(np.isnan(x).sum()), "pos_inf_count": int(np.isposinf(x).sum()),
           "neg_inf_count": int(np.isneginf(x).sum()), "zero_count": int((x == 0).sum()),
           "positive_count": int((x > 0).sum()), "negative_count": int((x < 0).sum())}
    out["max"] = float(numbers.max()) if numbers.size else math.nan
    out["min"] = float(numbers.min()) if numbers.size else math.nan
    total = _exact_sum(x)
    out["mean"] = total / n if n else math.nan
    out["abs_mean"] = _exact_sum(np.abs(x)) / n if n else math.nan
    if n == 0:
        out["sd"] = math.nan
    elif n == 1:
        out["sd"] = 0.0
    elif not np.isfinite(x).all():
        out["sd"] = math.nan
    else:
        out["sd"] = math.sqrt(math.fsum(((x - out["mean"]) ** 2).tolist()) / (n - 1))
    out["ranges"] = {(a, b): (100.0 * int(((x >= a) & (x <= b)).sum()) / n if n else 0.0) for a, b in RANGES}
    out["update_ratio"] = None
    out["allclose"] = {}
    if previous is not None:
        p = previous.astype(np.float64).ravel()
        if p.size != n:
            out["update_ratio"] = math.nan
            out["allclose"] = {tol: n == 0 for tol in TOLERANCES}
        else:
            with np.errstate(invalid="ignore"):
                diff = np.abs(x - p)
            mean_diff = _exact_sum(diff) / n if n else 0.0
            mean_prev = _exact_sum(np.abs(p)) / n if n else 0.0
            out["update_ratio"] = mean_diff / (mean_prev + st.UPDATE_RATIO_EPSILON)
            out["allclose"] = {(r, a): bool((diff <= np.abs(p) * r + a).all()) for r, a in TOLERANCES}
    return out


def _float32_sums(value: np.ndarray) -> bool:
    """Summed in float32 lanes per block (about 1e-7 relative), not in float64."""
    name = "bfloat16" if value.dtype == ml_dtypes.bfloat16 else value.dtype.name
    return value.size > st.SMALL_TENSOR and name in ("bool", "int8", "uint8", "int16", "uint16", "float16",
                                                     "float32", "bfloat16")


def _agrees(got: st.TensorStatistics, ref: dict, loose: bool, where: str) -> None:
    for key in ("count", "nan_count", "pos_inf_count", "neg_inf_count", "zero_count", "positive_count",
                "negative_count"):
        assert getattr(got, key) == ref[key], (where, key, getattr(got, key), ref[key])
    for key in ("max", "min"):
        value = getattr(got, key)
        assert value == ref[key] or (math.isnan(value) and math.isnan(ref[key])), (where, key, value, ref[key])
    abs_mean = ref["abs_mean"]
    for key, rel in (("mean", 2e-6 if loose else 1e-12), ("abs_mean", 2e-6 if loose else 1e-12),
                     ("sd", 2e-5 if loose else 1e-9), ("update_ratio", 2e-6 if loose else 1e-9)):
        value, expected = getattr(got, key), ref[key]
        if expected is None or value is None:
            assert value is None and expected is None, (where, key, value, expected)
            continue
        if math.isnan(expected) or math.isinf(expected):
            assert value == expected or (math.isnan(value) and math.isnan(expected)), (where, key, value, expected)
            continue
        scale = abs_mean if key == "mean" and math.isfinite(abs_mean) else abs(expected)
        assert abs(value - expected) <= rel * scale + 1e-300, (where, key, value, expected)
    assert got.range_percentages == pytest.approx(ref["ranges"], rel=0, abs=0), where
    assert got.allclose == ref["allclose"], where


def _cases(seed: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    rng = np.random.default_rng(seed)
    cases = []
    for dtype in DTYPES:
        for size in SIZES:
            style = rng.choice(["plain", "specials", "specials", "all_nan", "zeros", "offset", "huge"],
                               p=[0.35, 0.3, 0.0, 0.08, 0.07, 0.1, 0.1])
            value = _random(rng, dtype, size, str(style))
            if size % 2:
                value = value.reshape(1, size)
            choice = rng.random()
            if choice < 0.2:
                previous = None
            elif choice < 0.3:     # another element count: MindSpore compared against NaN
                previous = _random(rng, dtype, size + 1, "plain")
            else:
                previous = value if rng.random() < 0.1 else _random(rng, dtype, size, "plain")
            cases.append((value, previous))
    for size in (5000, 70_001):  # always: float32 block sums that overflow, a large mean after a far first element
        cases.append((_random(rng, "float32", size, "huge"), None))
        cases.append((_random(rng, "float32", size, "wide"), None))
        offset = _random(rng, "float32", size, "offset")
        offset[0] = 0.0
        cases.append((offset, None))
    return cases


def _run(engine: str, cases, batched: bool) -> list[st.TensorStatistics]:
    with _engine.forced_engine(engine):
        if batched:
            return compute_statistics_batch([v for v, _ in cases], [p for _, p in cases], NEEDED, ranges=RANGES,
                                            allclose_tolerances=TOLERANCES)
        return [st.compute_statistics(v, p, NEEDED, ranges=RANGES, allclose_tolerances=TOLERANCES)
                for v, p in cases]


def _is_huge(value: np.ndarray) -> bool:
    return value.dtype == np.float32 and bool((np.abs(value[np.isfinite(value)]) > 1e18).any())


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("engine", ["compiled", "numpy"])
@pytest.mark.parametrize("batched", [False, True], ids=["one_by_one", "batched"])
def test_every_path_matches_the_plain_formulas(seed, engine, batched):
    if engine == "compiled" and _engine.kernels() is None:
        pytest.fail("numba is a core dependency: the compiled engine must be available here")
    cases = _cases(seed)
    if engine == "numpy":
        # numpy's chunked pass sums float32 chunks with BLAS in float32: values near float32's maximum overflow
        # there (a known limit of the fallback); the compiled pass redoes such blocks in float64
        cases = [(v, p) for v, p in cases if not (_is_huge(v) and v.size > st.SMALL_TENSOR)]
    results = _run(engine, cases, batched)
    assert len(results) == len(cases)
    for (value, previous), got in zip(cases, results):
        where = f"{engine} batched={batched} dtype={got.dtype} n={value.size}"
        _agrees(got, _reference(value, previous), _float32_sums(value), where)


def test_compiled_and_numpy_agree_exactly_where_they_must():
    """Counts, max/min, range shares and allclose are exact in both engines, so they agree bit for bit."""
    cases = _cases(7)
    compiled, fallback = _run("compiled", cases, False), _run("numpy", cases, False)
    for a, b in zip(compiled, fallback):
        for key in ("count", "nan_count", "pos_inf_count", "neg_inf_count", "zero_count", "positive_count",
                    "negative_count", "range_percentages", "allclose"):
            assert getattr(a, key) == getattr(b, key), key
        for key in ("max", "min"):
            x, y = getattr(a, key), getattr(b, key)
            assert x == y or (math.isnan(x) and math.isnan(y)), key


def test_a_statistic_does_not_depend_on_what_else_is_asked():
    """The kernel specialises on the requested set; abs_mean must come out the same from every specialisation."""
    x = np.random.default_rng(3).standard_normal(100_003).astype(np.float32)
    x[::997] = 0.0
    asked = [{"abs_mean"}, {"abs_mean", "zero_count"}, {"abs_mean", "max"}, st.ALL_STATISTICS]
    values = {st.compute_statistics(x, None, need).abs_mean for need in asked}
    assert len(values) == 1


@pytest.mark.parametrize("size", [100_003, 3_000_001])   # the second keeps its previous value by streaming stores
def test_the_update_ratio_does_not_depend_on_what_else_is_asked(size):
    """The previous-value sums are taken in one loop whatever else a pass needs (in extremes mode that loop also
    gives max/min), so the update ratio is the same bit for bit from every specialisation, kept or not."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(size).astype(np.float32)
    previous = x + rng.standard_normal(size).astype(np.float32) * np.float32(1e-3)
    asked = [{"update_ratio"}, {"update_ratio", "max"}, {"update_ratio", "max", "min"},
             {"update_ratio", "abs_mean"}, st.ALL_STATISTICS]
    ratios = {st.compute_statistics(x, previous, need).update_ratio for need in asked}
    kept = previous.copy()
    ratios.add(st.compute_statistics(x, kept, {"update_ratio", "max", "min"}, keep_previous=True).update_ratio)
    assert len(ratios) == 1 and np.array_equal(kept, x)


def test_read_only_and_foreign_byte_order_inputs_use_the_same_kernels():
    x = np.random.default_rng(4).standard_normal(50_000).astype(np.float32)
    frozen = x.copy()
    frozen.flags.writeable = False
    swapped = x.astype(">f4")
    expected = st.compute_statistics(x, x * 2, NEEDED, ranges=RANGES, allclose_tolerances=TOLERANCES)
    for value in (frozen, swapped, x[::1]):
        got = st.compute_statistics(value, x * 2, NEEDED, ranges=RANGES, allclose_tolerances=TOLERANCES)
        assert got.as_dict() | {"dtype": None} == expected.as_dict() | {"dtype": None}
        assert got.allclose == expected.allclose and got.range_percentages == expected.range_percentages


@pytest.mark.parametrize("engine", ["compiled", "numpy"])
def test_keep_previous_copies_the_values_and_changes_no_result(engine):
    from msdebug_hooks.conditions import TensorChangeBelowThresholdCondition, TensorUnchangedCondition, check_tensors
    rng = np.random.default_rng(11)
    dtypes = ["float32", "float64", "bfloat16", "float16", "int32", "float32"]
    sizes = [70_007, 50_000, 40_000, 300, 7, 5000]
    values = [_random(rng, d, n, "plain") for d, n in zip(dtypes, sizes)]
    values[0] = values[0].reshape(7, 10_001)
    previous = [_random(rng, d, n, "plain") for d, n in zip(dtypes, sizes)]
    previous[0] = previous[0].reshape(7, 10_001)
    previous[4] = None                                   # no previous value: nothing to keep
    conditions = [TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=1e-4), TensorUnchangedCondition()]
    with _engine.forced_engine(engine):
        expected_batch = compute_statistics_batch(values, [None if p is None else p.copy() for p in previous],
                                                  NEEDED, ranges=RANGES, allclose_tolerances=TOLERANCES)
        expected_checks = check_tensors(conditions, values, [None if p is None else p.copy() for p in previous])
        kept = [None if p is None else p.copy() for p in previous]
        got = compute_statistics_batch(values, kept, NEEDED, ranges=RANGES, allclose_tolerances=TOLERANCES,
                                       keep_previous=True)
        assert [g.as_dict() for g in got] == [e.as_dict() for e in expected_batch]
        assert all(_same_bytes(k, v) for k, v in zip(kept, values) if k is not None)
        kept = [None if p is None else p.copy() for p in previous]
        assert check_tensors(conditions, values, kept, keep_previous=True) == expected_checks
        assert all(_same_bytes(k, v) for k, v in zip(kept, values) if k is not None)
        one = previous[1].copy()
        single = st.compute_statistics(values[1], one, NEEDED, keep_previous=True)
        assert single.as_dict() == expected_batch[1].as_dict() and np.array_equal(one, values[1])


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def test_keep_previous_refuses_what_it_cannot_write_before_touching_anything():
    from msdebug_hooks.errors import ConfigError
    x = np.arange(5000, dtype=np.float32)
    frozen = np.zeros(5000, np.float32)
    frozen.flags.writeable = False
    keep = np.zeros(5000, np.float32)
    with pytest.raises(ConfigError, match=r"previous\[1\].*read-only float32 array of 5000.*writable"):
        compute_statistics_batch([x, x], [keep, frozen], keep_previous=True)
    assert not keep.any()                                  # checked first: nothing was copied
    with pytest.raises(ConfigError, match=r"float64 array of 5000.*float32"):
        st.compute_statistics(x, np.zeros(5000), keep_previous=True)


def test_conditions_pickle_after_judging():
    """Conditions cache how they judge (per parameter set); a used condition must still pickle and judge alike."""
    import pickle

    from msdebug_hooks.conditions import TensorRangeCondition, TensorUnchangedCondition
    x = np.linspace(-3, 3, 101)
    for condition in (TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1, range_percentage_lt=50),
                      TensorUnchangedCondition(rtol=1e-3)):
        before = condition.check(x, x * 1.0001)
        copy = pickle.loads(pickle.dumps(condition))
        assert copy == condition and copy.check(x, x * 1.0001) == before


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_streamed_keep_buffers_hold_every_byte_at_any_alignment(dtype):
    """A keep buffer from ``STREAM_BYTES`` up is written with 16-byte streaming stores after a cached head up to
    alignment and before a cached tail: every offset and length remainder must still copy every byte, into a
    separate buffer or into the previous value itself, without changing a statistic."""
    from msdebug_hooks.conditions import _kernels
    rng = np.random.default_rng(17)
    itemsize = np.dtype(dtype).itemsize
    size = _kernels.STREAM_BYTES // itemsize + 4099            # several blocks and a ragged last one
    with _engine.forced_engine("compiled"):
        for offset in range(4):
            for extra in range(3):
                n = size + extra
                x = rng.standard_normal(n).astype(dtype)
                previous = (x + rng.standard_normal(n).astype(dtype) * 1e-3).astype(dtype)
                expected = st.compute_statistics(x, previous, NEEDED, allclose_tolerances=TOLERANCES)
                storage = np.zeros(n + 4, dtype)
                kept = storage[offset:offset + n]               # 0-3 elements past an aligned start
                kept[...] = previous
                got = st.compute_statistics(x, kept, NEEDED, allclose_tolerances=TOLERANCES, keep_previous=True)
                assert got.as_dict() == expected.as_dict()
                assert _same_bytes(kept, x) and not storage[:offset].any() and not storage[offset + n:].any()
