"""``find_hits`` reuses a prepared batch layout from call to call (``conditions.layout``): a layout must be rebuilt
when what it was made for changes (a shape, a dtype, a previous value, a keep buffer, the conditions), never give
a stale answer (values changed in place, an array replaced by another one), and every call must give the hits a
fresh call gives.
"""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.conditions import (
    TensorChangeAboveThresholdCondition, TensorOverflowCondition, TensorTooLargeCondition, TensorTooSmallCondition,
    TensorUnchangedCondition, check_tensors, find_hits)
from msdebug_hooks.conditions import _engine, layout
from msdebug_hooks.conditions import stats as st
from msdebug_hooks.errors import ConfigError

SHAPES = [(6, 1, 5, 5), (16, 6, 5, 5), (120, 400), (120,), (84, 120), (84,), (10, 84), (10,)]   # LeNet's weights
CONDITIONS = [TensorOverflowCondition(), TensorTooLargeCondition(max_gt=2.5), TensorTooSmallCondition(min_lt=-2.5),
              TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.5), TensorUnchangedCondition(rtol=1e-6)]


def _reportable(results) -> list:
    return [(t, c, r) for t, per_tensor in enumerate(results) for c, r in enumerate(per_tensor) if r.reportable]


def _fresh(conditions, values, previous) -> list:
    """The hits of a call with no layout prepared, and those of ``check_tensors``: they must agree."""
    layout._CACHE.clear()
    fresh = find_hits(conditions, values, previous)
    assert fresh == _reportable(check_tensors(conditions, values, previous))
    return fresh


def _layouts() -> set[int]:
    return {id(found) for found in layout._CACHE.values() if found is not None}


@pytest.fixture()
def step():
    rng = np.random.default_rng(14)
    values = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    previous = [(v * 0.9).astype(np.float32) for v in values]
    previous[3] = values[3].copy()                        # unchanged: a hit of TensorUnchangedCondition
    layout._CACHE.clear()
    with _engine.forced_engine("compiled"):
        yield rng, values, previous
    layout._CACHE.clear()


def test_a_repeated_call_reuses_its_layout_and_reads_the_new_data(step):
    rng, values, previous = step
    assert values[2].size > st.SMALL_TENSOR               # both the large and the segmented path are reused
    first = find_hits(CONDITIONS, values, previous)
    assert len(_layouts()) == 1 and first == _fresh(CONDITIONS, values, previous)
    built = _layouts()
    for k in range(4):                                     # the same arrays, changed in place between calls
        for v in values:
            v *= np.float32(1.0 + 0.7 * k)
            v[~np.isfinite(v)] = 0.0                       # last round's NaN/Inf gone: no stale count may stay
        special = [2, 0, 5, 7][k]                          # the large tensor, then small ones, back and forth
        values[special].flat[k] = [np.nan, np.inf, np.nan, -np.inf][k]
        previous[5][:] = rng.standard_normal(previous[5].shape)
        previous[2][:] = values[2] if k in (1, 2) else values[2] * 0.5   # unchanged twice running
        got = find_hits(CONDITIONS, values, previous)
        assert _layouts() == built                         # nothing rebuilt: same shapes, dtypes and buffers
        assert got == _fresh(CONDITIONS, values, previous)
        built = _layouts()                                 # the fresh call's layout, used by the next round
    assert {c for _, c, _ in got} >= {0, 1, 2, 3}


@pytest.mark.parametrize("change", ["shape", "dtype", "previous shape", "previous dropped", "previous dtype",
                                    "new array", "conditions"])
