"""The block kernels of the compiled statistics pass (numba): what ``_kernels.accumulate`` does with one block.

Why apart from the pass: these are the pieces the pass and the one-call kernels (``_step_kernels``) share: the
numba intrinsics that make LLVM vectorise (fast-math max/min, 32-bit counts, NaN/Inf found on the float's bits,
streaming stores), the block summaries, the careful float64 path for a block holding NaN/Inf, and the
previous-value, range and copy loops. ``_kernels`` says how they fit together.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from msdebug_hooks.conditions.state import (
    F_ABS, F_M2, F_MAX, F_MEAN, F_MIN, F_SUM, I_ANY, I_N, I_NAN, I_NINF, I_PINF, I_POS, I_ZERO)

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


@intrinsic
def _store_streaming(typingctx, dst, index, src):
    """dst[index:index + 16 bytes] = src[the same]: one 16-byte non-temporal store (``dst`` at ``index`` must be
    16-byte aligned). It bypasses the caches: no read of the destination line first (a cached store reads it),
    and the previous-value copy does not evict what the training step will use next."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype
            and isinstance(dst.dtype, types.Float) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        destination = context.make_array(signature.args[0])(context, builder, args[0])
        source = context.make_array(signature.args[2])(context, builder, args[2])
        element = context.get_data_type(signature.args[0].dtype)
        vector = ir.VectorType(element, 16 // context.get_abi_sizeof(element))
        load_from = builder.bitcast(builder.gep(source.data, [args[1]]), vector.as_pointer())
        store_to = builder.bitcast(builder.gep(destination.data, [args[1]]), vector.as_pointer())
        value = builder.load(load_from, align=context.get_abi_sizeof(element))
        store = builder.store(value, store_to, align=16)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(dst, index, src), codegen


@intrinsic
def _store_fence(typingctx):
    """A full fence: streaming stores become visible to other threads before anything after it."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


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
def _block_previous(xb, bb, pb):
    """(max, min, NaN/Inf count, sum |x - p|, sum |p|) of a block: the extremes summary and the previous-value sums
    in one loop, so that x and p stream from memory together (a check of weights against their previous values is
    bound by memory traffic). The sums are in x's dtype lanes (float32 lanes for float32, like the other sums); a
    non-finite result (NaN/Inf present, or a float32 overflow) is redone by ``_block_previous64``. Every mode takes
    the sums from this loop, so the update ratio does not depend on what else a pass needs."""
    mx = xb[0]
    mn = xb[0]
    special = np.int32(0)
    diff = xb.dtype.type(0)
    prev_abs = xb.dtype.type(0)
    for i in range(xb.shape[0]):
        v = xb[i]
        p = pb[i]
        special = _add_if_special(special, bb[i])
        mx = _fast_max(mx, v)
        mn = _fast_min(mn, v)
        diff += abs(v - p)
        prev_abs += abs(p)
    return mx, mn, special, diff, prev_abs


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


@njit(cache=True, nogil=True, boundscheck=False)
def _stream_copy(dst, src):
    """``_block_copy`` with streaming stores: a previous-value copy is read again only at the next step, long after
    it left the caches, so writing it around them saves the read of each destination line a cached store makes
    (a quarter of a keeping check's memory traffic). Cached stores up to 16-byte alignment and for the tail."""
    n = src.shape[0]
    lanes = 16 // src.itemsize
    i = 0
    while i < n and (dst.ctypes.data + i * src.itemsize) % 16 != 0:
        dst[i] = src[i]
        i += 1
    while i + lanes <= n:
        _store_streaming(dst, i, src)
        i += lanes
    while i < n:
        dst[i] = src[i]
        i += 1
