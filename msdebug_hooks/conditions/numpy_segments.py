"""numpy's route over a batch of small tensors: one float64 buffer, every statistic a segment reduction over it.

Why: a step hands the checks dozens to hundreds of small tensors, and a per-tensor pass costs its calls, not its
bytes. Here a group of small tensors is concatenated once and each statistic is one ``ufunc.reduceat`` over all
of them, written into the tensors' state rows (``state``). The sums are float64 like the single-tensor
pass for tensors of up to ``SMALL_TENSOR`` elements; a segment holding NaN or Inf (rare) is finished with the exact
rules one by one.
"""
from __future__ import annotations

import numpy as np

from msdebug_hooks.conditions.state import (
    F_ABS, F_DIFF, F_M2, F_MAX, F_MEAN, F_MIN, F_PREV_ABS, F_SUM, I_ANY, I_N, I_NAN, I_NINF, I_PINF, I_POS, I_ZERO,
    BatchTotals, Segments, State, new_state)
from msdebug_hooks.conditions.tensor_statistics import (
    ABS_MEAN, MAX, MIN, NEGATIVE_COUNT, POSITIVE_COUNT, SD, ZERO_COUNT)
from msdebug_hooks.conditions.totals import StatisticsRequest


def segments_into(found: BatchTotals, segments: Segments) -> None:
    """Every segment's totals into its row of ``found``: summed into a state of the group's own (columns written
    whole), then copied to the rows at once."""
    request = found.request
    needed = request.needed
    counts = np.array([p.shape[0] for p in segments.parts], np.int64)
    m = counts.shape[0]
    state = new_state(m, len(request.ranges) + len(request.tolerances))
    live = np.flatnonzero(counts)               # reduceat cannot express an empty segment: they keep the zeros
    if live.size:
        buf = np.concatenate([segments.parts[k] for k in live], dtype=np.float64, casting="unsafe")
        seg_counts = counts[live]
        starts = np.zeros(live.size, np.int64)
        np.cumsum(seg_counts[:-1], out=starts[1:])
        need_extremes = MAX in needed or MIN in needed
        sums = _sum_segments(state, slice(None) if live.size == m else live, buf, starts, seg_counts, needed,
                             request.ranges)
        previous = [segments.previous[k] for k in live]
        if any(p is not None for p in previous):
            _against_previous(state, live, buf, starts, seg_counts, previous, request)
        # a segment with NaN/Inf has a non-finite sum (float32-range values cannot overflow a float64 sum; a float64
        # overflow also lands here, where the exact per-segment path is right anyway)
        for j in np.flatnonzero(~np.isfinite(sums)):
            _finish_special_segment(state, int(live[j]), buf[starts[j]:starts[j] + seg_counts[j]], need_extremes)
    rows = np.asarray(segments.rows)
    found.fstate[rows], found.istate[rows], found.counts[rows] = state


def _sum_segments(state: State, cols: slice | np.ndarray, buf: np.ndarray, starts: np.ndarray,
                  seg_counts: np.ndarray, needed: frozenset[str], ranges: tuple) -> np.ndarray:
    """The reductions of every live segment (``cols``: their rows in ``state``) over their concatenation ``buf``;
    returns the sums."""
    f, i, c = state
    need_extremes = MAX in needed or MIN in needed
    with np.errstate(all="ignore"):
        sums = np.add.reduceat(buf, starts)
        i[cols, I_N] = seg_counts
        i[cols, I_ANY] = 1
        f[cols, F_SUM] = sums
        f[cols, F_MEAN] = means = sums / seg_counts
        if need_extremes:
            f[cols, F_MAX] = np.maximum.reduceat(buf, starts)
            f[cols, F_MIN] = np.minimum.reduceat(buf, starts)
        if SD in needed:
            dev = buf - np.repeat(means, seg_counts)
            f[cols, F_M2] = np.add.reduceat(np.multiply(dev, dev, out=dev), starts)
        if ABS_MEAN in needed:
            f[cols, F_ABS] = np.add.reduceat(np.abs(buf), starts)
        if ZERO_COUNT in needed or POSITIVE_COUNT in needed or NEGATIVE_COUNT in needed:
            i[cols, I_ZERO] = _count_segments(buf == 0, starts)
        if POSITIVE_COUNT in needed or NEGATIVE_COUNT in needed:
            i[cols, I_POS] = _count_segments(buf > 0, starts)
        for r, (lo, hi) in enumerate(ranges):
            c[cols, r] = _count_segments((buf >= lo) & (buf <= hi), starts)
    return sums


def _count_segments(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Trues per segment (``add.reduceat`` on bool would OR them)."""
    return np.add.reduceat(mask.view(np.int8), starts, dtype=np.int64)


def _against_previous(state: State, live: np.ndarray, buf: np.ndarray, starts: np.ndarray, seg_counts: np.ndarray,
                      previous: list[np.ndarray | None], request: StatisticsRequest) -> None:
    """sum |x - p|, sum |p| and the close counts of the paired live segments (an unpaired one is compared with
    zeros and its totals left out)."""
    pbuf = np.concatenate([p if p is not None else np.zeros(int(n)) for p, n in zip(previous, seg_counts)],
                          dtype=np.float64, casting="unsafe")
    paired = np.array([p is not None for p in previous], np.bool_)
    rows = live[paired]
    with np.errstate(all="ignore"):
        diff = np.abs(buf - pbuf)
        prev_abs = np.abs(pbuf, out=pbuf)
        state.fstate[rows, F_DIFF] = np.add.reduceat(diff, starts)[paired]
        state.fstate[rows, F_PREV_ABS] = np.add.reduceat(prev_abs, starts)[paired]
        n_ranges = len(request.ranges)
        for t, (rtol, atol) in enumerate(request.tolerances):
            close = _count_segments(diff <= atol + rtol * prev_abs, starts) == seg_counts
            state.counts[rows, n_ranges + t] = np.where(close, seg_counts, 0)[paired]


def _finish_special_segment(state: State, row: int, seg: np.ndarray, need_extremes: bool) -> None:
    """A segment holding NaN or Inf: counts and NaN-skipping max/min, as the chunked single-tensor path."""
    nan = int(np.count_nonzero(np.isnan(seg)))
    istate = state.istate[row]
    istate[I_NAN] = nan
    istate[I_PINF] = int(np.count_nonzero(seg == np.inf))
    istate[I_NINF] = int(np.count_nonzero(seg == -np.inf))
    if nan == seg.shape[0]:
        istate[I_ANY] = 0
    elif nan and need_extremes:
        state.fstate[row, F_MAX] = float(np.fmax.reduce(seg))
        state.fstate[row, F_MIN] = float(np.fmin.reduce(seg))
