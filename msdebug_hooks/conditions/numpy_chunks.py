"""numpy's route over one tensor: chunks that stay in cache, every statistic of the request taken from each chunk.

Why chunks: a statistic is memory-bound, and one numpy call per statistic over the whole tensor would read it from
RAM a dozen times. Here a chunk of ``CHUNK_BYTES`` is read from RAM once and every needed statistic takes it from
the cache (about ten numpy calls per chunk). This is the engine where numba is missing (``statistics_engine``);
the compiled pass gives the same totals (``tensor_statistics`` says how exactly).
"""
from __future__ import annotations

import math
import threading
from typing import Any, NamedTuple

import numpy as np

from msdebug_hooks.conditions._blas import single_threaded_blas
from msdebug_hooks.conditions._dtypes import f32_at_least, f32_at_most, work_chunks, work_dtype
from msdebug_hooks.conditions.tensor_statistics import (
    ABS_MEAN, MAX, MEAN, MIN, NEGATIVE_COUNT, POSITIVE_COUNT, SD, ZERO_COUNT)
from msdebug_hooks.conditions.totals import StatisticsRequest, Totals

_max_reduce = np.maximum.reduce  # the ufunc reductions themselves: np.max adds a Python wrapper per call
_min_reduce = np.minimum.reduce
_count = np.count_nonzero

_scratch = threading.local()


def chunk_totals(flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                 request: StatisticsRequest, chunk: int) -> Totals:
    """The totals of one flat tensor of any kind (``_dtypes.flat_kind``), ``prev_flat`` its paired previous value
    (or None), read ``chunk`` elements at a time."""
    n = flat.shape[0]
    work = work_dtype(kind)
    accumulator = ChunkAccumulator(work, chunk if n >= chunk else max(n, 1), request, prev_flat is not None)
    if n:
        prev_chunks = work_chunks(prev_flat, prev_kind, chunk, work_dtype(prev_kind)) if prev_flat is not None \
            else None
        with np.errstate(all="ignore"), single_threaded_blas():  # NaN/Inf are data here, not accidents
            for c in work_chunks(flat, kind, chunk, work):
                accumulator.add_chunk(c, next(prev_chunks) if prev_chunks is not None else None)
    return accumulator.totals


class _Scratch(NamedTuple):
    """Per-chunk work arrays of one size: ones and zeros (BLAS sums), a float buffer and two masks."""

    ones: np.ndarray
    zeros: np.ndarray
    buf: np.ndarray
    mask: np.ndarray
    mask2: np.ndarray

    def head(self, k: int) -> "_Scratch":
        return _Scratch(self.ones[:k], self.zeros[:k], self.buf[:k], self.mask[:k], self.mask2[:k])


def _buffers(dtype: np.dtype, chunk: int) -> _Scratch:
    """Scratch arrays for a chunk size, reused by the calling thread: allocating and filling them per call would
    cost more than checking a small network's tensor."""
    cache = getattr(_scratch, "buffers", None)
    if cache is None:
        cache = _scratch.buffers = {}
    size = 1 << max(10, (chunk - 1).bit_length())  # a power of two: a handful of sizes serve every tensor
    key = (dtype.str, size)
    found = cache.get(key)
    if found is None:
        found = _Scratch(np.ones(size, dtype), np.zeros(size, dtype), np.empty(size, dtype),
                         np.empty(size, np.bool_), np.empty(size, np.bool_))
        cache[key] = found
    return found.head(chunk)


