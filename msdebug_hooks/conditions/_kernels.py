"""The compiled statistics pass (numba): every needed statistic of a tensor in one read of memory.

Only ``_engine`` imports this module, when statistics are first computed or ``warm_up_statistics()`` runs (numba
takes 0.5-1.5 s to import and load the cached kernels). ``docs/statistics-engine.md`` tells the design at length.

Design. The tensor is walked in blocks of ``BLOCK`` elements (16 KB of float32: the block stays in L1 while every
statistic, previous-value sum and range count takes what it needs from it). A block is first summarised by a
branch-free loop (max/min, lane sums, zero/positive counts) that LLVM vectorises to 8-wide AVX2 code: max/min are
fast-math ``llvm.maxnum``/``minnum`` calls, counts 32-bit integer adds, sums may be re-associated. In the same loop
an integer test on the float's bits (``exponent bits all ones``, read through an integer view of the same buffer)
counts NaN/Inf elements. A block holding NaN/Inf (rare), or whose float32 sums overflowed, is redone by a plain
float64 scalar loop with exactly the NaN/Inf rules of ``stats`` (NaN skipped by max/min, poisoning the sums). The
sums are compiled without the no-NaN/no-Inf assumptions: with them LLVM proves the overflow test true and drops it.
Block sums are combined in float64 across blocks; each block is summed around the running mean (and again around
its own mean when that cancels), then merged as Chan et al. merge (count, mean, M2): ``sd`` does not lose digits to
a large mean. allclose counts are float64 with IEEE compares, so NaN never compares close.

Threads: no ``parallel=True`` (a training machine's cores belong to training); ``nogil=True`` so other Python
threads run while a pass does. Every function is module-level with ``cache=True`` so compiled code is reused from
numba's disk cache by later processes.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

#: elements per block: 16 KB of float32 (32 KB of float64) stays in L1 while every statistic reads it
BLOCK = 4096

# mode: which block summary a pass needs (``_engine.pass_mode`` picks the smallest that covers the request)
MODE_FULL, MODE_EXTREMES, MODE_ABS_ZERO, MODE_SPECIALS = 0, 1, 2, 3

# fstate (float64) and istate (int64) slots: the running totals ``stats._finish`` reads
F_MAX, F_MIN, F_SUM, F_MEAN, F_M2, F_ABS, F_DIFF, F_PREV_ABS = range(8)
I_N, I_NAN, I_PINF, I_NINF, I_ZERO, I_POS, I_ANY = range(7)
F_SLOTS, I_SLOTS = 8, 7

_FAST = {"reassoc", "nsz", "contract"}  # sums may be reordered (vectorised); no nnan/ninf: see the docstring
_REASSOC = {"reassoc"}


def _min_max_intrinsic(name: str):
    """A fast-math ``llvm.maxnum``/``llvm.minnum`` call: LLVM recognises it as a vectorisable reduction (numba's own
    ``max()`` lowers to a compare and a select without fast-math flags, which stays scalar)."""

    @intrinsic
    def fn(typingctx, a, b):
        if not (isinstance(a, types.Float) and a == b):
            return None

        def codegen(context, builder, signature, args):
            lty = args[0].type
            callee = builder.module.declare_intrinsic(name, [lty], ir.FunctionType(lty, [lty, lty]))
            return builder.call(callee, args, fastmath=("fast",))

        return a(a, b), codegen

    return fn


_fast_max = _min_max_intrinsic("llvm.maxnum")
_fast_min = _min_max_intrinsic("llvm.minnum")


@intrinsic
def _add_if(typingctx, acc, cond):
    """acc + cond in 32-bit integers (numba would widen to int64 and halve the vector width)."""
    if not (acc == types.int32 and cond == types.boolean):
        return None

    def codegen(context, builder, signature, args):
        return builder.add(args[0], builder.zext(args[1], ir.IntType(32)))

    return types.int32(types.int32, types.boolean), codegen


@intrinsic
def _add_if_special(typingctx, acc, bits):
    """acc + (the float with these bits is NaN or ±Inf): exponent bits all ones, tested on the integer bits."""
    if not (acc == types.int32 and isinstance(bits, types.Integer) and bits.bitwidth in (32, 64)):
        return None

    def codegen(context, builder, signature, args):
        width = args[1].type.width
        mask = ir.Constant(ir.IntType(width), 0x7F800000 if width == 32 else 0x7FF0000000000000)
        special = builder.icmp_unsigned("==", builder.and_(args[1], mask), mask)
        return builder.add(args[0], builder.zext(special, ir.IntType(32)))

    return types.int32(types.int32, bits), codegen


# --- block summaries (fast-math: valid only for a block free of NaN/Inf, which ``special`` tells) ------------------

@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_full(xb, bb, shift):
    zero = xb.dtype.type(0)
    mx = xb[0]
    mn = xb[0]
    s1 = zero
    s2 = zero
    zeros = np.int32(0)
    positives = np.int32(0)
    special = np.int32(0)
    for i in range(xb.shape[0]):
        v = xb[i]
        special = _add_if_special(special, bb[i])
        mx = _fast_max(mx, v)
        mn = _fast_min(mn, v)
        d = v - shift
        s1 += d
        s2 += d * d
        zeros = _add_if(zeros, v == zero)
        positives = _add_if(positives, v > zero)
    return mx, mn, s1, s2, zeros, positives, special


@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_abs_sum(xb):
    """Sum of |x| of a block, in its own loop so that every mode sums in the same order: a statistic must not
    depend on which other statistics were asked for."""
    sa = xb.dtype.type(0)
    for i in range(xb.shape[0]):
        sa += abs(xb[i])
    return sa


@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_moments(xb, shift):
    """(sum of x - shift, sum of its squares) of a NaN/Inf-free block: the redo around the block's own mean."""
    zero = xb.dtype.type(0)
    s1 = zero
    s2 = zero
    for i in range(xb.shape[0]):
        d = xb[i] - shift
        s1 += d
        s2 += d * d
    return s1, s2