def test_a_changed_batch_rebuilds_its_layout_and_gives_a_fresh_answer(step, change):
    rng, values, previous = step
    conditions = CONDITIONS
    find_hits(conditions, values, previous)
    before, before_keys = _layouts(), set(layout._CACHE)
    if change == "shape":
        values[1] = rng.standard_normal((16, 6, 5, 4)).astype(np.float32) * 5
    elif change == "dtype":
        values[4] = values[4].astype(np.float64) * 5
    elif change == "previous shape":
        previous[6] = previous[6][:, :80].copy()          # another element count: change conditions not evaluated
    elif change == "previous dropped":
        previous[0] = None
    elif change == "previous dtype":
        previous[2] = previous[2].astype(np.float64)
    elif change == "new array":                            # same shape and dtype, other data: read where it is now
        values[7] = np.full(10, np.nan, np.float32)
    else:
        conditions = CONDITIONS[:2] + [TensorUnchangedCondition(rtol=0.2)]
    got = find_hits(conditions, values, previous)
    if change == "new array":
        assert _layouts() == before and (7, 0) in {(t, c) for t, c, _ in got}
    else:
        assert set(layout._CACHE) != before_keys         # another signature: another layout (or the general path)
    assert got == _fresh(conditions, values, previous)


def test_swapped_keep_buffers_each_get_their_values(step):
    """The debugger's two alternating buffers: each call copies into the buffers it is given, never into the ones
    a cached layout was made for."""
    _, values, previous = step
    buffers = [[np.empty_like(v) for v in values] for _ in range(2)]
    other_holds = None
    for k in range(4):
        for v in values:
            v += np.float32(0.25)
        target, other = buffers[k % 2], buffers[(k + 1) % 2]
        for t in target:
            t.fill(-7)
        got = find_hits(CONDITIONS, values, previous, keep_into=target)
        for v, t in zip(values, target):
            np.testing.assert_array_equal(t, v)
        for held, t in zip(other_holds or [], other):  # the other buffer keeps what its own call put there
            np.testing.assert_array_equal(t, held)
        other_holds = [v.copy() for v in values]
        assert got == _fresh(CONDITIONS, values, previous)
    replaced = [np.empty_like(v) for v in values]           # new buffers at the old ones' place: copied there too
    find_hits(CONDITIONS, values, previous, keep_into=replaced)
    for v, t in zip(values, replaced):
        np.testing.assert_array_equal(t, v)


def test_a_cached_layout_does_not_keep_the_callers_buffers_alive(step):
    """Keep buffers can be the size of the model: once the caller drops them (a finished debugger session), a
    cached layout must not hold them."""
    import gc
    import weakref

    _, values, previous = step
    target = [np.empty_like(v) for v in values]
    find_hits(CONDITIONS, values, previous, keep_into=target)
    find_hits(CONDITIONS, values, previous, keep_into=target)
    assert _layouts()                                       # a layout is cached for these buffers
    watched = [weakref.ref(t) for t in target]
    del target
    gc.collect()
    assert all(ref() is None for ref in watched)
    fresh = [np.empty_like(v) for v in values]              # a later call with new buffers copies into them
    find_hits(CONDITIONS, values, previous, keep_into=fresh)
    for v, t in zip(values, fresh):
        np.testing.assert_array_equal(t, v)


def test_a_keep_buffer_made_read_only_is_refused(step):
    _, values, previous = step
    target = [np.empty_like(v) for v in values]
    find_hits(CONDITIONS, values, previous, keep_into=target)
    target[3].flags.writeable = False
    before = target[3].copy()
    with pytest.raises(ConfigError, match=r"keep_into\[3\]"):
        find_hits(CONDITIONS, [v + 1 for v in values], previous, keep_into=target)
    np.testing.assert_array_equal(target[3], before)


def test_a_layout_in_use_sends_the_call_to_the_general_path(step):
    """Each layout is locked while a call fills and judges it: another thread's call meanwhile computes anew."""
    _, values, previous = step
    values[5][0] = np.inf
    want = find_hits(CONDITIONS, values, previous)
    (busy,) = [found for found in layout._CACHE.values() if found is not None]
    assert busy.lock.acquire(blocking=False)
    state = busy.found.fstate.copy()
    try:
        for v in values:
            v *= np.float32(3.0)
        got = find_hits(CONDITIONS, values, previous)
        assert got == _reportable(check_tensors(CONDITIONS, values, previous)) and got != want
        np.testing.assert_array_equal(busy.found.fstate, state)     # the busy layout was not touched
    finally:
        busy.release()
    assert find_hits(CONDITIONS, values, previous) == got


