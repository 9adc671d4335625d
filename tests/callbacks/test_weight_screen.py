"""WeightMonitor's screen must never miss what the watchpoint engine would report (it only preselects), and should
let a healthy update through without calling the engine. Checked against the engine on crafted edge cases, with the
screen on its compiled kernel (float32 weights, numba) and on numpy's passes."""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.callbacks._weight_screen import WeightScreen
from msdebug_hooks.conditions import (TensorChangeAboveThresholdCondition, TensorOverflowCondition,
                                      TensorUnchangedCondition, check_many)
from msdebug_hooks.conditions._engine import forced_engine

RTOL, ATOL, RATIO = 1e-5, 1e-8, 0.1
KINDS = ("unchanged", "change_too_large", "nan_or_inf")
CONDITIONS = [TensorUnchangedCondition(rtol=RTOL, atol=ATOL),
              TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=RATIO), TensorOverflowCondition()]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def screen_engine(request):
    """Every test runs with the screen built on each engine (the engine the watchpoint check confirms with is the
    same one)."""
    with forced_engine(request.param):
        yield request.param


def _cases(rng: np.random.Generator, dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    """(previous, current) pairs around every decision boundary."""
    cases = []
    for size in (1, 7, 300, 5000, 200_000):
        p = (rng.standard_normal(size) * rng.choice([1e-3, 1.0, 1e3])).astype(dtype)
        p64 = p.astype(np.float64)
        tol = ATOL + RTOL * np.abs(p64)
        for k in (0.0, 0.5, 0.999, 1.0, 1.001, 2.0):      # change as a multiple of the allclose tolerance
            sign = rng.choice([-1.0, 1.0], size)
            cases.append((p, (p64 + sign * k * tol).astype(dtype)))
            only_one = p.copy()
            only_one[rng.integers(size)] = (p64 + k * tol)[0]
            cases.append((p, only_one))
        tight = (p64 + tol).astype(dtype)                   # the largest move allclose still accepts
        over = tight.astype(np.float64) - p64 > tol
        tight[over] = np.nextafter(tight[over], np.asarray(-np.inf, dtype))
        cases.append((p, tight))
        step = np.abs(rng.standard_normal(size)) + 0.1
        step *= RATIO * np.mean(np.abs(p64)) / step.mean()
        sign = rng.choice([-1.0, 1.0], size)
        for j in range(-6, 7):                              # mean update ratio within float32 jitter of RATIO
            cases.append((p, (p64 + sign * step * (1 + j * 3e-7)).astype(dtype)))
        for r in (0.05, 0.0999, 0.1, 0.1001, 0.2):         # mean update ratio around the threshold
            step = np.abs(rng.standard_normal(size)) + 0.1
            step *= r * np.mean(np.abs(p64)) / step.mean()
            cases.append((p, (p64 + rng.choice([-1.0, 1.0], size) * step).astype(dtype)))
        for bad in (np.nan, np.inf, -np.inf):
            x = p.copy()
            x[rng.integers(size)] = bad
            cases.append((p, x))
            cases.append((x, p.copy()))
        cases.append((np.zeros(size, dtype), np.zeros(size, dtype)))
    return cases


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_screen_never_misses_an_engine_hit(dtype):
    rng = np.random.default_rng(0)
    cases = _cases(rng, dtype)
    screen = WeightScreen([p for p, _ in cases], rtol=RTOL, atol=ATOL, ratio_gt=RATIO)
    masks = screen.screen([x for _, x in cases])
    hits = {kind: 0 for kind in KINDS}
    for index, (previous, current) in enumerate(cases):
        # the engine on the original arrays, not the screen's copies
        results = check_many(CONDITIONS, current, previous=previous)
        for kind, result in zip(KINDS, results):
            if result.hit:
                hits[kind] += 1
                assert masks[kind][index], f"screen missed {kind} in case {index}"
    assert all(hits.values()), hits  # every kind really occurred among the cases


def test_healthy_update_passes_without_suspects_and_buffers_swap():
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(s).astype(np.float32) for s in ((6, 1, 5, 5), (120, 400), (10,))]
    screen = WeightScreen(weights, rtol=RTOL, atol=ATOL, ratio_gt=RATIO)
    for _ in range(3):
        for w in weights:
            w -= 0.01 * rng.standard_normal(w.shape).astype(np.float32)   # an SGD-like step
        masks = screen.screen(weights)
        assert not any(mask.any() for mask in masks.values())
        screen.commit()
        for index, w in enumerate(weights):
            np.testing.assert_array_equal(screen.previous(index), w)  # the committed copy, not a view
    weights[1][3, 3] += 1.0  # one element moves; the rest stays put
    masks = screen.screen(weights)
    assert masks["unchanged"].tolist() == [True, False, True]