@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_extremes(xb, bb):
    mx = xb[0]
    mn = xb[0]
    special = np.int32(0)
    for i in range(xb.shape[0]):
        v = xb[i]
        special = _add_if_special(special, bb[i])
        mx = _fast_max(mx, v)
        mn = _fast_min(mn, v)
    return mx, mn, special


@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_zeros(xb, bb):
    zero = xb.dtype.type(0)
    zeros = np.int32(0)
    special = np.int32(0)
    for i in range(xb.shape[0]):
        zeros = _add_if(zeros, xb[i] == zero)
        special = _add_if_special(special, bb[i])
    return zeros, special


@njit(cache=True, nogil=True, boundscheck=False)
def _block_specials(bb):
    special = np.int32(0)
    for i in range(bb.shape[0]):
        special = _add_if_special(special, bb[i])
    return special


# --- the careful path: a block with NaN/Inf (or float32 overflow), in float64 with IEEE rules -----------------------

@njit(cache=True, nogil=True, boundscheck=False)
def _careful_block(xb, full, fstate, istate):
    k = xb.shape[0]
    mx = -np.inf
    mn = np.inf
    total = 0.0
    abs_total = 0.0
    nan = pinf = ninf = zeros = positives = 0
    for i in range(k):
        v = np.float64(xb[i])
        total += v
        abs_total += abs(v)
        if v != v:
            nan += 1
            continue
        if v > mx:
            mx = v
        if v < mn:
            mn = v
        if v == np.inf:
            pinf += 1
        elif v == -np.inf:
            ninf += 1
        if v == 0.0:
            zeros += 1
        elif v > 0.0:
            positives += 1
    if nan < k:
        istate[I_ANY] = 1
        if mx > fstate[F_MAX]:
            fstate[F_MAX] = mx
        if mn < fstate[F_MIN]:
            fstate[F_MIN] = mn
    istate[I_NAN] += nan
    istate[I_PINF] += pinf
    istate[I_NINF] += ninf
    istate[I_ZERO] += zeros
    istate[I_POS] += positives
    fstate[F_ABS] += abs_total
    if full:
        mean = total / k
        m2 = np.nan
        if nan == 0 and pinf == 0 and ninf == 0 and np.isfinite(mean):
            m2 = 0.0
            for i in range(k):
                d = np.float64(xb[i]) - mean
                m2 += d * d
        _merge_moments(fstate, istate[I_N], k, total, mean, m2)


@njit(cache=True, nogil=True)
def _merge_moments(fstate, n_before, k, block_sum, block_mean, block_m2):
    """Chan et al.: merge a block's (count, mean, M2) into the running ones (what Welford's loop computes)."""
    fstate[F_SUM] += block_sum
    if n_before == 0:
        fstate[F_MEAN] = block_mean
        fstate[F_M2] = block_m2
        return
    n = n_before + k
    delta = block_mean - fstate[F_MEAN]
    fstate[F_MEAN] += delta * k / n
    fstate[F_M2] += block_m2 + delta * delta * n_before * k / n


