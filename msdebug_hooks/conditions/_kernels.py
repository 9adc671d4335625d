"""The compiled statistics pass (numba): every needed statistic of a tensor in one read of memory.

Only the engine imports this module (``_engine`` loads ``_step_kernels``, which re-exports it), when statistics
are first computed or ``warm_up_statistics()`` runs. ``docs/statistics-engine.md`` tells the design at length.

Design. The tensor is walked in blocks of ``BLOCK`` elements (16 KB of float32: the block stays in L1 while every
statistic, previous-value sum and range count takes what it needs from it). A block is first summarised by a
branch-free loop (max/min, lane sums, zero/positive counts) that LLVM vectorises: max/min are fast-math
``llvm.maxnum``/``minnum`` calls, counts 32-bit integer adds, sums may be re-associated. In the same loop an integer
test on the float's bits (``exponent bits all ones``, read through an integer view of the same buffer) counts
NaN/Inf elements. A block holding NaN/Inf (rare), or whose float32 sums overflowed, is redone by a plain float64
scalar loop with exactly the NaN/Inf rules of ``tensor_statistics`` (NaN skipped by max/min, poisoning the sums).
The sums are compiled without the no-NaN/no-Inf assumptions: with them LLVM proves the overflow test true and drops
it. Block sums are combined in float64 across blocks; each block is summed around the running mean (and again
around its own mean when that cancels), then merged as Chan et al. merge (count, mean, M2): ``sd`` does not lose
digits to a large mean. allclose counts are float64 with IEEE compares, so NaN never compares close. The block
loops are in ``_block_kernels``; totals go to state rows (``state``: slots ``F_*`` / ``I_*``).

Threads: no ``parallel=True`` (a training machine's cores belong to training); ``nogil=True`` so other Python
threads run while a pass does. Every function is module-level with ``cache=True`` so compiled code is reused from
numba's disk cache by later processes.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

from msdebug_hooks.conditions._block_kernels import (
    _block_abs_sum, _block_close, _block_copy, _block_extremes, _block_full, _block_in_range, _block_moments,
    _block_previous, _block_previous64, _block_specials, _block_zeros, _careful_block, _merge_moments, _store_fence,
    _stream_copy)
from msdebug_hooks.conditions.state import F_ABS, F_DIFF, F_MAX, F_MEAN, F_MIN, F_PREV_ABS, I_ANY, I_N, I_POS, I_ZERO

#: elements per block: 16 KB of float32 (32 KB of float64) stays in L1 while every statistic reads it
BLOCK = 4096
#: a keep buffer of at least this many bytes is written with streaming stores (see ``_stream_copy``)
STREAM_BYTES = 1 << 18

# mode: which block summary a pass needs (``compiled.pass_mode`` picks the smallest that covers the request)
MODE_FULL, MODE_EXTREMES, MODE_ABS_ZERO, MODE_SPECIALS = 0, 1, 2, 3

# --- the pass -------------------------------------------------------------------------------------------------------

def _array(dtype, ndim: int = 1, readonly: bool = False):
    return types.Array(dtype, ndim, "C", readonly=readonly)


def _pass_signature(float_type, int_type):
    """x, bits, prev and bounds are typed read-only so that read-only inputs (memory-mapped dump files, frozen
    arrays) and writable ones share one compiled kernel: a writable array converts to the read-only type."""
    return types.void(_array(float_type, readonly=True), _array(int_type, readonly=True),
                      _array(float_type, readonly=True), types.int64, types.boolean,
                      _array(float_type, 2, readonly=True), _array(types.float64, 2, readonly=True),
                      _array(types.float64), _array(types.int64), _array(types.int64), _array(float_type))


#: the signatures compiled (or loaded from numba's disk cache) when this module is imported
PASS_SIGNATURES = [_pass_signature(types.float32, types.int32), _pass_signature(types.float64, types.int64)]
SEGMENTS_SIGNATURE = types.void(_array(types.float64, readonly=True), _array(types.int64, readonly=True),
                                _array(types.float64, readonly=True), _array(types.int64, readonly=True),
                                _array(types.boolean, readonly=True), types.int64,
                                _array(types.float64, 2, readonly=True), _array(types.float64, 2, readonly=True),
                                _array(types.float64, 2), _array(types.int64, 2), _array(types.int64, 2))


@njit(PASS_SIGNATURES, cache=True, nogil=True, boundscheck=False)
def accumulate(x, bits, prev, mode, with_previous, bounds, tolerances, fstate, istate, counts, keep_into):
    """Add the elements of ``x`` (float32 or float64; ``bits`` its same-size integer view) to the running totals.

    ``prev``: the previous value's elements in x's dtype (read when ``with_previous``). ``bounds``: (R, 2) inclusive
    ranges in x's dtype; ``tolerances``: (T, 2) float64 (rtol, atol); ``counts``: R in-range then T close counts.
    Totals go to ``fstate`` / ``istate`` (slots ``F_*`` / ``I_*``), so a tensor may be fed in several calls.
    ``keep_into``: when it has x's size, each block of x is copied into it after the block was read, with streaming
    stores from ``STREAM_BYTES`` up (it may be ``prev`` itself: a kept previous value then costs no extra read of
    x); pass an empty array otherwise.
    """
    n = x.shape[0]
    n_ranges = bounds.shape[0]
    full = mode == MODE_FULL
    keep = keep_into.shape[0] == n
    stream = keep and n * x.itemsize >= STREAM_BYTES
    for lo in range(0, n, BLOCK):
        hi = min(lo + BLOCK, n)
        k = hi - lo
        xb = x[lo:hi]
        bb = bits[lo:hi]
        careful = False
        if with_previous:
            pb = prev[lo:hi]
            pmx, pmn, pspecial, diff, prev_abs = _block_previous(xb, bb, pb)
        if mode == MODE_FULL:
            n_before = istate[I_N]
            shift = xb.dtype.type(fstate[F_MEAN]) if n_before > 0 and np.isfinite(fstate[F_MEAN]) else xb[0]
            mx, mn, s1, s2, zeros, positives, special = _block_full(xb, bb, shift)
            careful = special > 0 or not (np.isfinite(s1) and np.isfinite(s2))
            if not careful:
                sa = _block_abs_sum(xb)
                careful = not np.isfinite(sa)
            if not careful:
                t1 = np.float64(s1)
                m2 = np.float64(s2) - t1 * t1 / k
                if m2 < 0.5 * np.float64(s2):   # the mean is large against the spread: sum around the block mean
                    shift = xb.dtype.type(np.float64(shift) + t1 / k)
                    s1, s2 = _block_moments(xb, shift)
                    t1 = np.float64(s1)
                    m2 = max(np.float64(s2) - t1 * t1 / k, 0.0)
                mean = np.float64(shift) + t1 / k
                _merge_moments(fstate, n_before, k, mean * k, mean, m2)
                fstate[F_ABS] += sa
                istate[I_ZERO] += zeros
                istate[I_POS] += positives
        elif mode == MODE_EXTREMES:
            if with_previous:
                mx, mn, special = pmx, pmn, pspecial
            else:
                mx, mn, special = _block_extremes(xb, bb)
            careful = special > 0
        elif mode == MODE_ABS_ZERO:
            zeros, special = _block_zeros(xb, bb)
            careful = special > 0
            if not careful:
                sa = _block_abs_sum(xb)
                careful = not np.isfinite(sa)
            if not careful:
                fstate[F_ABS] += sa
                istate[I_ZERO] += zeros
                mx = mn = xb[0]  # unused: max/min are not asked for in this mode
        else:
            careful = _block_specials(bb) > 0
            mx = mn = xb[0]
        if careful:
            _careful_block(xb, full, fstate, istate)
        else:
            istate[I_ANY] = 1
            if mode == MODE_FULL or mode == MODE_EXTREMES:
                if mx > fstate[F_MAX]:
                    fstate[F_MAX] = mx
                if mn < fstate[F_MIN]:
                    fstate[F_MIN] = mn
        if with_previous:
            if np.isfinite(diff) and np.isfinite(prev_abs):
                fstate[F_DIFF] += diff
                fstate[F_PREV_ABS] += prev_abs
            else:
                diff64, prev_abs64 = _block_previous64(xb, pb)
                fstate[F_DIFF] += diff64
                fstate[F_PREV_ABS] += prev_abs64
            for t in range(tolerances.shape[0]):
                # allclose is an AND: once an element was not close, the rest need no look (changing weights
                # cost one block of it; unchanged ones, whose watchpoint is about to hit, the whole float64 pass)
                if counts[n_ranges + t] == istate[I_N]:
                    counts[n_ranges + t] += _block_close(xb, pb, tolerances[t, 0], tolerances[t, 1])
        for r in range(n_ranges):
            counts[r] += _block_in_range(xb, bounds[r, 0], bounds[r, 1])
        if stream:
            _stream_copy(keep_into[lo:hi], xb)
        elif keep:
            _block_copy(keep_into[lo:hi], xb)
        istate[I_N] += k
    if stream:
        _store_fence()


@njit([SEGMENTS_SIGNATURE], cache=True, nogil=True, boundscheck=False)
def accumulate_segments(x, bits, prev, starts, paired, mode, bounds, tolerances, fstate, istate, counts):
    """``accumulate`` for consecutive segments of one buffer: segment ``j`` is ``x[starts[j]:starts[j+1]]`` and
    adds to row ``j`` of ``fstate`` / ``istate`` / ``counts``; its previous value is read where ``paired[j]``."""
    nowhere = np.empty(0, np.float64)
    for j in range(starts.shape[0] - 1):
        a = starts[j]
        b = starts[j + 1]
        if b > a:
            accumulate(x[a:b], bits[a:b], prev[a:b], mode, paired[j], bounds, tolerances, fstate[j], istate[j],
                       counts[j], nowhere)


#: what the rest of the engine reads from here (``_step_kernels`` adds the one-call kernels to it)
__all__ = ["BLOCK", "STREAM_BYTES", "MODE_FULL", "MODE_EXTREMES", "MODE_ABS_ZERO", "MODE_SPECIALS", "PASS_SIGNATURES",
           "SEGMENTS_SIGNATURE", "accumulate", "accumulate_segments"]