def test_judging_ignores_floating_point_errors_and_restores_the_state():
    from msdebug_hooks.conditions.judging import _float_errors_ignored
    before = np.geterr()
    with np.errstate(invalid="raise"):
        with _float_errors_ignored():
            assert np.isnan(np.array([np.inf]) - np.array([np.inf]))[0]
        with pytest.raises(FloatingPointError):
            np.array([np.inf]) - np.array([np.inf])
    assert np.geterr() == before


def test_compiled_marks_cover_every_pair_the_array_judging_reports():
    """A prepared layout judges with one compiled call (``_step_kernels.mark_reportable``) that must mark every pair
    ``judging.reportable_pairs`` marks (it may add pairs next to a limit: their exact evaluation decides), on random
    batches of every condition class with NaN/Inf, empty tensors and missing or mismatched previous values."""
    from random_watch_work import random_batch

    from msdebug_hooks.conditions import judging
    from msdebug_hooks.conditions.checks import _batch_plan

    rng = np.random.default_rng(20)
    judged = marked = extra = 0
    with _engine.forced_engine("compiled"):
        k = _engine.kernels()
        for _ in range(300):
            values, previous, conditions = random_batch(rng, int(rng.integers(1, 9)))
            count = len(values)
            plan = _batch_plan(conditions)
            if plan is None:
                continue
            request, reads_previous, rules = plan
            read = previous if reads_previous else [None] * len(values)
            prepared = layout.PreparedLayout(k, request, values, read, None)
            if not prepared.servable:
                continue
            found = prepared.fill(values, previous, None)
            want = {tuple(p) for p in judging.reportable_pairs(conditions, found, rules)}
            got = {tuple(p) for p in prepared.reportable_pairs(rules)}
            assert want <= got, (want - got, conditions)
            judged += count * len(conditions)
            marked += len(want)
            extra += len(got - want)
    assert judged > 1000 and 100 < marked < judged and extra < marked / 10, (judged, marked, extra)


def test_compiled_marks_at_the_limits():
    """Statistics exactly at, or a rounding step past, each condition's limit: every operator's tie and near miss
    is marked when the exact evaluation may report it, and the hits equal ``check_tensors``'."""
    from msdebug_hooks.conditions import (TensorAllZeroCondition, TensorInitializationCondition,
                                          TensorRangeCondition, judging)
    from msdebug_hooks.conditions.checks import _batch_plan

    just_above_one = np.nextafter(np.float32(1.0), np.float32(2.0))
    values = [np.zeros(64, np.float32),                                        # 100 % zeros
              np.array([0.0, 0.0, 0.5, just_above_one], np.float32),            # 50 % zeros, max a hair above 1
              np.array([-2.0, -0.5, 0.5, 2.0], np.float32),                     # 50 % in [-1, 1]
              np.array([np.nextafter(np.float32(1.0), np.float32(0.0)), 0.25], np.float32)]   # max a hair below 1
    conditions = [TensorAllZeroCondition(zero_percentage_ge=100.0),
                  TensorInitializationCondition(zero_percentage_ge=50.0),
                  TensorTooLargeCondition(max_gt=1.0), TensorTooSmallCondition(max_lt=1.0),
                  TensorRangeCondition(range_start_inclusive=-1.0, range_end_inclusive=1.0, range_percentage_lt=50.0),
                  TensorRangeCondition(range_start_inclusive=-1.0, range_end_inclusive=1.0, range_percentage_gt=50.0)]
    with _engine.forced_engine("compiled"):
        request, _, rules = _batch_plan(conditions)
        prepared = layout.PreparedLayout(_engine.kernels(), request, values, [None] * len(values), None)
        found = prepared.fill(values, [None] * len(values), None)
        want = {tuple(p) for p in judging.reportable_pairs(conditions, found, rules)}
        assert {(0, 0), (0, 1), (1, 1), (1, 2), (3, 3)} <= want           # ties of >= and <=, hairs past > and <
        assert want <= {tuple(p) for p in prepared.reportable_pairs(rules)}
        assert find_hits(conditions, values) == _reportable(check_tensors(conditions, values))