# --- previous value, ranges: float64 / IEEE compares ---------------------------------------------------------------

@njit(fastmath=_FAST, cache=True, nogil=True, boundscheck=False)
def _block_previous(xb, pb):
    """(sum |x - p|, sum |p|) of a block in x's dtype lanes (float32 lanes for float32, like the other sums);
    a non-finite result (NaN/Inf present, or a float32 overflow) is redone by ``_block_previous64``."""
    diff = xb.dtype.type(0)
    prev_abs = xb.dtype.type(0)
    for i in range(xb.shape[0]):
        p = pb[i]
        diff += abs(xb[i] - p)
        prev_abs += abs(p)
    return diff, prev_abs


@njit(fastmath=_REASSOC, cache=True, nogil=True, boundscheck=False)
def _block_previous64(xb, pb):
    diff = 0.0
    prev_abs = 0.0
    for i in range(xb.shape[0]):
        p = np.float64(pb[i])
        diff += abs(np.float64(xb[i]) - p)
        prev_abs += abs(p)
    return diff, prev_abs


@njit(cache=True, nogil=True, boundscheck=False)
def _block_close(xb, pb, rtol, atol):
    close = np.int32(0)
    for i in range(xb.shape[0]):
        p = np.float64(pb[i])
        close = _add_if(close, abs(np.float64(xb[i]) - p) <= abs(p) * rtol + atol)
    return close


@njit(cache=True, nogil=True, boundscheck=False)
def _block_in_range(xb, lo, hi):
    inside = np.int32(0)
    for i in range(xb.shape[0]):
        v = xb[i]
        inside = _add_if(inside, (v >= lo) & (v <= hi))
    return inside


@njit(cache=True, nogil=True, boundscheck=False)
def _block_copy(dst, src):
    """A plain loop (vectorised stores): numba's slice assignment first checks whether the two overlap."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


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
    ``keep_into``: when it has x's size, each block of x is copied into it after the block was read (it may be
    ``prev`` itself: a kept previous value then costs no extra read of x); pass an empty array otherwise.
    """
    n = x.shape[0]
    n_ranges = bounds.shape[0]
    full = mode == MODE_FULL
    keep = keep_into.shape[0] == n
    for lo in range(0, n, BLOCK):
        hi = min(lo + BLOCK, n)
        k = hi - lo
        xb = x[lo:hi]
        bb = bits[lo:hi]
        careful = False
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
            pb = prev[lo:hi]
            diff, prev_abs = _block_previous(xb, pb)
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
        if keep:
            _block_copy(keep_into[lo:hi], xb)
        istate[I_N] += k


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


# --- the weight screen: many float32 arrays, copied and screened in one call ----------------------------------------

def _pointer_at(element):
    """An intrinsic making an ``element`` pointer from an integer address (an array's ``__array_interface__`` data
    address), for ``carray``."""

    @intrinsic
    def fn(typingctx, address):
        if address != types.int64:
            return None

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        return types.CPointer(element)(types.int64), codegen

    return fn


_float32_at = _pointer_at(types.float32)
_int32_at = _pointer_at(types.int32)      # the bits of float32 data


#: rows of ``screen_weights``' output, one column per array
SCREEN_SPECIALS, SCREEN_MOVED, SCREEN_CHANGE, SCREEN_PREVIOUS_ABS = 0, 1, 2, 3
SCREEN_UNCHANGED, SCREEN_TOO_LARGE, SCREEN_NOT_FINITE = 4, 5, 6
SCREEN_ROWS = 7
SCREEN_SIGNATURE = types.int64(_array(types.int64, 2, readonly=True), _array(types.float32),
                               _array(types.float32, readonly=True), types.float64, types.float64, types.float64,
                               types.float64, types.boolean, _array(types.float64, 2))