class ChunkAccumulator:
    """Running ``Totals`` over chunks; ``add_chunk`` takes one float32/float64 chunk that is hot in cache."""

    def __init__(self, dtype: np.dtype, chunk: int, request: StatisticsRequest, with_previous: bool) -> None:
        needed = request.needed
        self.dtype = dtype
        self.chunk = chunk
        self.need_extremes = MAX in needed or MIN in needed
        self.need_mean = MEAN in needed or SD in needed
        self.need_sd = SD in needed
        self.need_abs = ABS_MEAN in needed
        self.need_sign = POSITIVE_COUNT in needed or NEGATIVE_COUNT in needed
        self.need_zero = ZERO_COUNT in needed or self.need_sign
        self.tolerances = request.tolerances
        self.scratch = _buffers(dtype, chunk)
        if with_previous:
            self.cur64 = np.empty(chunk, np.float64)
            self.prev64 = np.empty(chunk, np.float64)
            self.tmp64 = np.empty(chunk, np.float64)
        if dtype == np.float32:
            with np.errstate(over="ignore"):
                self.range_bounds = [(f32_at_least(a), f32_at_most(b)) for a, b in request.ranges]
        else:
            self.range_bounds = [(np.float64(a), np.float64(b)) for a, b in request.ranges]
        self.totals = Totals.empty(len(request.ranges), len(request.tolerances))
        self.shift: Any = None  # set once a chunk shows a mean that is large against its spread

    def add_chunk(self, c: np.ndarray, p: np.ndarray | None) -> None:
        """Add one chunk (and its previous value's chunk) in the order the steps depend on each other."""
        k = c.shape[0]
        scratch = self.scratch if k == self.chunk else self.scratch.head(k)
        mx, mn, finite, nan = self._specials_and_extremes(c, scratch)
        if self.need_zero and mx is not None:    # (no max: every element is NaN)
            self._signs(c, mx, mn, nan, scratch.mask)
        s1 = self._moments(c, finite, scratch) if self.need_mean else None
        if self.need_abs:
            self._abs_sum(c, mx, mn, s1, scratch)
        if self.range_bounds:
            self._ranges(c, scratch.mask, scratch.mask2)
        if p is not None:
            self._against_previous(c, p, scratch.mask)
        self.totals.n += k

    def _specials_and_extremes(self, c: np.ndarray, scratch: _Scratch) -> tuple[float | None, float | None, bool, int]:
        """NaN/Inf counts; returns (non-NaN max, min (None: not computed, or every element NaN), whether the chunk
        is free of NaN/Inf, its NaN count). A finite max and min (np.max propagates NaN) mean there is no NaN/Inf;
        without them one BLAS pass of x*0 is NaN exactly when a NaN or Inf is present."""
        t = self.totals
        mx = mn = None
        if self.need_extremes or self.need_zero or self.need_abs:
            mx = float(_max_reduce(c))
            mn = float(_min_reduce(c))
            finite = math.isfinite(mx) and math.isfinite(mn)
        else:
            finite = math.isfinite(float(np.dot(c, scratch.zeros)))
        nan = 0
        if not finite:
            mask = scratch.mask
            nan = int(_count(np.isnan(c, out=mask)))
            t.nan += nan
            t.pinf += int(_count(np.equal(c, np.inf, out=mask)))
            t.ninf += int(_count(np.equal(c, -np.inf, out=mask)))
            if nan and mx is not None:
                if nan == c.shape[0]:
                    mx = mn = None
                else:  # fmax/fmin skip NaN like std::max(acc, x) did
                    mx = float(np.fmax.reduce(c))
                    mn = float(np.fmin.reduce(c))
        if mx is not None:
            t.any_number = True
            if mx > t.mx:
                t.mx = mx
            if mn < t.mn:
                t.mn = mn
        return mx, mn, finite, nan

    def _signs(self, c: np.ndarray, mx: float, mn: float, nan: int, mask: np.ndarray) -> None:
        """Zero and positive counts; skipped where the max and min already decide them."""
        k = c.shape[0]
        zero = 0 if mn > 0 or mx < 0 else int(_count(np.equal(c, 0, out=mask)))
        if not self.need_sign:
            pos = 0
        elif mn > 0:
            pos = k - nan
        elif mx <= 0:
            pos = 0
        elif mn >= 0:
            pos = k - nan - zero
        else:
            pos = int(_count(np.greater(c, 0, out=mask)))
        self.totals.zero += zero
        self.totals.pos += pos

    def _moments(self, c: np.ndarray, finite: bool, scratch: _Scratch) -> float:
        """Sum, mean and M2 (BLAS dot: one vectorised pass each), merged into the running ones; returns the sum."""
        k = c.shape[0]
        if self.shift is not None and finite:
            cmean, cm2 = self._shifted_moments(c, self.shift, scratch)
            s1 = cmean * k
        else:
            s1 = float(np.dot(c, scratch.ones))
            cmean = s1 / k
            cm2 = 0.0
            if self.need_sd:
                s2 = float(np.dot(c, c))
                cm2 = s2 - s1 * cmean
                if math.isfinite(cm2) and s2 > 0 and cm2 < 0.9 * s2:
                    # the mean is not small against the spread: sum x - mean instead of x, here and in the
                    # following chunks, so that sum(x^2) - n*mean^2 does not cancel float32 digits away
                    self.shift = self.dtype.type(cmean)
                    cmean, cm2 = self._shifted_moments(c, self.shift, scratch)
        self.totals.sum += s1
        self._combine(k, cmean, cm2)
        return s1

    @staticmethod
    def _shifted_moments(c: np.ndarray, shift: Any, scratch: _Scratch) -> tuple[float, float]:
        """(mean, M2) of a chunk summed around ``shift``: one subtract and two BLAS passes."""
        d = np.subtract(c, shift, out=scratch.buf)
        t1 = float(np.dot(d, scratch.ones))
        k = c.shape[0]
        return float(shift) + t1 / k, max(float(np.dot(d, d)) - t1 * t1 / k, 0.0)

    def _combine(self, k: int, cmean: float, cm2: float) -> None:
        """Chan et al.: merge a chunk's (count, mean, M2) into the running ones (what Welford computes)."""
        t = self.totals
        n_a = t.n
        n = n_a + k
        delta = cmean - t.mean
        if n_a == 0:
            t.mean, t.m2 = cmean, cm2
            return
        t.mean += delta * k / n
        t.m2 += cm2 + delta * delta * n_a * k / n

    def _abs_sum(self, c: np.ndarray, mx: float | None, mn: float | None, s1: float | None,
                 scratch: _Scratch) -> None:
        """Sum of |x|: the plain sum where the signs are known."""
        if mn is not None and mn >= 0:
            a = s1 if s1 is not None else float(np.dot(c, scratch.ones))
        elif mx is not None and mx <= 0:
            a = -(s1 if s1 is not None else float(np.dot(c, scratch.ones)))
        else:
            a = float(np.dot(np.abs(c, out=scratch.buf), scratch.ones))
        self.totals.abs_sum += a

    def _ranges(self, c: np.ndarray, mask: np.ndarray, mask2: np.ndarray) -> None:
        in_range = self.totals.in_range
        for i, (lo, hi) in enumerate(self.range_bounds):
            m1 = np.greater_equal(c, lo, out=mask)
            m2 = np.less_equal(c, hi, out=mask2)
            in_range[i] += int(_count(np.logical_and(m1, m2, out=m1)))

    def _against_previous(self, c: np.ndarray, p: np.ndarray, mask: np.ndarray) -> None:
        """sum |x - p|, sum |p| and allclose, in float64 as the C++ did."""
        t = self.totals
        k = c.shape[0]
        x64 = self.cur64[:k]
        p64 = self.prev64[:k]
        np.copyto(x64, c)
        np.copyto(p64, p, casting="unsafe")
        d = np.subtract(x64, p64, out=self.tmp64[:k])
        np.abs(d, out=d)
        t.diff_sum += float(np.add.reduce(d))
        ap = np.abs(p64, out=p64)
        t.prev_abs_sum += float(np.add.reduce(ap))
        for i, (rtol, atol) in enumerate(self.tolerances):
            if t.close[i]:
                bound = np.multiply(ap, rtol, out=x64)
                np.add(bound, atol, out=bound)
                t.close[i] = bool(np.less_equal(d, bound, out=mask).all())
