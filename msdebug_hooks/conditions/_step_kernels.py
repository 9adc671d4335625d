"""Kernels that do a whole step's work for many tensors in one call, on top of the statistics pass (``_kernels``).

Why: in a step-end hook, right after a MindSpore step, each Python or numpy call costs many times its price in a
warm loop (``docs/statistics-engine.md``), so a check of a few small tensors costs its calls, not its bytes. Each
kernel here replaces a few dozen of them:
* ``screen_weights``: ``WeightMonitor``'s screen (copy, NaN/Inf, allclose until the first move, update-ratio sums,
  flags) over every weight;
* ``mark_reportable``: which (tensor, condition) pairs of a prepared batch may be reportable;
* ``fill_float32``: a prepared float32 batch's statistics pass, read from its arrays' addresses.
* ``sample_weights``: ``WeightMonitor``'s sampled check (fixed strided runs of every weight, gathered and
  measured against the last check's).

Arrays are passed as integer addresses where a call covers many of them (numba has no cheap list of arrays); the
callers hold the arrays while they are in use. ``_engine.kernels()`` returns this module: it re-exports the pass
(``from _kernels import *``), so the engine reads every compiled kernel and pass mode from one place.
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic

from msdebug_hooks.conditions._block_kernels import (
    _block_close, _block_copy, _block_previous, _block_previous64, _block_specials, _store_fence, _stream_copy)
from msdebug_hooks.conditions._kernels import *  # noqa: F401,F403 - the pass and its modes, re-exported
from msdebug_hooks.conditions._kernels import BLOCK, STREAM_BYTES, _array, accumulate
from msdebug_hooks.conditions.state import (
    F_ABS, F_DIFF, F_M2, F_MAX, F_MEAN, F_MIN, F_PREV_ABS, F_SUM, I_N, I_NAN, I_NINF, I_PINF, I_ZERO)


# --- the weight screen: many float32 arrays, copied and screened in one call ----------------------------------------

@intrinsic
def _float32_at(typingctx, address):
    """A float32 pointer from an integer address (``_engine.array_address``), for ``carray``."""
    if address != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return types.CPointer(types.float32)(types.int64), codegen


#: rows of ``screen_weights``' output (the flags), one column per array
SCREEN_UNCHANGED, SCREEN_TOO_LARGE, SCREEN_NOT_FINITE = 0, 1, 2
SCREEN_ROWS = 3
SCREEN_SIGNATURE = types.int64(_array(types.int64, 2, readonly=True), _array(types.float32),
                               _array(types.float32, readonly=True), types.float64, types.float64, types.float64,
                               types.float64, types.boolean, _array(types.float64, 2))


@njit([SCREEN_SIGNATURE], cache=True, nogil=True, boundscheck=False)
def screen_weights(sources, current, previous, rtol, atol, ratio_gt, epsilon, finite, out):
    """``WeightMonitor``'s screen in one call; returns how many arrays are flagged (0 on a healthy step).

    Array ``j`` has ``sources[1, j]`` float32 elements at address ``sources[0, j]`` (the caller keeps the arrays
    alive); it is copied into ``current`` after the arrays before it and, while each block is in L1, measured
    against ``previous`` (same layout); an array of ``STREAM_BYTES`` or more is measured where it is and each
    block then streamed into ``current`` (non-temporal stores, as ``accumulate`` writes a keep buffer: the copy is
    read only at the next step, so a cached store's read of each destination line would be wasted traffic).
    Measured: NaN/Inf count; whether some element fails |x - p| <= |p| * rtol + atol in float64, NaN included
    (once one fails the rest need no look); with ``ratio_gt`` >= 0, sum |x - p| and sum |p| (summed as
    ``accumulate`` sums them). Column ``j`` of ``out`` gets the flags: could be unchanged (no element
    failed), change too large (sum |x - p| > ratio_gt * (sum |p| + epsilon * n)), not finite (when ``finite``).
    """
    start = 0
    flagged = 0
    streamed = False
    with_sums = ratio_gt >= 0.0
    for j in range(sources.shape[1]):
        n = sources[1, j]
        source = carray(_float32_at(sources[0, j]), (n,))
        into = current[start:start + n]
        before = previous[start:start + n]
        stream = n * source.itemsize >= STREAM_BYTES
        streamed = streamed or stream
        special = 0
        is_moved = False
        change = 0.0
        previous_abs = 0.0
        for lo in range(0, n, BLOCK):
            hi = min(lo + BLOCK, n)
            pb = before[lo:hi]
            if stream:     # measured where it is, then streamed into the copy (no read of the copy's lines first)
                xb = source[lo:hi]
            else:          # small: copied first (cached stores: the copy is read again soon) and measured there
                xb = into[lo:hi]
                _block_copy(xb, source[lo:hi])
            if not is_moved:
                is_moved = _block_close(xb, pb, rtol, atol) < hi - lo
            if not with_sums:
                special += _block_specials(xb.view(np.int32))
            else:     # the engine's previous-value loop (its NaN/Inf count too), so the sums are the engine's
                _, _, block_special, diff, prev_abs = _block_previous(xb, xb.view(np.int32), pb)
                special += block_special
                if not (np.isfinite(diff) and np.isfinite(prev_abs)):
                    diff, prev_abs = _block_previous64(xb, pb)
                change += diff
                previous_abs += prev_abs
            if stream:
                _stream_copy(into[lo:hi], xb)
        too_large = with_sums and change > ratio_gt * (previous_abs + epsilon * n)
        not_finite = finite and special > 0
        out[SCREEN_UNCHANGED, j] = not is_moved
        out[SCREEN_TOO_LARGE, j] = too_large
        out[SCREEN_NOT_FINITE, j] = not_finite
        if not is_moved or too_large or not_finite:
            flagged += 1
        start += n
    if streamed:
        _store_fence()
    return flagged


# --- judging a prepared batch: which (tensor, condition) pairs may be reportable -----------------------------------

#: condition kinds, statistic codes and operators of ``mark_reportable``'s rule table (``rules.compiled_rules``)
JUDGE_ALL, JUDGE_NEVER, JUDGE_OVERFLOW, JUDGE_COMPARE = 0, 1, 2, 3
STAT_MAX, STAT_MIN, STAT_MEAN, STAT_SD, STAT_ABS_MEAN, STAT_ZERO_PERCENTAGE, STAT_MAX_MIN, STAT_UPDATE_RATIO, \
    STAT_RANGE = range(9)
OP_GT, OP_LT, OP_GE, OP_LE = range(4)
#: a comparison within this share of its limit marks the pair, whichever way it went: the exact evaluation decides
MARK_SLACK = 1e-9


@njit(cache=True, nogil=True)
def _statistic(code, column, fstate, istate, counts, n, n_ranges, paired, epsilon):
    """One statistic of a tensor with elements and no NaN/Inf, by ``totals.finish``'s formulas; NaN: not
    evaluated."""
    if code == STAT_MAX:
        return fstate[F_MAX]
    if code == STAT_MIN:
        return fstate[F_MIN]
    if code == STAT_MEAN:
        if np.isfinite(fstate[F_MEAN]) and np.isfinite(fstate[F_SUM]):
            return fstate[F_MEAN]
        return fstate[F_SUM] / n
    if code == STAT_SD:
        if n == 1:
            return 0.0
        if np.isfinite(fstate[F_M2]) and np.isfinite(fstate[F_MEAN]):
            return np.sqrt(fstate[F_M2] / (n - 1))
        return np.nan
    if code == STAT_ABS_MEAN:
        return fstate[F_ABS] / n
    if code == STAT_ZERO_PERCENTAGE:
        return 100.0 * istate[I_ZERO] / n
    if code == STAT_MAX_MIN:
        return fstate[F_MAX] - fstate[F_MIN]
    if code == STAT_UPDATE_RATIO:
        if not paired:
            return np.nan
        return (fstate[F_DIFF] / n) / (fstate[F_PREV_ABS] / n + epsilon)
    return 100.0 * counts[column] / n          # STAT_RANGE


@njit(cache=True, nogil=True)
def _may_hold(value, op, limit):
    """``value op limit``, or ``value`` within ``MARK_SLACK`` of ``limit`` (NaN: never)."""
    slack = MARK_SLACK * abs(limit)
    if op == OP_GT or op == OP_GE:
        return value >= limit - slack
    return value <= limit + slack


JUDGE_SIGNATURE = types.int64(
    _array(types.float64, 2, readonly=True), _array(types.int64, 2, readonly=True),
    _array(types.int64, 2, readonly=True), _array(types.int64, readonly=True), types.int64,
    _array(types.boolean, readonly=True), _array(types.boolean, readonly=True),
    _array(types.int64, 2, readonly=True), _array(types.int64, 2, readonly=True),
    _array(types.float64, readonly=True), types.float64, _array(types.boolean, 2))


@njit([JUDGE_SIGNATURE], cache=True, nogil=True)
def mark_reportable(fstate, istate, counts, count, n_ranges, has_previous, paired, conditions, comparisons,
                    limits, epsilon, marked):
    """Mark every (tensor, condition) pair whose ``Condition.evaluate`` may be reportable (a hit or an error code);
    returns how many were marked. A superset: a comparison near its limit is marked too, and the caller evaluates
    marked pairs exactly. Rows of ``conditions``: (kind, allclose column or -1, needs previous, first and end row
    of its comparisons); rows of ``comparisons``: (statistic, range column or -1, operator) with ``limits``."""
    total = 0
    for t in range(count.shape[0]):
        n = count[t]
        special = istate[t, I_NAN] + istate[t, I_PINF] + istate[t, I_NINF] > 0
        for c in range(conditions.shape[0]):
            kind = conditions[c, 0]
            mark = False
            if kind == JUDGE_ALL:
                mark = True
            elif kind == JUDGE_OVERFLOW:
                mark = n > 0 and special
            elif kind == JUDGE_COMPARE and n > 0:
                if special or (conditions[c, 2] != 0 and not has_previous[t]):
                    mark = True                          # an error code is reportable
                else:
                    column = conditions[c, 1]
                    if column >= 0:
                        mark = paired[t] and counts[t, n_ranges + column] == istate[t, I_N]
                    for r in range(conditions[c, 3], conditions[c, 4]):
                        if mark:
                            break
                        value = _statistic(comparisons[r, 0], comparisons[r, 1], fstate[t], istate[t], counts[t],
                                           n, n_ranges, paired[t], epsilon)
                        mark = _may_hold(value, comparisons[r, 2], limits[r])
            marked[t, c] = mark
            if mark:
                total += 1
    return total


# --- a prepared float32 batch filled from its arrays' addresses -----------------------------------------------------

#: columns of ``fill_float32``'s table, one row per tensor
FILL_VALUE, FILL_PREVIOUS, FILL_KEEP, FILL_SIZE, FILL_LARGE, FILL_PAIRED = range(6)
FILL_COLUMNS = 6
FILL_SIGNATURE = types.void(_array(types.int64, 2, readonly=True), types.int64,
                            _array(types.float32, 2, readonly=True), _array(types.float64, 2, readonly=True),
                            _array(types.float64, 2, readonly=True), _array(types.float64), _array(types.float64),
                            _array(types.float64, readonly=True), _array(types.float64, 2), _array(types.int64, 2),
                            _array(types.int64, 2))


@njit([FILL_SIGNATURE], cache=True, nogil=True, boundscheck=False)
def fill_float32(table, mode, bounds32, bounds64, tolerances, scratch, previous_scratch, start_row, fstate, istate,
                 counts):
    """A prepared layout's whole pass over float32 tensors given by address (the caller holds the arrays), row
    ``j`` of ``table``: value, previous value (0: none) and keep buffer (0: none) addresses, size, large, paired.
    Totals start from ``start_row`` and zeros. A large tensor is summed as ``accumulate`` sums float32 (its keep
    buffer filled block by block in the pass); a small one is converted to float64 in ``scratch`` first and summed
    as ``accumulate_segments`` sums its segment, then copied to its keep buffer (which may be its previous value:
    that was converted before). The same totals as the layout's numpy-side fill, without a call per tensor."""
    for j in range(table.shape[0]):
        fstate[j, :] = start_row
        istate[j, :] = 0
        counts[j, :] = 0
        n = table[j, FILL_SIZE]
        paired = table[j, FILL_PAIRED] != 0
        x = carray(_float32_at(table[j, FILL_VALUE]), (n,))
        if table[j, FILL_LARGE] != 0:
            prev = carray(_float32_at(table[j, FILL_PREVIOUS]), (n,)) if paired else x[:0]
            keep = carray(_float32_at(table[j, FILL_KEEP]), (n,)) if table[j, FILL_KEEP] != 0 else x[:0]
            accumulate(x, x.view(np.int32), prev, mode, paired, bounds32, tolerances, fstate[j], istate[j],
                       counts[j], keep)
            continue
        work = scratch[:n]
        _block_copy(work, x)
        prev64 = previous_scratch[:n] if paired else scratch[:0]
        if paired:
            _block_copy(prev64, carray(_float32_at(table[j, FILL_PREVIOUS]), (n,)))
        accumulate(work, work.view(np.int64), prev64, mode, paired, bounds64, tolerances, fstate[j], istate[j],
                   counts[j], scratch[:0])
        if table[j, FILL_KEEP] != 0:
            _block_copy(carray(_float32_at(table[j, FILL_KEEP]), (n,)), x)


# --- the sampled weight check: a fixed strided sample of many float32 arrays in one call ----------------------------

#: rows of ``sample_weights``' table (one column per array) and of its output
SAMPLE_ADDRESS, SAMPLE_SIZE, SAMPLE_FIRST, SAMPLE_STRIDE, SAMPLE_BLOCKS, SAMPLE_RUN = range(6)
SAMPLE_UNCHANGED, SAMPLE_CHANGE, SAMPLE_PREVIOUS_ABS, SAMPLE_NOT_FINITE = range(4)
SAMPLE_ROWS = 4
SAMPLE_SIGNATURE = types.int64(_array(types.int64, 2, readonly=True), _array(types.float32),
                               _array(types.float32, readonly=True), types.float64, types.float64, types.float64,
                               types.float64, _array(types.float64, 2))


@njit([SAMPLE_SIGNATURE], cache=True, nogil=True, boundscheck=False)
def sample_weights(table, current, previous, rtol, atol, ratio_gt, epsilon, out):
    """``WeightMonitor``'s sampled check in one call; returns how many arrays may hit (0 on a healthy step).

    Array ``j`` (``table[:, j]``: address, size, first sampled element, stride, blocks, run) has its sampled
    elements, ``blocks`` runs of ``run`` consecutive ones starting at ``first, first + stride, ...`` (a run is about a
    cache line: the memory read is the lines, not the elements), gathered into ``current`` after the samples of the
    arrays before it and measured against ``previous`` (the same samples at the last check): the NaN/Inf count;
    whether every sample is within |x - p| <= |p| * rtol + atol in float64 (NaN never is; without ``ratio_gt`` the
    look stops at the first sample that moves, as a training weight's first one does); with ``ratio_gt``, sum
    |x - p| and sum |p|. An array may hit when no sample moved, when one is not finite, or, with ``ratio_gt`` >= 0,
    when sum |x - p| > ratio_gt * (sum |p| + epsilon * blocks * run) (the update-ratio condition on the sample)."""
    start = 0
    flagged = 0
    for j in range(table.shape[1]):
        blocks, run = table[SAMPLE_BLOCKS, j], table[SAMPLE_RUN, j]
        count = blocks * run
        source = carray(_float32_at(table[SAMPLE_ADDRESS, j]), (table[SAMPLE_SIZE, j],))
        first, stride = table[SAMPLE_FIRST, j], table[SAMPLE_STRIDE, j]
        special = 0
        i = start
        for block in range(blocks):          # the gather, and the NaN/Inf count (x - x is NaN for both)
            at = first + block * stride
            for k in range(run):
                x = source[at + k]
                current[i] = x
                if not x - x == 0.0:
                    special += 1
                i += 1
        moved = False
        change = 0.0
        previous_abs = 0.0
        for i in range(start, start + count):
            x64 = np.float64(current[i])
            p64 = np.float64(previous[i])
            difference = abs(x64 - p64)
            if not moved and not difference <= abs(p64) * rtol + atol:
                moved = True
                if ratio_gt < 0.0:           # no sums asked for: the first move settles "unchanged"
                    break
            change += difference
            previous_abs += abs(p64)
        out[SAMPLE_UNCHANGED, j] = 0.0 if moved else 1.0
        out[SAMPLE_CHANGE, j] = change
        out[SAMPLE_PREVIOUS_ABS, j] = previous_abs
        out[SAMPLE_NOT_FINITE, j] = special
        if not moved or special > 0 or (ratio_gt >= 0.0 and change > ratio_gt * (previous_abs + epsilon * count)):
            flagged += 1
        start += count
    return flagged