def test_large_weights_are_copied_exactly_at_any_offset_in_the_flat_buffer():
    """Weights of 256 KB and more are measured where they are and streamed into the screen's copy (compiled screen):
    the committed copy must hold every element, whatever the alignment their place in the flat buffer gives them."""
    rng = np.random.default_rng(4)
    weights = [rng.standard_normal(size).astype(np.float32) for size in (3, 70_001, 1, 65_536, 5, 131_075)]
    screen = WeightScreen(weights, rtol=RTOL, atol=ATOL, ratio_gt=RATIO)
    for _ in range(3):
        for w in weights:
            w -= 0.01 * rng.standard_normal(w.shape).astype(np.float32)
        masks = screen.screen(weights)
        assert not any(mask.any() for mask in masks.values())
        screen.commit()
        for index, w in enumerate(weights):
            np.testing.assert_array_equal(screen.previous(index), w)
    weights[3][-1] += 1.0             # the last element of a streamed weight moves; nothing else does
    masks = screen.screen(weights)
    assert masks["unchanged"].tolist() == [True, True, True, False, True, True]


def test_only_the_asked_conditions_are_screened():
    weights = [np.ones(4, np.float32), np.full(3, np.nan, np.float32)]
    screen = WeightScreen(weights, rtol=RTOL, atol=ATOL, ratio_gt=None, finite=False)
    masks = screen.screen(weights)
    assert list(masks) == ["unchanged"] and masks["unchanged"].tolist() == [True, False]
    screen = WeightScreen(weights, rtol=RTOL, atol=ATOL)
    assert screen.screen(weights)["nan_or_inf"].tolist() == [False, True]


def test_screen_rejects_empty_input():
    with pytest.raises(ValueError):
        WeightScreen([], rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError):
        WeightScreen([np.zeros(0, np.float32)], rtol=RTOL, atol=ATOL)


def test_groups_cover_every_element_once():
    from msdebug_hooks.callbacks._weight_screen import _groups

    sizes = [1, 5, 300, 64, 1000, 2, 129]
    ends = np.cumsum(sizes).tolist()
    bounds = list(zip([0] + ends[:-1], ends))
    for size in (1, 7, 64, 1000, 5000):
        position = 0
        for start, end, pieces in _groups(bounds, size):
            assert start == position and 0 < end - start <= size
            for index, lo, hi, at, to in pieces:       # consecutive pieces, in and out of the group, agree
                assert bounds[index][0] + lo == start + at == position and hi - lo == to - at > 0
                position += hi - lo
            assert position == end
        assert position == ends[-1]


def test_what_the_samples_miss_the_full_passes_find():
    rng = np.random.default_rng(2)
    weight = rng.standard_normal(300_000).astype(np.float32)      # several cache-sized groups
    screen = WeightScreen([weight], rtol=RTOL, atol=ATOL)
    assert screen.screen([weight])["unchanged"].tolist() == [True]
    screen.commit()
    weight[123_457] += 1.0                                          # not one of the sampled elements
    assert screen.screen([weight])["unchanged"].tolist() == [False]
    screen.commit()
    weight[200_001] = np.nan
    masks = screen.screen([weight])
    assert masks["nan_or_inf"].tolist() == [True] and masks["unchanged"].tolist() == [False]


def test_arrays_that_are_not_contiguous_are_read_afresh_every_time():
    base = np.arange(40, dtype=np.float32).reshape(5, 8)
    weight = base.T                                                 # a view that flattens to a copy
    screen = WeightScreen([weight], rtol=RTOL, atol=ATOL)
    base += 1.0
    assert screen.screen([weight])["unchanged"].tolist() == [False]
    np.testing.assert_array_equal(screen.current(0), weight)


def test_float32_screens_run_on_the_kernel_others_on_numpy(screen_engine):
    weights = [np.ones(5, np.float32), np.ones(3, np.float32)]
    assert (WeightScreen(weights, rtol=RTOL, atol=ATOL)._kernels is not None) == (screen_engine == "compiled")
    assert WeightScreen([w.astype(np.float64) for w in weights], rtol=RTOL, atol=ATOL)._kernels is None


def test_a_screen_moving_between_kernel_and_numpy_keeps_its_sums_right():
    """Views that stop being contiguous send a step to numpy's passes, which need sum |p| the kernel did not keep."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((64, 32)).astype(np.float32)
    other = rng.standard_normal(100).astype(np.float32)
    screen = WeightScreen([base, other], rtol=RTOL, atol=ATOL, ratio_gt=RATIO)
    expected = []
    for step, big in enumerate([False, True, False, True]):
        previous = [base.copy(), other.copy()]
        base += (0.5 if big else 0.01) * np.abs(base)                  # an update ratio of 0.5 or 0.01
        other -= 0.01 * other
        arrays = [base if step % 2 == 0 else np.asfortranarray(base).T.T, other]
        masks = screen.screen(arrays)
        results = [check_many(CONDITIONS, now, previous=before) for now, before in zip([base, other], previous)]
        expected.append([r[1].hit for r in results])
        assert masks["change_too_large"].tolist() == expected[-1]
        assert not masks["unchanged"].any() and not masks["nan_or_inf"].any()
        screen.commit()
    assert expected == [[False, False], [True, False], [False, False], [True, False]]