def _prepared(values, previous, targets=None) -> "layout.PreparedLayout":
    from msdebug_hooks.conditions.checks import _batch_plan

    return layout.PreparedLayout(_engine.kernels(), _batch_plan(CONDITIONS).request, values, previous, targets)


@pytest.mark.parametrize("keep", ["none", "other buffers", "into the previous values"])
def test_float32_batches_filled_by_address_give_the_totals_of_the_array_path(step, keep):
    """One ``fill_float32`` call from the arrays' addresses must leave exactly (bit for bit) the totals and kept
    copies of the per-tensor path it replaces, for small and large tensors, NaN/Inf, unpaired previous values."""
    rng, values, previous = step
    values[0].flat[3] = np.nan
    values[2].flat[7] = -np.inf
    previous[6] = None
    for v in values:
        v += np.float32(0.125)
    states, copies = [], []
    prev = [None if p is None else p.copy() for p in previous]
    targets = {"none": None, "other buffers": [np.full_like(v, -1) for v in values],
               "into the previous values": prev}[keep]
    prepared = _prepared(values, prev, targets)
    assert prepared.all_float32
    for by_address in (False, True):          # arrays met for the first time go tensor by tensor, then by address
        for p, original in zip(prev, previous):
            if p is not None:
                p[...] = original             # as before the first fill (a keep into them overwrote them)
        for t in targets or []:
            if t is not None and keep == "other buffers":
                t.fill(-1)
        found = prepared.fill(values, prev, targets)
        assert (prepared._addressed != {}) == by_address
        states.append([found.fstate.copy(), found.istate.copy(), found.counts.copy()])
        copies.append([None if t is None else t.copy() for t in targets or []])
    for a, b in zip(*states):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(*copies):
        np.testing.assert_array_equal(a, b)
    if keep != "none":
        for v, t in zip(values, copies[0]):
            if t is not None:
                np.testing.assert_array_equal(t, v)


def test_an_address_table_is_dropped_when_its_arrays_die(step):
    """A table is kept per identity of the arrays: when one of them dies its entry goes at once, so arrays made
    later at the same addresses (and ids) are measured again, not read through a stale table."""
    import gc

    rng, values, previous = step
    target = [np.empty_like(v) for v in values]
    find_hits(CONDITIONS, values, previous, keep_into=target)
    find_hits(CONDITIONS, values, previous, keep_into=target)
    (prepared,) = [found for found in layout._CACHE.values() if found is not None]
    assert len(prepared._addressed) == 1
    del target
    gc.collect()
    assert prepared._addressed == {}
    for _ in range(3):                                    # new buffers, possibly where the old ones were
        target = [np.full_like(v, 5.0) for v in values]
        got = find_hits(CONDITIONS, values, previous, keep_into=target)
        for v, t in zip(values, target):
            np.testing.assert_array_equal(t, v)
        assert got == _fresh(CONDITIONS, values, previous)


def test_arrays_that_are_not_contiguous_are_not_read_by_address(step):
    rng, values, previous = step
    find_hits(CONDITIONS, values, previous)
    strided = [np.asfortranarray(v) if v.ndim > 1 else v for v in values]   # same shapes and dtype, other order
    strided[2] *= np.float32(3.0)
    (prepared,) = [found for found in layout._CACHE.values() if found is not None]
    assert prepared._address_table(strided, previous, None) is None
    assert find_hits(CONDITIONS, strided, previous) == _fresh(CONDITIONS, strided, previous)
