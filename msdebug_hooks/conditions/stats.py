"""Tensor statistics for watchpoints, computed the way MindSpore's debugger did, in one pass over memory.

Why one pass: a statistic is memory-bound. Calling numpy once per statistic reads the whole tensor from RAM a dozen
times; here every needed statistic is taken from one read. Two engines do it (``_engine`` picks): compiled
kernels (``_kernels``, numba: blocks of 4096 elements in L1, 0.6-0.8x the speed of one ``np.max`` pass for the
full set) and, where numba is missing, numpy over chunks of about 256 KB that stay in L2 (about 10 numpy calls
per chunk, 0.1-0.25x of ``np.max``). Only the statistics the caller names are computed.

Semantics (MindSpore ``tensor_summary.cc`` ``SummarizeTensor``; every element cast to ``double``):

* ``max`` / ``min``: over every non-NaN element, ±Inf included. The C++ folded ``std::max(max, x)``, which keeps the
  accumulator when ``x`` is NaN, so NaN never became the max. With no non-NaN element we report NaN (the C++ kept its
  ±DBL_MAX start values, which never surfaced: a NaN in the tensor stops every comparison).
* ``mean`` / ``sd`` / ``abs_mean``: over all elements, so any NaN makes them NaN and ±Inf makes them ±Inf or NaN, as
  the C++ Welford loop did. ``sd`` is the sample standard deviation (divisor n-1; 0 for one element).
* ``update_ratio`` = mean(|x-p|) / (mean(|p|) + 1e-9) and ``allclose`` = AND of |x-p| <= atol + rtol*|p|, in float64,
  with ``p`` the previous value at the same flat (C-order) index. No previous value: ``has_previous`` is False and
  both are None. Element counts differ: MindSpore used p = NaN, so ``update_ratio`` is NaN and ``allclose`` False.
* ``range_percentage`` = 100 * #{start <= x <= end} / n, bounds compared in double precision.
* Empty tensors: counts 0, every float statistic NaN (MindSpore skipped tensors without elements).

Dtypes: bool, int8-64, uint8-64, float16/32/64 (as MindSpore's ``GetSummaryPtr``) and bfloat16 (an ``ml_dtypes``
array, or raw uint16 words with ``bfloat16=True``), read as float32. Anything else raises ``UnsupportedDtypeError``.

Accuracy: tensors of up to 32K elements are summed in float64, like the C++ loop. Larger float32 tensors are summed
in float32 per block or chunk and combined in float64 across them (about 1e-7 relative), each summed around a mean
so that ``sd`` does not cancel. Max, min, every count, range shares and allclose are exact in both engines.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Collection, Iterable

import numpy as np

from msdebug_hooks.conditions import _engine
from msdebug_hooks.conditions._blas import single_threaded_blas
from msdebug_hooks.conditions._dtypes import (  # noqa: F401 (public names of this module since the start)
    SUPPORTED_DTYPES_TEXT, UnsupportedDtypeError, bfloat16_to_float32, dtype_text)
from msdebug_hooks.conditions._dtypes import f32_at_least as _f32_at_least
from msdebug_hooks.conditions._dtypes import f32_at_most as _f32_at_most
from msdebug_hooks.conditions._dtypes import flat_kind as _flat
from msdebug_hooks.conditions._dtypes import work_chunks as _chunks
from msdebug_hooks.conditions._dtypes import work_dtype as _work_dtype

# --- names of the statistics a caller can ask for ------------------------------------------------------------------
MAX, MIN, MEAN, SD, ABS_MEAN = "max", "min", "mean", "sd", "abs_mean"
ZERO_COUNT, POSITIVE_COUNT, NEGATIVE_COUNT = "zero_count", "positive_count", "negative_count"
UPDATE_RATIO = "update_ratio"
#: nan / +inf / -inf counts are always computed: every watchpoint needs them for its error code.
BASIC_STATISTICS = frozenset({MAX, MIN, MEAN, SD, ABS_MEAN, ZERO_COUNT, POSITIVE_COUNT, NEGATIVE_COUNT})
ALL_STATISTICS = BASIC_STATISTICS | {UPDATE_RATIO}

#: the C++ constant in mean(|x-p|) / (mean(|p|) + epsilon); MindSpore never read the ``epsilon`` parameter.
UPDATE_RATIO_EPSILON = 1e-9

CHUNK_BYTES = 256 * 1024  # half of this machine's per-core L2; every pass over a chunk after the first hits cache
SMALL_TENSOR = 1 << 15     # up to this many elements float32 data is summed in float64 (it costs microseconds)

@dataclass(frozen=True)
class TensorStatistics:
    """Statistics of one tensor. A field is None when it was not asked for (or, for previous-value ones, when there
    was no previous value)."""

    count: int
    dtype: str
    nan_count: int
    pos_inf_count: int
    neg_inf_count: int
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    sd: float | None = None
    abs_mean: float | None = None
    zero_count: int | None = None
    positive_count: int | None = None
    negative_count: int | None = None
    has_previous: bool = False
    update_ratio: float | None = None
    #: (start, end) -> percentage of elements in [start, end]
    range_percentages: dict[tuple[float, float], float] = field(default_factory=dict)
    #: (rtol, atol) -> allclose(current, previous)
    allclose: dict[tuple[float, float], bool] = field(default_factory=dict)

    @property
    def inf_count(self) -> int:
        return self.pos_inf_count + self.neg_inf_count

    @property
    def zero_percentage(self) -> float | None:
        """100 * zeros / n; 0 for an empty tensor, as the C++ ``GetZeroValPercent``."""
        if self.zero_count is None:
            return None
        return 100.0 * self.zero_count / self.count if self.count else 0.0

    @property
    def max_min(self) -> float | None:
        if self.max is None or self.min is None:
            return None
        return self.max - self.min

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON or a table."""
        out = {k: getattr(self, k) for k in ("count", "dtype", "nan_count", "pos_inf_count", "neg_inf_count", "max",
                                             "min", "mean", "sd", "abs_mean", "zero_count", "positive_count",
                                             "negative_count", "has_previous", "update_ratio")}
        out["zero_percentage"] = self.zero_percentage
        return out


