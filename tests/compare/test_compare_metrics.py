"""compare_arrays: the metric definitions against plain numpy, the verdict thresholds, and inputs that cannot be
compared (which must come back as a result, never an exception)."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from msdebug_hooks.compare import (DEFAULT_TOLERANCE, ERROR, NOT_COMPARABLE, PASS, WARNING, Tolerance,
                                   compare_arrays)
from msdebug_hooks.compare import metrics


def _reference_metrics(a: np.ndarray, b: np.ndarray, tol: Tolerance = DEFAULT_TOLERANCE) -> dict:
    """The documented definitions, written the slow obvious way."""
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    both = np.isfinite(a) & np.isfinite(b)
    d = np.abs(a[both] - b[both])
    rel = d / (np.abs(b[both]) + tol.relative_epsilon)
    same_special = (~both) & ((np.isnan(a) & np.isnan(b)) | ((a == b) & ~np.isnan(a)))
    n = a.size
    agree = int(np.count_nonzero(same_special))
    return dict(
        cosine=float(a[both] @ b[both] / (np.linalg.norm(a[both]) * np.linalg.norm(b[both]))),
        euclidean_distance=float(np.linalg.norm(a[both] - b[both])),
        max_abs_error=float(d.max()),
        mean_abs_error=float(d.mean()),
        max_rel_error=float(rel.max()),
        share_within_0_1_percent=(np.count_nonzero(rel <= 1e-3) + agree) / n,
        share_within_0_5_percent=(np.count_nonzero(rel <= 5e-3) + agree) / n,
        allclose_share=(np.count_nonzero(d <= tol.atol + tol.rtol * np.abs(b[both])) + agree) / n,
        nan_inf_mismatch=int(np.count_nonzero(~both)) - agree,
    )


def _assert_metrics(result, expected: dict) -> None:
    for name, value in expected.items():
        got = getattr(result, name)
        assert got == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_identical_arrays_pass_with_perfect_metrics():
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    r = compare_arrays(a, a.copy())
    assert r.verdict == PASS and r.passed and r.comparable
    assert (r.cosine, r.max_abs_error, r.mean_abs_error, r.max_rel_error) == (1.0, 0.0, 0.0, 0.0)
    assert r.share_within_0_1_percent == r.share_within_0_5_percent == r.allclose_share == 1.0
    assert r.nan_inf_mismatch == 0 and r.count == 20
    assert (r.shape_a, r.dtype_a, r.dtype_b) == ((4, 5), "float32", "float32")


def test_metrics_match_the_definitions_across_chunks_with_nan_and_inf():
    rng = np.random.default_rng(1)
    n = 3 * metrics.CHUNK_ELEMENTS + 17  # several chunks and a short tail
    b = rng.standard_normal(n).astype(np.float32)
    a = b * (1 + rng.uniform(-0.01, 0.01, n)).astype(np.float32)
    a[5] = b[5] = np.nan                            # same NaN: agrees
    a[metrics.CHUNK_ELEMENTS + 3] = np.inf          # Inf vs finite: mismatch
    a[2 * metrics.CHUNK_ELEMENTS] = np.nan
    b[2 * metrics.CHUNK_ELEMENTS] = np.inf          # NaN vs Inf: mismatch
    a[-1], b[-1] = np.inf, -np.inf                  # +Inf vs -Inf: mismatch
    a[-2] = b[-2] = -np.inf                         # same -Inf: agrees
    r = compare_arrays(a, b)
    _assert_metrics(r, _reference_metrics(a, b))
    assert r.nan_inf_mismatch == 3
    assert r.verdict == ERROR and "3 of" in r.reason and "NaN/Inf" in r.reason


def test_relative_error_is_against_the_reference_with_epsilon():
    r = compare_arrays(np.array([2.0, 1e-6]), np.array([1.0, 0.0]))
    assert r.max_rel_error == pytest.approx(1e-6 / DEFAULT_TOLERANCE.relative_epsilon)
    r = compare_arrays(np.array([2.0]), np.array([1.0]))
    assert r.max_rel_error == pytest.approx(1.0)    # |2-1| / |1|, not / |2|
    r = compare_arrays(np.array([1.0]), np.array([2.0]))
    assert r.max_rel_error == pytest.approx(0.5)


def test_scaled_values_are_an_error_even_though_the_cosine_is_one():
    b = np.random.default_rng(2).uniform(0.5, 2.0, 1000).astype(np.float32)
    r = compare_arrays(b * np.float32(1.01), b)
    assert r.cosine == pytest.approx(1.0, abs=1e-9)
    assert r.share_within_0_5_percent == 0.0
    assert r.verdict == ERROR and "0.5 %" in r.reason


def test_opposite_direction_is_an_error_by_cosine():
    b = np.random.default_rng(3).standard_normal(100)
    r = compare_arrays(-b, b)
    assert r.cosine == pytest.approx(-1.0)
    assert r.verdict == ERROR and "cosine" in r.reason


def test_small_noise_passes_and_fp16_against_fp32_warns():
    b = np.random.default_rng(4).uniform(1.0, 2.0, 1000).astype(np.float32)
    assert compare_arrays(b * np.float32(1 + 2e-6), b).verdict == PASS
    r = compare_arrays(b.astype(np.float16), b)
    assert r.verdict == WARNING, r
    assert "float16 vs float32" in r.reason and r.allclose_share < 1.0


def test_bfloat16_is_compared_through_float64():
    b = np.linspace(-3, 3, 101, dtype=np.float32)
    r = compare_arrays(b.astype(ml_dtypes.bfloat16), b)
    assert r.comparable and r.dtype_a == "bfloat16"
    exact = b.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert r.max_abs_error == pytest.approx(float(np.max(np.abs(exact - b))))
    same = b.astype(ml_dtypes.bfloat16)
    assert compare_arrays(same, same.copy()).verdict == PASS


def test_tolerance_is_the_users_to_change():
    b = np.full(10, 1.0)
    a = b + 5e-4
    assert compare_arrays(a, b).verdict == WARNING
    assert compare_arrays(a, b, Tolerance(rtol=1e-3, atol=0.0)).verdict == PASS
    assert compare_arrays(a, b, dataclasses.replace(DEFAULT_TOLERANCE, atol=1e-3)).verdict == PASS
    with pytest.raises(ValueError, match=r"Tolerance.rtol=-1 .*finite number >= 0"):
        Tolerance(rtol=-1)
    with pytest.raises(ValueError, match="cosine_error"):
        Tolerance(cosine_error=0.99999, cosine_pass=0.999)


@pytest.mark.parametrize("a, b, reason", [
    (np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), "shapes differ: [2, 3] vs [3, 2]"),
    (np.zeros(3, np.int32), np.zeros(3, np.float32), "dtypes differ: int32 vs float32"),
    (np.zeros(3, np.bool_), np.zeros(3, np.int8), "dtypes differ: bool vs int8"),
    (np.array(["x"]), np.zeros(1), "a: dtype str32 is not numeric"),
    (np.zeros(2, np.complex64), np.zeros(2, np.complex64), "dtype complex64 is not numeric"),
    (np.zeros(1), object(), "b: dtype object is not numeric"),
])
def test_not_comparable_is_a_result_with_the_reason(a, b, reason):
    r = compare_arrays(a, b)
    assert r.verdict == NOT_COMPARABLE and not r.comparable and not r.passed
    assert reason in r.reason
    assert r.cosine is None and r.max_abs_error is None


def test_float_widths_can_be_made_not_comparable():
    r = compare_arrays(np.zeros(2, np.float16), np.zeros(2), Tolerance(compare_across_float_dtypes=False))
    assert r.verdict == NOT_COMPARABLE and "float16 vs float64" in r.reason


def test_edge_shapes_and_values():
    zero = compare_arrays(np.zeros(7), np.zeros(7))
    assert zero.verdict == PASS and zero.cosine == 1.0
    one_zero = compare_arrays(np.zeros(7), np.ones(7))
    assert one_zero.cosine == 0.0 and one_zero.verdict == ERROR
    scalar = compare_arrays(np.float32(2.0), np.float32(2.5))
    assert scalar.shape_a == () and scalar.count == 1 and scalar.max_abs_error == 0.5 and scalar.verdict == ERROR
    empty = compare_arrays(np.empty((0, 3)), np.empty((0, 3)))
    assert empty.verdict == PASS and empty.reason == "both empty" and empty.count == 0
    nan_both = compare_arrays(np.full(4, np.nan), np.full(4, np.nan))
    assert nan_both.verdict == PASS and nan_both.nan_inf_mismatch == 0
    ints = compare_arrays(np.arange(10), np.arange(10) + (np.arange(10) == 9))
    assert ints.max_abs_error == 1.0 and ints.verdict != PASS
    bools = compare_arrays(np.array([True, False]), np.array([True, False]))
    assert bools.verdict == PASS


def test_tiny_differences_below_atol_pass_whatever_the_cosine():
    # gradients near zero: the direction of 1e-9 noise means nothing
    a = np.array([1e-9, -1e-9])
    b = np.array([-1e-9, 1e-9])
    r = compare_arrays(a, b)
    assert r.cosine == pytest.approx(-1.0) and r.verdict == PASS


def test_as_dict_is_plain():
    d = compare_arrays(np.ones((2, 2)), np.ones((2, 2))).as_dict()
    assert d["shape_a"] == [2, 2] and d["verdict"] == "pass" and set(d) >= {"cosine", "max_rel_error",
                                                                              "nan_inf_mismatch", "reason"}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32])
def test_chunked_fast_path_matches_the_float64_definitions(dtype):
    # no NaN/Inf: every chunk takes the fast path (float32 work for float32/float16, float64 for float64/int32)
    rng = np.random.default_rng(7)
    n = 2 * metrics.CHUNK_ELEMENTS + 333
    b = (rng.standard_normal(n) * 100).astype(dtype)
    a = (b.astype(np.float64) * (1 + rng.uniform(-0.01, 0.01, n))).astype(dtype)
    a[:100] = b[:100]                                   # some exact agreement
    a[100] = b[100] = 0                                 # a zero reference
    r = compare_arrays(a, b)
    expected = _reference_metrics(a, b)
    for name in ("max_abs_error", "max_rel_error"):
        assert getattr(r, name) == pytest.approx(expected[name], rel=1e-6), name
    for name in ("mean_abs_error", "euclidean_distance"):
        assert getattr(r, name) == pytest.approx(expected[name], rel=1e-5), name
    assert r.cosine == pytest.approx(expected["cosine"], abs=1e-6)
    for name in ("share_within_0_1_percent", "share_within_0_5_percent", "allclose_share"):
        assert getattr(r, name) == pytest.approx(expected[name], abs=3 / n), name   # float32 rounding at the edge


def test_float32_overflow_in_squares_falls_back_to_float64():
    b = np.full(100, 3e30, np.float32)                  # squares overflow float32, not float64
    r = compare_arrays(b.copy(), b)
    assert r.verdict == PASS and r.cosine == 1.0
    a = b.copy()
    a[0] = -3e30
    r = compare_arrays(a, b)
    assert r.max_abs_error == pytest.approx(6e30, rel=1e-6) and r.cosine == pytest.approx(0.98, abs=1e-6)


def test_small_tensors_within_atol_are_still_judged_by_direction():
    """Gradients of 1e-5 are all within atol 1e-4 of anything small: a sign flip must not pass on atol alone."""
    rng = np.random.default_rng(3)
    grad = (rng.standard_normal(1000) * 1e-5).astype(np.float32)
    flipped = compare_arrays(-grad, grad)
    assert flipped.verdict == "error" and "point elsewhere" in flipped.reason
    assert compare_arrays(np.roll(grad, 1), grad).verdict == "error"
    assert compare_arrays(grad * np.float32(1 + 1e-6), grad).verdict == "pass"


def test_tensors_at_rounding_noise_level_pass_on_atol():
    noise = np.random.default_rng(4).standard_normal(10) * 1e-7   # rounding noise, e.g. a bias gradient before BN
    assert compare_arrays(np.zeros(10), noise).verdict == "pass"
    assert compare_arrays(-noise, noise).verdict == "pass"