@njit([SCREEN_SIGNATURE], cache=True, nogil=True, boundscheck=False)
def screen_weights(sources, current, previous, rtol, atol, ratio_gt, epsilon, finite, out):
    """``WeightMonitor``'s screen in one call; returns how many arrays are flagged (0 on a healthy step).

    Array ``j`` has ``sources[1, j]`` float32 elements at address ``sources[0, j]`` (the caller keeps the arrays
    alive); it is copied into ``current`` after the arrays before it and, while each block is in L1, measured
    against ``previous`` (same layout). Column ``j`` of ``out`` gets: the NaN/Inf count; moved (1.0 when some
    element fails |x - p| <= |p| * rtol + atol in float64, NaN included; once one fails the rest need no look);
    with ``ratio_gt`` >= 0, sum |x - p| and sum |p| (summed as ``accumulate`` sums them); then the flags: could be
    unchanged (not moved), change too large (sum |x - p| > ratio_gt * (sum |p| + epsilon * n)), not finite (when
    ``finite``).
    """
    start = 0
    flagged = 0
    with_sums = ratio_gt >= 0.0
    for j in range(sources.shape[1]):
        n = sources[1, j]
        source = carray(_float32_at(sources[0, j]), (n,))
        into = current[start:start + n]
        before = previous[start:start + n]
        bits = into.view(np.int32)
        special = 0
        is_moved = False
        change = 0.0
        previous_abs = 0.0
        for lo in range(0, n, BLOCK):
            hi = min(lo + BLOCK, n)
            xb = into[lo:hi]
            pb = before[lo:hi]
            _block_copy(xb, source[lo:hi])
            special += _block_specials(bits[lo:hi])
            if not is_moved:
                is_moved = _block_close(xb, pb, rtol, atol) < hi - lo
            if with_sums:
                diff, prev_abs = _block_previous(xb, pb)
                if not (np.isfinite(diff) and np.isfinite(prev_abs)):
                    diff, prev_abs = _block_previous64(xb, pb)
                change += diff
                previous_abs += prev_abs
        too_large = with_sums and change > ratio_gt * (previous_abs + epsilon * n)
        not_finite = finite and special > 0
        out[SCREEN_SPECIALS, j] = special
        out[SCREEN_MOVED, j] = is_moved
        out[SCREEN_CHANGE, j] = change
        out[SCREEN_PREVIOUS_ABS, j] = previous_abs
        out[SCREEN_UNCHANGED, j] = not is_moved
        out[SCREEN_TOO_LARGE, j] = too_large
        out[SCREEN_NOT_FINITE, j] = not_finite
        if not is_moved or too_large or not_finite:
            flagged += 1
        start += n
    return flagged


# --- judging a prepared batch: which (tensor, condition) pairs may be reportable -----------------------------------

#: condition kinds, statistic codes and operators of ``mark_reportable``'s rule table (``judging.compiled_rules``)
JUDGE_ALL, JUDGE_NEVER, JUDGE_OVERFLOW, JUDGE_COMPARE = 0, 1, 2, 3
STAT_MAX, STAT_MIN, STAT_MEAN, STAT_SD, STAT_ABS_MEAN, STAT_ZERO_PERCENTAGE, STAT_MAX_MIN, STAT_UPDATE_RATIO, \
    STAT_RANGE = range(9)
OP_GT, OP_LT, OP_GE, OP_LE = range(4)
#: a comparison within this share of its limit marks the pair, whichever way it went: the exact evaluation decides
MARK_SLACK = 1e-9


@njit(cache=True, nogil=True)
def _statistic(code, column, fstate, istate, counts, n, n_ranges, paired, epsilon):
    """One statistic of a tensor with elements and no NaN/Inf, by ``stats._finish``'s formulas; NaN: not
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
            bits = carray(_int32_at(table[j, FILL_VALUE]), (n,))
            prev = carray(_float32_at(table[j, FILL_PREVIOUS]), (n,)) if paired else x[:0]
            keep = carray(_float32_at(table[j, FILL_KEEP]), (n,)) if table[j, FILL_KEEP] != 0 else x[:0]
            accumulate(x, bits, prev, mode, paired, bounds32, tolerances, fstate[j], istate[j], counts[j], keep)
            continue
        work = scratch[:n]
        for i in range(n):
            work[i] = x[i]
        prev64 = previous_scratch[:n] if paired else scratch[:0]
        if paired:
            prev = carray(_float32_at(table[j, FILL_PREVIOUS]), (n,))
            for i in range(n):
                prev64[i] = prev[i]
        accumulate(work, work.view(np.int64), prev64, mode, paired, bounds64, tolerances, fstate[j], istate[j],
                   counts[j], scratch[:0])
        if table[j, FILL_KEEP] != 0:
            keep = carray(_float32_at(table[j, FILL_KEEP]), (n,))
            for i in range(n):
                keep[i] = x[i]