# --- the chunk kernel -------------------------------------------------------------------------------------------------

_max_reduce = np.maximum.reduce  # the ufunc reductions themselves: np.max adds a Python wrapper per call
_min_reduce = np.minimum.reduce
_count = np.count_nonzero


_scratch = threading.local()


def _buffers(dtype: np.dtype, chunk: int) -> tuple[np.ndarray, ...]:
    """(ones, zeros, scratch, mask, mask2) for a chunk size, reused by the calling thread: allocating and filling
    1 MB per call would cost more than checking a LeNet-sized tensor."""
    cache = getattr(_scratch, "buffers", None)
    if cache is None:
        cache = _scratch.buffers = {}
    size = 1 << max(10, (chunk - 1).bit_length())  # a power of two: a handful of sizes serve every tensor
    key = (dtype.str, size)
    found = cache.get(key)
    if found is None:
        found = (np.ones(size, dtype), np.zeros(size, dtype), np.empty(size, dtype), np.empty(size, np.bool_),
                 np.empty(size, np.bool_))
        cache[key] = found
    return tuple(a[:chunk] for a in found)


class _Accumulator:
    """Running totals over chunks; ``add_chunk`` takes one float32/float64 chunk that is hot in cache."""

    def __init__(self, dtype: np.dtype, chunk: int, needed: frozenset[str],
                 ranges: tuple[tuple[float, float], ...], tolerances: tuple[tuple[float, float], ...],
                 with_previous: bool) -> None:
        self.dtype = dtype
        self.chunk = chunk
        self.need_max = MAX in needed
        self.need_min = MIN in needed
        self.need_mean = MEAN in needed or SD in needed
        self.need_sd = SD in needed
        self.need_abs = ABS_MEAN in needed
        self.need_sign = POSITIVE_COUNT in needed or NEGATIVE_COUNT in needed
        self.need_zero = ZERO_COUNT in needed or self.need_sign
        self.tolerances = tolerances
        self.ones, self.zeros, self.buf, self.mask, self.mask2 = _buffers(dtype, chunk)
        if with_previous:
            self.cur64 = np.empty(chunk, np.float64)
            self.prev64 = np.empty(chunk, np.float64)
            self.tmp64 = np.empty(chunk, np.float64)
        if dtype == np.float32:
            with np.errstate(over="ignore"):
                self.range_bounds = [(_f32_at_least(a), _f32_at_most(b)) for a, b in ranges]
        else:
            self.range_bounds = [(np.float64(a), np.float64(b)) for a, b in ranges]
        # totals
        self.n = 0
        self.nan = self.pinf = self.ninf = 0
        self.zero = self.pos = 0
        self.mx = -math.inf
        self.mn = math.inf
        self.any_number = False  # a non-NaN element was seen
        self.shift: Any = None  # set once a chunk shows a mean that is large against its spread
        self.sum = 0.0
        self.mean = 0.0
        self.m2 = 0.0
        self.abs_sum = 0.0
        self.diff_sum = 0.0
        self.prev_abs_sum = 0.0
        self.close = [True] * len(tolerances)
        self.in_range = [0] * len(ranges)

    def add_chunk(self, c: np.ndarray, p: np.ndarray | None) -> None:
        k = c.shape[0]
        dot = np.dot
        full = k == self.chunk
        ones = self.ones if full else self.ones[:k]
        buf = self.buf if full else self.buf[:k]
        mask = self.mask if full else self.mask[:k]
        mx = mn = None
        # 1. NaN/Inf detection: a finite max and min (np.max propagates NaN) mean there is none; without them one
        #    BLAS pass of x*0 is NaN exactly when a NaN or Inf is present.
        if self.need_max or self.need_min or self.need_zero or self.need_abs:
            mx = float(_max_reduce(c))
            mn = float(_min_reduce(c))
            finite = math.isfinite(mx) and math.isfinite(mn)
        else:
            finite = math.isfinite(float(dot(c, self.zeros if full else self.zeros[:k])))
        nan = 0
        if not finite:
            nan = int(_count(np.isnan(c, out=mask)))
            self.nan += nan
            self.pinf += int(_count(np.equal(c, np.inf, out=mask)))
            self.ninf += int(_count(np.equal(c, -np.inf, out=mask)))
            if nan and mx is not None:
                if nan == k:
                    mx = mn = None
                else:  # fmax/fmin skip NaN like std::max(acc, x) did
                    mx = float(np.fmax.reduce(c))
                    mn = float(np.fmin.reduce(c))
        if mx is not None:
            self.any_number = True
            if mx > self.mx:
                self.mx = mx
            if mn < self.mn:
                self.mn = mn
        # 2. zero / positive / negative counts; skipped when max and min already decide them
        if self.need_zero:
            if mx is None:  # all NaN
                zero = pos = 0
            else:
                if mn > 0 or mx < 0:
                    zero = 0
                else:
                    zero = int(_count(np.equal(c, 0, out=mask)))
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
            self.zero += zero
            self.pos += pos
        # 3. sums (BLAS dot: one vectorised pass each)
        s1 = None
        if self.need_mean:
            if self.shift is not None and finite:
                cmean, cm2 = self._shifted_moments(c, self.shift, ones, buf)
                s1 = cmean * k
            else:
                s1 = float(dot(c, ones))
                cmean = s1 / k
                cm2 = 0.0
                if self.need_sd:
                    s2 = float(dot(c, c))
                    cm2 = s2 - s1 * cmean
                    if math.isfinite(cm2) and s2 > 0 and cm2 < 0.9 * s2:
                        # the mean is not small against the spread: sum x - mean instead of x, here and in the
                        # following chunks, so that sum(x^2) - n*mean^2 does not cancel float32 digits away
                        self.shift = self.dtype.type(cmean)
                        cmean, cm2 = self._shifted_moments(c, self.shift, ones, buf)
            self.sum += s1
            self._combine(k, cmean, cm2)
        if self.need_abs:
            if mn is not None and mn >= 0:
                a = s1 if s1 is not None else float(dot(c, ones))
            elif mx is not None and mx <= 0:
                a = -(s1 if s1 is not None else float(dot(c, ones)))
            else:
                a = float(dot(np.abs(c, out=buf), ones))
            self.abs_sum += a
        # 4. range counts
        for i, (lo, hi) in enumerate(self.range_bounds):
            m1 = np.greater_equal(c, lo, out=mask)
            m2 = np.less_equal(c, hi, out=self.mask2[:k])
            self.in_range[i] += int(_count(np.logical_and(m1, m2, out=m1)))
        # 5. against the previous value, in float64 as the C++ did
        if p is not None:
            x64 = self.cur64[:k]
            p64 = self.prev64[:k]
            np.copyto(x64, c)
            np.copyto(p64, p, casting="unsafe")
            d = np.subtract(x64, p64, out=self.tmp64[:k])
            np.abs(d, out=d)
            self.diff_sum += float(np.add.reduce(d))
            ap = np.abs(p64, out=p64)
            self.prev_abs_sum += float(np.add.reduce(ap))
            for i, (rtol, atol) in enumerate(self.tolerances):
                if self.close[i]:
                    bound = np.multiply(ap, rtol, out=x64)
                    np.add(bound, atol, out=bound)
                    self.close[i] = bool(np.less_equal(d, bound, out=mask).all())
        self.n += k

    @staticmethod
    def _shifted_moments(c: np.ndarray, shift: Any, ones: np.ndarray, buf: np.ndarray) -> tuple[float, float]:
        """(mean, M2) of a chunk summed around ``shift``: one subtract and two BLAS passes."""
        d = np.subtract(c, shift, out=buf)
        t1 = float(np.dot(d, ones))
        k = c.shape[0]
        return float(shift) + t1 / k, max(float(np.dot(d, d)) - t1 * t1 / k, 0.0)

    def _combine(self, k: int, cmean: float, cm2: float) -> None:
        """Chan et al.: merge a chunk's (count, mean, M2) into the running ones (what Welford computes)."""
        n_a = self.n
        n = n_a + k
        delta = cmean - self.mean
        if n_a == 0:
            self.mean, self.m2 = cmean, cm2
            return
        self.mean += delta * k / n
        self.m2 += cm2 + delta * delta * n_a * k / n


