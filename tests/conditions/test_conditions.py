"""The watchpoint engine against an independent, straightforward numpy reading of the protocol's formulas.

The reference below is written from ``docs/debugger-protocol.md`` section 2.2, element by element in float64
(one numpy call per statistic, no chunking, no shortcuts), and shares no code with ``msdebug_hooks.conditions``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from msdebug_hooks.conditions import (
    CONDITION_CLASSES, UI_CONDITIONS, OperatorOverflowCondition, TensorAllZeroCondition,
    TensorChangeAboveThresholdCondition, TensorChangeBelowThresholdCondition, TensorInitializationCondition,
    TensorOverflowCondition, TensorRangeCondition, TensorTooLargeCondition, TensorTooSmallCondition,
    TensorUnchangedCondition, bfloat16_to_float32, check_many, compute_statistics, from_protocol, from_ui,
    parse_condition, should_evaluate)
from msdebug_hooks.errors import ConfigError

# ---------------------------------------------------------------------------------------------------------------
# reference: the protocol doc, literally
# ---------------------------------------------------------------------------------------------------------------
EPS = 1e-9


def ref_stats(x: np.ndarray, p: np.ndarray | None, rng=(-np.inf, np.inf), rtol=1e-5, atol=1e-8) -> dict:
    x = np.asarray(x).astype(np.float64).ravel()
    n = x.size
    nan = int(np.isnan(x).sum())
    inf = int(np.isinf(x).sum())
    numbers = x[~np.isnan(x)]
    out = {"n": n, "nan": nan, "inf": inf,
           "max": float(numbers.max()) if numbers.size else math.nan,
           "min": float(numbers.min()) if numbers.size else math.nan}
    with np.errstate(all="ignore"):
        out["mean"] = float(x.mean()) if n else math.nan
        out["sd"] = (float(x.std(ddof=1)) if n > 1 else 0.0) if n else math.nan
        out["abs_mean"] = float(np.abs(x).mean()) if n else math.nan
    out["zero_count"] = int((x == 0).sum())
    out["positive_count"] = int((x > 0).sum())
    out["negative_count"] = int((x < 0).sum())
    out["zero_percentage"] = 100.0 * out["zero_count"] / n if n else 0.0
    out["range_percentage"] = 100.0 * int(((x >= rng[0]) & (x <= rng[1])).sum()) / n if n else 0.0
    out["max_min"] = out["max"] - out["min"]
    out["has_prev"] = p is not None
    if p is None:
        out["ratio"] = math.nan
        out["allclose"] = False
    else:
        p = np.asarray(p).astype(np.float64).ravel()
        if p.size != n:
            p = np.full(n, np.nan)  # "p is NaN if ... the element counts differ"
        with np.errstate(all="ignore"):
            diff = np.abs(x - p)
            out["ratio"] = float(diff.mean() / (np.abs(p).mean() + EPS)) if n else math.nan
            out["allclose"] = bool(np.all(diff <= atol + rtol * np.abs(p)))
    return out


STAT_OF = {"abs_mean": "abs_mean", "max": "max", "min": "min", "mean": "mean", "max_min": "max_min",
           "zero_percentage": "zero_percentage", "range_percentage": "range_percentage",
           "abs_mean_update_ratio": "ratio"}
OPS = {"gt": lambda a, b: a > b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "le": lambda a, b: a <= b}


def ref_check(cond_id: int, params: dict, x: np.ndarray, p: np.ndarray | None):
    """(hit, error_code, {param: actual or None}) following IsWatchpointHit as the doc states it."""
    r = ref_stats(x, p, (params.get("range_start_inclusive", -np.inf), params.get("range_end_inclusive", np.inf)),
                  params.get("rtol", 1e-5), params.get("atol", 1e-8))
    actual = {k: None for k in params}
    if r["n"] == 0:  # MindSpore skipped tensors without elements
        return False, 0, actual
    error = (1 if r["nan"] else 0) | (2 if r["inf"] else 0)
    if cond_id == 13:
        return r["nan"] + r["inf"] > 0, 0, actual
    needs_prev = cond_id in (18, 19, 20)
    hit = False
    if needs_prev and not r["has_prev"]:
        error |= 4
    if error:
        return False, error, actual
    if cond_id == 20:
        hit = r["allclose"]
    for name, value in params.items():
        stat_name, _, op = name.rpartition("_")
        if stat_name not in STAT_OF or op not in OPS:
            continue
        if stat_name == "range_percentage" and not ("range_start_inclusive" in params
                                                    or "range_end_inclusive" in params):
            continue
        stat = r[STAT_OF[stat_name]]
        if math.isnan(stat):
            continue
        actual[name] = stat
        hit = hit or OPS[op](stat, value)
    return hit, error, actual


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------
SHAPES = [(1,), (7,), (3, 5), (2, 3, 4, 5), (150_001,)]  # the last one spans three 64K-element chunks


def make(kind: str, shape, dtype, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        return (g.random(shape) < 0.4)
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        return g.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    x = g.standard_normal(n)
    if kind == "offset":
        x = 1000.0 + 0.01 * x
    elif kind == "relu":
        x = np.maximum(x, 0)
    elif kind == "negative":
        x = -np.abs(x) - 0.5
    elif kind == "zeros":
        x = np.zeros(n)
    elif kind in ("nan", "inf", "-inf", "naninf"):
        idx = g.integers(0, n, size=max(1, n // 1000))
        x[idx] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "naninf": np.nan}[kind]
        if kind == "naninf":
            x[(idx + 1) % n] = np.inf
    elif kind == "sparse":
        x[g.random(n) < 0.3] = 0.0
    return x.reshape(shape).astype(dtype)


FLOAT_KINDS = ["normal", "offset", "relu", "negative", "zeros", "nan", "inf", "-inf", "naninf", "sparse"]
CASES = ([(k, s, np.float32, 11) for k in FLOAT_KINDS for s in SHAPES]
         + [(k, s, dt, 23) for k in ("normal", "sparse", "nan", "inf") for s in ((7,), (150_001,))
            for dt in (np.float16, np.float64)]
         + [("int", s, dt, 5) for s in ((3, 5), (150_001,)) for dt in (np.int8, np.uint8, np.int32, np.int64)]
         + [("bool", s, np.bool_, 3) for s in ((3, 5), (150_001,))]
         + [("empty", (0,), dt, 0) for dt in (np.float32, np.int32, np.bool_)])


def case_id(case) -> str:
    kind, shape, dtype, seed = case
    return f"{kind}-{np.dtype(dtype).name}-{'x'.join(map(str, shape))}"


# ---------------------------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------------------------
def close(a, b, rel=2e-6, abs_=1e-9) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_statistics_match_reference(case):
    kind, shape, dtype, seed = case
    x = make(kind, shape, dtype, seed)
    s = compute_statistics(x)
    r = ref_stats(x, None)
    assert s.count == r["n"]
    assert s.nan_count == r["nan"] and s.inf_count == r["inf"]
    for name in ("zero_count", "positive_count", "negative_count"):
        assert getattr(s, name) == r[name], name
    assert close(s.max, r["max"], 0, 0) and close(s.min, r["min"], 0, 0)  # max/min are elements: exact
    assert close(s.mean, r["mean"], abs_=1e-6 * max(1.0, r["sd"] if math.isfinite(r["sd"]) else 1.0))
    assert close(s.sd, r["sd"], rel=2e-5)
    assert close(s.abs_mean, r["abs_mean"])
    assert close(s.zero_percentage, r["zero_percentage"], 0, 0)


def test_only_needed_statistics_are_computed():
    s = compute_statistics(np.arange(10.0), needed={"max"})
    assert s.max == 9.0 and s.min is None and s.mean is None and s.zero_count is None
    assert s.nan_count == 0  # always counted: every watchpoint needs it for its error code


def test_nan_and_inf_counts_split_by_sign():
    s = compute_statistics(np.array([np.nan, np.inf, -np.inf, -np.inf, 1.0], np.float32))
    assert (s.nan_count, s.pos_inf_count, s.neg_inf_count) == (1, 1, 2)
    assert s.max == np.inf and s.min == -np.inf  # NaN skipped, as std::max(acc, NaN) keeps acc
    assert math.isnan(s.mean) and math.isnan(s.sd)


def test_all_nan_has_no_max():
    s = compute_statistics(np.full(5, np.nan))
    assert math.isnan(s.max) and math.isnan(s.min) and s.nan_count == 5


def test_large_offset_sd_does_not_cancel():
    x = (1e4 + np.random.default_rng(1).standard_normal(200_000) * 1e-3).astype(np.float32)
    assert math.isclose(compute_statistics(x).sd, float(x.astype(np.float64).std(ddof=1)), rel_tol=1e-4)


def test_bfloat16_words_read_as_float32():
    f = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    words = (f.view(np.uint32) >> 16).astype(np.uint16)
    expected = np.array([np.frombuffer((int(w) << 16).to_bytes(4, "little"), np.float32)[0] for w in words])
    assert np.array_equal(bfloat16_to_float32(words), expected)
    s = compute_statistics(words, bfloat16=True)
    assert s.dtype == "bfloat16" and s.max == expected.max() and s.min == expected.min()
    hit = check_many([TensorTooLargeCondition(max_gt=float(expected.max()) - 1e-3)], words, bfloat16=True)[0]
    assert hit.hit and hit.params[0].actual_value == float(expected.max())


@pytest.mark.parametrize("value", [np.array([1 + 2j, 3j]), np.array(["a", "b"]), np.array([object()])],
                         ids=["complex", "str", "object"])
def test_unsupported_dtype_never_hits_and_says_why(value):
    res = TensorOverflowCondition().check(value)
    assert not res.hit and res.error_code == 0 and "not supported" in res.note and value.dtype.name in res.note
    with pytest.raises(TypeError, match="not supported"):
        compute_statistics(value)


def test_range_bounds_compare_in_double_precision():
    # 0.1f is 0.100000001490116..., above the double 0.1: MindSpore's double compare leaves it out of [0, 0.1]
    x = np.array([0.1, 0.05, 0.2], np.float32)
    s = compute_statistics(x, ranges=[(0.0, 0.1), (0.1, 1.0)])
    assert s.range_percentages[(0.0, 0.1)] == pytest.approx(100 / 3)
    assert s.range_percentages[(0.1, 1.0)] == pytest.approx(200 / 3)


# ---------------------------------------------------------------------------------------------------------------
# conditions against the reference
# ---------------------------------------------------------------------------------------------------------------
def thresholds(stat: float, spec_limit: str, seed: int, exact: bool = True) -> list[float]:
    """Values on both sides of the statistic (clear of float32 accumulation error) and, for exact ones, on it."""
    if not math.isfinite(stat):
        stat = 0.5
    margin = 1e-3 * max(1.0, abs(stat))
    vals = [stat - margin, stat + margin] + ([stat] if exact else [])
    g = np.random.default_rng(seed)
    vals.append(stat + float(g.uniform(-3, 3)) * margin * 10)
    if spec_limit == "percentage":
        vals = [min(100.0, max(0.0, v)) for v in vals]
    elif spec_limit == "abs":
        vals = [max(0.0, v) for v in vals]
    elif spec_limit == "positive":
        vals = [max(1e-6, v) for v in vals]
    return vals


EXACT_STATS = {"max", "min", "zero_percentage", "range_percentage", "max_min"}


def assert_same(cond, x, p=None):
    res = cond.check(x, p)
    hit, error, actual = ref_check(cond.condition_id, cond.params, x, p)
    assert res.error_code == error, (cond, res)
    for pr in res.params:
        exp = actual[pr.name]
        if exp is None:
            assert pr.actual_value is None and not pr.hit, (cond, pr)
            continue
        stat = pr.name.rpartition("_")[0]
        if stat in EXACT_STATS:
            assert pr.actual_value == pytest.approx(exp, rel=1e-12, abs=1e-12), (cond, pr)
        else:
            assert close(pr.actual_value, exp, rel=1e-5, abs_=1e-7), (cond, pr, exp)
        op = pr.name.rpartition("_")[2]
        assert pr.hit == OPS[op](exp, pr.value) or abs(exp - pr.value) <= 1e-6 * max(1, abs(exp)), (cond, pr)
    assert res.hit == hit, (cond, res, hit)
    return res


VALUE_CONDITIONS = [
    (TensorTooLargeCondition, ["abs_mean_gt", "max_gt", "min_gt", "mean_gt"]),
    (TensorTooSmallCondition, ["abs_mean_lt", "max_lt", "min_lt", "mean_lt"]),
    (TensorAllZeroCondition, ["zero_percentage_ge"]),
    (TensorInitializationCondition, ["zero_percentage_ge", "max_gt", "min_lt"]),
    (TensorRangeCondition, ["max_min_lt", "max_min_gt"]),
]
REF_KEY = {"abs_mean": "abs_mean", "max": "max", "min": "min", "mean": "mean", "zero_percentage": "zero_percentage",
           "max_min": "max_min"}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_value_conditions_match_reference(case):
    kind, shape, dtype, seed = case
    x = make(kind, shape, dtype, seed)
    r = ref_stats(x, None)
    checked = 0
    for cls, names in VALUE_CONDITIONS:
        for name in names:
            spec = next(s for s in cls.param_specs if s.name == name)
            stat = name.rpartition("_")[0]
            for value in thresholds(r[REF_KEY[stat]], spec.limit, seed, exact=stat in EXACT_STATS):
                assert_same(cls(**{name: value}), x)
                checked += 1
    assert checked >= 40


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_range_percentage_matches_reference(case):
    kind, shape, dtype, seed = case
    x = make(kind, shape, dtype, seed)
    finite = np.asarray(x, np.float64).ravel()
    finite = finite[np.isfinite(finite)]
    if finite.size:
        lo, hi = np.quantile(finite, [0.2, 0.7])
        bounds = [(float(lo), float(hi)), (float(finite.min()), float(finite.max())), (0.0, 0.1), (-1e3, 0.0)]
    else:
        bounds = [(0.0, 1.0)]
    for start, end in bounds:
        pct = ref_stats(x, None, (start, end))["range_percentage"]
        for value in {min(100.0, max(0.0, v)) for v in (pct, pct - 0.5, pct + 0.5, 0.0, 100.0)}:
            for name in ("range_percentage_lt", "range_percentage_gt"):
                assert_same(TensorRangeCondition(range_start_inclusive=start, range_end_inclusive=end,
                                                 **{name: value}), x)


def previous_variants(x: np.ndarray, seed: int):
    g = np.random.default_rng(seed + 100)
    xf = np.asarray(x, np.float64)
    yield "none", None
    yield "same", x.copy()
    if x.size:
        yield "noisy", (xf + g.standard_normal(x.shape) * 0.05).astype(x.dtype if x.dtype.kind == "f" else np.float64)
        yield "scaled", (xf * 1.5).astype(np.float64)
        yield "tiny_change", (xf * (1 + 1e-7)).astype(np.float64)
        yield "other_size", np.ones(x.size + 1, np.float32)
        bad = xf.copy().ravel()
        bad[0] = np.nan
        yield "prev_nan", bad.reshape(x.shape)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("normal", "relu", "zeros", "nan", "int", "bool",
                                                                "empty", "sparse")], ids=case_id)
def test_change_conditions_match_reference(case):
    kind, shape, dtype, seed = case
    x = make(kind, shape, dtype, seed)
    for label, p in previous_variants(x, seed):
        r = ref_stats(x, p)
        ratio = r["ratio"] if math.isfinite(r["ratio"]) else 0.1
        for value in thresholds(ratio, "abs", seed, exact=False):
            assert_same(TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=value), x, p)
            assert_same(TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=value), x, p)
        for rtol, atol in ((1e-5, 1e-8), (0.0, 0.0), (0.2, 1e-3)):
            res = assert_same(TensorUnchangedCondition(rtol=rtol, atol=atol), x, p)
            if label == "none" and x.size:
                assert res.error_code & 4 and not res.hit


def test_no_previous_sets_bit_4_even_with_nan():
    x = np.array([np.nan, 1.0])
    assert TensorChangeAboveThresholdCondition().check(x).error_code == 1 | 4
    assert TensorChangeAboveThresholdCondition().check(x, x).error_code == 1
    assert TensorUnchangedCondition().check(np.ones(3)).error_code == 4


def test_overflow_clears_error_code():
    for x, hit in ((np.array([1.0, np.nan]), True), (np.array([np.inf]), True), (np.arange(4.0), False)):
        res = TensorOverflowCondition().check(x)
        assert (res.hit, res.error_code) == (hit, 0)


def test_nan_blocks_value_parameters():
    res = TensorTooLargeCondition(max_gt=0.0).check(np.array([5.0, np.nan, -np.inf]))
    assert (res.hit, res.error_code) == (False, 3)
    assert res.params[0].actual_value is None and res.errors == ["nan", "inf"]


def test_empty_tensor_is_not_analysed():
    for cond in (TensorAllZeroCondition(zero_percentage_ge=0), TensorRangeCondition(max_min_lt=1.0),
                 TensorChangeBelowThresholdCondition(), TensorOverflowCondition()):
        res = cond.check(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
        assert not res.hit and res.error_code == 0 and "no elements" in res.note


def test_all_zero_default_and_partial():
    assert TensorAllZeroCondition().params == {"zero_percentage_ge": 100.0}
    assert TensorAllZeroCondition().check(np.zeros(10, np.int32)).hit
    res = TensorAllZeroCondition(zero_percentage_ge=50).check(np.array([0, 0, 1.5]))
    assert res.hit and res.params[0].actual_value == pytest.approx(200 / 3)


def test_operator_overflow_never_hits_here():
    res = OperatorOverflowCondition().check(np.array([np.inf]))
    assert not res.hit and "Ascend" in res.note


def test_check_many_equals_separate_checks():
    g = np.random.default_rng(8)
    x = g.standard_normal((300, 401)).astype(np.float32)
    p = x + g.standard_normal(x.shape).astype(np.float32) * 1e-2
    conds = [TensorTooLargeCondition(abs_mean_gt=0.5), TensorTooSmallCondition(mean_lt=0.0),
             TensorAllZeroCondition(), TensorOverflowCondition(), TensorUnchangedCondition(rtol=1e-2),
             TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=1e-3),
             TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1, range_percentage_lt=70),
             TensorRangeCondition(range_start_inclusive=0, range_end_inclusive=1, range_percentage_gt=30),
             TensorInitializationCondition(min_lt=-4), OperatorOverflowCondition()]
    together = check_many(conds, x, p)
    assert together == [c.check(x, p) for c in conds]
    assert [r.hit for r in together] == [True, False, False, False, False, True, True, True, True, False]


def test_check_many_rejects_non_conditions():
    with pytest.raises(ConfigError, match=r"conditions\[1\]"):
        check_many([TensorOverflowCondition(), "tensor_overflow"], np.ones(2))


# ---------------------------------------------------------------------------------------------------------------
# parameter validation
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("build, match", [
    (lambda: TensorTooLargeCondition(abs_mean_gt=1, max_gt=2), "exactly one check parameter"),
    (lambda: TensorTooSmallCondition(), "exactly one check parameter: one of abs_mean_lt"),
    (lambda: TensorInitializationCondition(zero_percentage_ge=50, max_gt=1), "exactly one check parameter"),
    (lambda: TensorRangeCondition(range_percentage_lt=10), "range_start_inclusive and range_end_inclusive"),
    (lambda: TensorRangeCondition(range_start_inclusive=0, range_percentage_gt=10), "range_end_inclusive"),
    (lambda: TensorRangeCondition(range_start_inclusive=0, range_end_inclusive=1, max_min_gt=1),
     "range_start_inclusive=0.0 is not allowed: only together with range_percentage"),
    (lambda: TensorRangeCondition(range_start_inclusive=2, range_end_inclusive=1, range_percentage_gt=1),
     "range_start_inclusive=2.0 .*<= range_end_inclusive"),
    (lambda: TensorAllZeroCondition(zero_percentage_ge=100.5), r"zero_percentage_ge=100.5 .*0 to 100"),
    (lambda: TensorAllZeroCondition(zero_percentage_ge=-1), "0 to 100"),
    (lambda: TensorRangeCondition(range_start_inclusive=0, range_end_inclusive=1, range_percentage_lt=101),
     "0 to 100"),
    (lambda: TensorTooLargeCondition(abs_mean_gt=-0.1), r"abs_mean_gt=-0.1 .*>= 0"),
    (lambda: TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=-1), ">= 0"),
    (lambda: TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=math.inf), ">= 0"),
    (lambda: TensorUnchangedCondition(rtol=-1e-5), "rtol=-1e-05"),
    (lambda: TensorRangeCondition(max_min_lt=0), r"max_min_lt=0 .*> 0"),
    (lambda: TensorTooLargeCondition(max_gt=math.nan), "max_gt=nan .*finite"),
    (lambda: TensorTooSmallCondition(min_lt=-math.inf), "finite"),
    (lambda: TensorTooLargeCondition(max_gt="1"), r"max_gt='1'"),
    (lambda: TensorUnchangedCondition(equal_nan="yes"), "True or False"),
    (lambda: from_protocol(15, [("max_gt", 1.0, False), ("sd_gt", 1.0, False)]),
     r"TensorTooLargeCondition.sd_gt=1.0 .*abs_mean_gt, max_gt, mean_gt, min_gt"),
    (lambda: from_protocol(13, [("max_gt", 1.0, False)]), "takes no parameters"),
    (lambda: from_protocol(7, []), r"watch_condition.condition=7 .*15 \(tensor_too_large\)"),
    (lambda: from_ui("weight_explosion", {}), "weight_explosion.*weight_overflow"),
    (lambda: parse_condition("tensor_too_large:abs_mean_gt"), "name:param=value"),
    (lambda: parse_condition("tensor_too_large:abs_mean_gt=big"), "abs_mean_gt='big'"),
    (lambda: parse_condition("tensor_too_huge:max_gt=1"), "tensor_too_huge.*tensor_too_large"),
    (lambda: parse_condition("tensor_too_large:max_gt=1,min_gt=0"), "exactly one check parameter"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_invalid_parameters_are_rejected_clearly(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError):
        TensorTooLargeCondition(abs_mean_ge=1)  # type: ignore[call-arg]


# ---------------------------------------------------------------------------------------------------------------
# protocol
# ---------------------------------------------------------------------------------------------------------------
EXAMPLES = [
    TensorTooLargeCondition(abs_mean_gt=3), TensorTooLargeCondition(mean_gt=-1.5),
    TensorTooSmallCondition(max_lt=0.25), TensorAllZeroCondition(), TensorAllZeroCondition(zero_percentage_ge=99.9),
    TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=2, range_percentage_lt=40),
    TensorRangeCondition(max_min_gt=5), TensorOverflowCondition(), TensorInitializationCondition(),
    TensorInitializationCondition(min_lt=-3), TensorUnchangedCondition(rtol=1e-3, atol=0.5),
    TensorChangeAboveThresholdCondition(), TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=0.01),
    OperatorOverflowCondition(),
]


def test_examples_cover_every_condition():
    assert {type(c) for c in EXAMPLES} == set(CONDITION_CLASSES)


@pytest.mark.parametrize("cond", EXAMPLES, ids=repr)
def test_protocol_round_trip(cond):
    cid, params = cond.condition_id, list(cond.params.items())
    assert from_protocol(cid, [(n, v, False) for n, v in params]) == cond
    full = cond.protocol_params()  # every parameter, disabled ones included, as a SetCMD carries them
    assert [n for n, _, _ in full] == [s.name for s in cond.param_specs]
    assert from_protocol(cid, full) == cond
    assert parse_condition(f"{cond.name}:" + ",".join(f"{n}={v}" for n, v in params)) == cond


def test_hidden_parameters_sent_disabled_fall_back_to_defaults():
    cond = from_protocol(20, [("rtol", 1e-3, False), ("atol", 0.0, True), ("equal_nan", 0.0, True)])
    assert cond.params == {"rtol": 1e-3, "atol": 1e-8, "equal_nan": False}
    cond = from_protocol(18, [("abs_mean_update_ratio_gt", 0.2, False), ("epsilon", 0.0, True)])
    assert cond.params == {"abs_mean_update_ratio_gt": 0.2, "epsilon": 1e-9}
    assert from_protocol(20, [("rtol", 1e-3, False), ("atol", 0.0, False), ("equal_nan", 1.0, False)]).params == {
        "rtol": 1e-3, "atol": 0.0, "equal_nan": True}
    assert from_protocol(20, [{"name": "rtol", "value": 0.1}]).params["rtol"] == 0.1


EXPECTED_UI = {
    "weight_initialization": (TensorInitializationCondition, "weight"),
    "weight_overflow": (TensorOverflowCondition, "weight"),
    "weight_too_large": (TensorTooLargeCondition, "weight"),
    "weight_too_small": (TensorTooSmallCondition, "weight"),
    "weight_not_changed": (TensorUnchangedCondition, "weight"),
    "weight_change_too_large": (TensorChangeAboveThresholdCondition, "weight"),
    "weight_change_too_small": (TensorChangeBelowThresholdCondition, "weight"),
    "gradient_vanishing": (TensorTooSmallCondition, "gradient"),
    "gradient_too_large": (TensorTooLargeCondition, "gradient"),
    "gradient_exploding": (TensorOverflowCondition, "gradient"),
    "tensor_overflow": (TensorOverflowCondition, "tensor"),
    "operator_overflow": (OperatorOverflowCondition, "tensor"),
    "tensor_initialization": (TensorInitializationCondition, "tensor"),
    "tensor_too_large": (TensorTooLargeCondition, "tensor"),
    "tensor_too_small": (TensorTooSmallCondition, "tensor"),
    "tensor_all_zero": (TensorAllZeroCondition, "tensor"),
    "tensor_range": (TensorRangeCondition, "tensor"),
    "activation_range": (TensorRangeCondition, "activation"),
}


def test_ui_ids_map_to_conditions_and_targets():
    assert set(UI_CONDITIONS) == set(EXPECTED_UI)
    for ui_id, (cls, target) in EXPECTED_UI.items():
        ui = UI_CONDITIONS[ui_id]
        assert (ui.condition_class, ui.target, ui.condition_id) == (cls, target, cls.condition_id)
    assert UI_CONDITIONS["operator_overflow"].ascend_only
    assert from_ui("gradient_too_large", {"abs_mean_gt": 10}) == TensorTooLargeCondition(abs_mean_gt=10)
    assert from_ui("weight_change_too_small", [("abs_mean_update_ratio_lt", 1e-5, False), ("epsilon", 0, True)]) \
        == TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=1e-5)
    assert parse_condition("gradient_exploding") == TensorOverflowCondition()
    assert parse_condition("TensorAllZero:zero_percentage_ge=99.9") == TensorAllZeroCondition(99.9)


def test_when_the_online_debugger_evaluates():
    init, large, change = TensorInitializationCondition(), TensorTooLargeCondition(max_gt=1), \
        TensorChangeAboveThresholdCondition()
    assert should_evaluate(init, initial_suspension=True, step_end=True)
    assert not should_evaluate(init, initial_suspension=False, step_end=True)
    assert not should_evaluate(large, initial_suspension=True, step_end=True)
    assert should_evaluate(large, initial_suspension=False, step_end=False)
    assert should_evaluate(change, initial_suspension=False, step_end=True)
    assert not should_evaluate(change, initial_suspension=False, step_end=False)


def test_public_names_resolve_from_the_package_without_mindspore():
    import subprocess
    import sys
    code = ("import sys, numpy as np, msdebug_hooks as m\n"
            "r = m.TensorTooLargeCondition(abs_mean_gt=1e3).check(np.ones(3))\n"
            "assert not r.hit and m.TensorStatistics and m.ConditionResult and m.ParamResult\n"
            "assert 'mindspore' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_check_tensors_walks_a_step():
    from msdebug_hooks.conditions import check_tensors
    tensors = [np.zeros(4), np.array([1.0, np.inf]), np.arange(3)]
    out = check_tensors([TensorAllZeroCondition(), TensorOverflowCondition()], tensors)
    assert [[r.hit for r in rs] for rs in out] == [[True, False], [False, True], [False, False]]
    assert out[1][0].error_code == 2 and out[1][1].error_code == 0


def test_previous_is_ignored_when_no_condition_needs_it():
    res = TensorTooLargeCondition(max_gt=0).check(np.ones(3), np.array(["not", "a", "tensor"]))
    assert res.hit and res.error_code == 0


def test_scalars_and_lists_are_tensors_too():
    assert TensorTooSmallCondition(min_lt=0).check(-1.0).hit
    assert TensorAllZeroCondition(zero_percentage_ge=50).check([0, 0, 1]).hit
    assert compute_statistics(np.float32(3.5)).sd == 0.0


def test_ml_dtypes_bfloat16_is_recognised():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0, 0.0], dtype=ml_dtypes.bfloat16)
    s = compute_statistics(x)
    assert (s.dtype, s.max, s.min, s.zero_count) == ("bfloat16", 1.5, -2.0, 1)


def test_non_contiguous_views_pair_with_previous_in_c_order():
    g = np.random.default_rng(12)
    x = g.standard_normal((300, 250)).astype(np.float32)
    p = x + 0.01
    view, prev_view = x.T[::2], p.T[::2]  # strided, transposed
    ref_hit, _, ref_actual = ref_check(18, {"abs_mean_update_ratio_gt": 0.001, "epsilon": 1e-9}, view, prev_view)
    res = TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.001).check(view, prev_view)
    assert res.hit == ref_hit and close(res.params[0].actual_value, ref_actual["abs_mean_update_ratio_gt"], 1e-5)
    assert compute_statistics(view).max == float(np.max(view))


def test_from_protocol_reads_protobuf_watch_conditions():
    pb = pytest.importorskip("msdebug_hooks.wire.debug_grpc_pb2")
    wc = pb.WatchCondition(condition=21)
    for name, value, disabled in [("range_start_inclusive", -1, False), ("range_end_inclusive", 1, False),
                                  ("range_percentage_lt", 0, True), ("range_percentage_gt", 30, False),
                                  ("max_min_lt", 0, True), ("max_min_gt", 0, True)]:
        wc.params.add(name=name, value=value, disabled=disabled)
    cond = from_protocol(wc.condition, wc.params)
    assert cond == TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1, range_percentage_gt=30)
    assert cond.check(np.linspace(-2, 2, 101)).hit  # 51 % of the values lie in [-1, 1]


def test_the_modules_of_conditions_import_each_other_one_way():
    """No import cycle inside ``conditions/`` (lazy imports count), and the condition classes never reach up to
    the batch machinery: ``Condition.check`` runs the one-tensor check below them."""
    import ast
    from pathlib import Path

    import msdebug_hooks.conditions as package

    folder = Path(package.__file__).parent
    prefix = "msdebug_hooks.conditions."
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    imports: dict[str, set[str]] = {}
    for name in names:
        found = set()
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith(prefix):
                    found.add(node.module[len(prefix):])
                elif node.module == prefix[:-1]:
                    found.update(alias.name for alias in node.names if alias.name in names)
        imports[name] = found & names
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for target in sorted(imports[name]):
                visit(target, (*path, name))
            done.add(name)

    for name in sorted(names):
        visit(name, ())
    assert not imports["conditions"] & {"checks", "batch", "judging", "layout", "statistics_engine"}