def chunk_elements(kind: str, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Elements per chunk of the work dtype of ``kind`` (converted dtypes are converted one chunk at a time)."""
    return max(1024, chunk_bytes // _work_dtype(kind).itemsize)


def checked_statistic_names(needed: Collection[str]) -> frozenset[str]:
    """``needed`` as a frozenset, or a ``ConfigError`` naming the unknown statistic names."""
    needed = frozenset(needed)
    unknown = needed - ALL_STATISTICS
    if unknown:
        from msdebug_hooks.errors import ConfigError
        raise ConfigError("needed", sorted(unknown), f"statistic names from {sorted(ALL_STATISTICS)}")
    return needed


def compute_statistics(value: Any, previous: Any = None, needed: Collection[str] = BASIC_STATISTICS, *,
                       ranges: Iterable[tuple[float, float]] = (),
                       allclose_tolerances: Iterable[tuple[float, float]] = (),
                       bfloat16: bool = False, chunk_bytes: int = CHUNK_BYTES,
                       keep_previous: bool = False) -> TensorStatistics:
    """Statistics of ``value`` (any array-like of a supported dtype) in one chunked pass.

    ``needed``: names from ``ALL_STATISTICS`` (nan/inf counts always come). ``ranges``: (start, end) pairs for
    range percentages (use ±inf for an open side). ``allclose_tolerances``: (rtol, atol) pairs, evaluated against
    ``previous``; ``UPDATE_RATIO`` in ``needed`` also uses ``previous``. ``bfloat16=True`` reads 2-byte words as
    bfloat16 (ml_dtypes bfloat16 arrays are recognised without it). ``keep_previous=True``: afterwards ``previous``
    (a writable C-contiguous array of value's dtype and size, see ``kept_view``) holds ``value``, copied in the same
    pass where the compiled engine can, so keeping last step's values costs no extra read.

    >>> compute_statistics(np.array([1.0, -2.0, 0.0])).abs_mean
    1.0
    """
    needed = checked_statistic_names(needed)
    ranges = tuple((float(a), float(b)) for a, b in ranges)
    tolerances = tuple((float(r), float(a)) for r, a in allclose_tolerances)
    keep = kept_view(value, previous) if keep_previous and previous is not None else None
    totals, n, dtype_name, pair_previous = statistics_totals(value, previous, needed, ranges, tolerances,
                                                             bfloat16=bfloat16, chunk_bytes=chunk_bytes,
                                                             keep_into=keep)
    wants_previous = UPDATE_RATIO in needed or bool(tolerances)
    return _finish(totals, n, dtype_name, needed, ranges, tolerances, previous is not None, wants_previous,
                   pair_previous)


def statistics_totals(value: Any, previous: Any, needed: frozenset[str], ranges: tuple[tuple[float, float], ...],
                      tolerances: tuple[tuple[float, float], ...], *, bfloat16: bool = False,
                      chunk_bytes: int = CHUNK_BYTES,
                      keep_into: np.ndarray | None = None) -> tuple[Any, int, str, bool]:
    """(running totals as ``_finish`` reads them, element count, dtype text, whether ``previous`` was paired
    element by element) of one tensor: ``compute_statistics`` before its final formulas. Arguments already
    checked; ``keep_into`` (a ``kept_view``) receives ``value`` afterwards."""
    flat, kind = _flat(value, bfloat16=bfloat16)
    n = flat.shape[0]
    dtype_name = dtype_text(value, kind)
    value_flat = flat  # before any conversion: what ``keep`` receives
    prev_flat = prev_kind = None
    has_previous = previous is not None
    if has_previous:
        prev_flat, prev_kind = _flat(previous, bfloat16=bfloat16)
    wants_previous = UPDATE_RATIO in needed or bool(tolerances)
    pair_previous = has_previous and wants_previous and prev_flat.shape[0] == n
    if n <= SMALL_TENSOR and kind in ("f4", "conv4", "bf16"):
        if kind == "bf16":
            flat = bfloat16_to_float32(flat)
        kind = "conv8"  # small tensors: float64 sums, agreeing with the C++ double loop to rounding
    work = _work_dtype(kind)
    chunk = chunk_elements(kind, chunk_bytes)
    compiled = _engine.kernels() if n else None
    if compiled is not None:
        totals, kept = _engine.compiled_totals(compiled, flat, kind, prev_flat if pair_previous else None,
                                               prev_kind, needed, ranges, tolerances, chunk, keep_into)
    else:
        totals = _Accumulator(work, chunk if n >= chunk else max(n, 1), needed, ranges, tolerances, pair_previous)
        kept = False
        if n:
            prev_chunks = _chunks(prev_flat, prev_kind, chunk, _work_dtype(prev_kind)) if pair_previous else None
            with np.errstate(all="ignore"), single_threaded_blas():  # NaN/Inf are data here, not accidents
                for c in _chunks(flat, kind, chunk, work):
                    totals.add_chunk(c, next(prev_chunks) if prev_chunks is not None else None)
    if keep_into is not None and not kept:
        np.copyto(keep_into, value_flat.view(keep_into.dtype))
    return totals, n, dtype_name, pair_previous


def kept_view(value: Any, previous: Any, field_name: str = "previous") -> np.ndarray:
    """``previous`` as a flat view to copy ``value`` into (``keep_previous=True``): it must be a writable,
    C-contiguous numpy array of value's dtype and element count; anything else is a ``ConfigError`` saying so."""
    arr = np.asarray(value)
    fits = (isinstance(previous, np.ndarray) and previous.flags.writeable and previous.flags.c_contiguous
            and previous.dtype == arr.dtype and previous.size == arr.size)
    if not fits:
        from msdebug_hooks.errors import ConfigError
        got = (f"{'read-only ' if not previous.flags.writeable else ''}{previous.dtype} array of {previous.size}"
               if isinstance(previous, np.ndarray) else type(previous).__name__)
        raise ConfigError(field_name, got, f"with keep_previous=True, a writable C-contiguous {arr.dtype} array of "
                                           f"{arr.size} elements to copy the value into")
    return previous.reshape(-1)


def _finish(acc: Any, n: int, dtype_name: str, needed: frozenset[str], ranges, tolerances,
            has_previous: bool, wants_previous: bool, paired: bool) -> TensorStatistics:
    nan = math.nan
    has_numbers = n > 0 and acc.any_number
    values: dict[str, Any] = {}
    if MAX in needed:
        values["max"] = acc.mx if has_numbers else nan
    if MIN in needed:
        values["min"] = acc.mn if has_numbers else nan
    if MEAN in needed:
        if not n:
            values["mean"] = nan
        else:  # with ±Inf/NaN the chunk merge would turn inf into NaN: report sum / n, as numpy does
            values["mean"] = acc.mean if math.isfinite(acc.mean) and math.isfinite(acc.sum) else acc.sum / n
    if SD in needed:
        if not n:
            values["sd"] = nan
        elif n == 1:
            values["sd"] = 0.0  # the C++ returned variance 0 below two elements, whatever the element
        elif not math.isfinite(acc.m2) or not math.isfinite(acc.mean):
            values["sd"] = nan  # an Inf or NaN element: the C++ Welford m2 became NaN
        else:
            values["sd"] = math.sqrt(acc.m2 / (n - 1))
    if ABS_MEAN in needed:
        values["abs_mean"] = acc.abs_sum / n if n else nan
    if ZERO_COUNT in needed:
        values["zero_count"] = acc.zero
    if POSITIVE_COUNT in needed:
        values["positive_count"] = acc.pos
    if NEGATIVE_COUNT in needed:
        values["negative_count"] = n - acc.nan - acc.zero - acc.pos
    if has_previous and wants_previous:
        if UPDATE_RATIO in needed:
            if paired and n:
                values["update_ratio"] = (acc.diff_sum / n) / (acc.prev_abs_sum / n + UPDATE_RATIO_EPSILON)
            elif paired:
                values["update_ratio"] = 0.0 / UPDATE_RATIO_EPSILON  # empty: 0 / (0 + eps)
            else:
                values["update_ratio"] = nan  # element counts differ: p was NaN everywhere
        allclose = {tol: (acc.close[i] if paired else n == 0) for i, tol in enumerate(tolerances)}
    else:
        allclose = {}
    range_pct = {rng: (100.0 * acc.in_range[i] / n if n else 0.0) for i, rng in enumerate(ranges)}
    values.update(count=n, dtype=dtype_name, nan_count=acc.nan, pos_inf_count=acc.pinf, neg_inf_count=acc.ninf,
                  has_previous=has_previous, range_percentages=range_pct, allclose=allclose)
    return _new_statistics(values)


_UNSET_FIELDS = {f.name: None for f in fields(TensorStatistics)}
_UNSET_FIELDS["has_previous"] = False


def _new_statistics(values: dict[str, Any]) -> TensorStatistics:
    """``TensorStatistics(**values)`` for values that ``_finish`` already checked, without the frozen dataclass's
    generated ``__init__`` (one ``object.__setattr__`` per field: 7 us per tensor, a step has hundreds). The
    instance is the same: same fields, equality, repr, hash, and still frozen."""
    stats = object.__new__(TensorStatistics)
    stats.__dict__.update(_UNSET_FIELDS)
    stats.__dict__.update(values)
    return stats
