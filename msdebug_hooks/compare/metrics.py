"""How far apart are two tensors? The metrics of a precision comparison, judged by ``verdicts.py``'s rules.

``compare_arrays(actual, reference)`` compares the run under test (``actual``, "a") with the reference run
(``reference``, "b"); "relative" always means relative to the reference.

Definitions (as if every element were cast to float64 first; see "Precision" below):

* absolute error ``|a - b|``; ``max_abs_error`` and ``mean_abs_error`` over the positions where both are finite.
* relative error ``|a - b| / (|b| + eps)`` with ``eps = Tolerance.relative_epsilon`` (1e-12), so an element whose
  reference is 0 has a large relative error unless it is 0 too. ``max_rel_error`` is its maximum.
* ``share_within_0_1_percent`` / ``share_within_0_5_percent``: the share of all elements whose relative error is at
  most 0.001 / 0.005 (msprobe's "one / five thousandths" ratios).
* ``allclose_share``: the share of elements with ``|a - b| <= atol + rtol * |b|`` (numpy's ``allclose`` rule,
  TroubleShooter's check, with ``Tolerance.rtol`` / ``atol``).
* ``cosine``: ``a.b / (|a| |b|)`` over the positions where both are finite; 1.0 when both are all zero, 0.0 when
  only one is. ``euclidean_distance``: ``|a - b|`` (L2 norm) over the same positions.
* ``nan_inf_mismatch``: positions where one side is NaN or +-Inf and the other is not, or both are but of a
  different kind (NaN vs Inf, +Inf vs -Inf). The same NaN/Inf on both sides at one position agrees: it counts as
  within every tolerance and adds no error.

Comparable means the same shape, and the same dtype, or two floating dtypes of different width (float16,
bfloat16, float32, float64: fp32 against mixed precision) unless ``Tolerance.compare_across_float_dtypes`` is off.
Anything else, and anything that is not a numeric array, gives ``verdict="not comparable"`` with the reason; this
function never raises for its inputs.

Precision and speed: tensors are walked once in chunks of 64K elements, with work buffers reused across calls, so
memory use does not grow with the tensor (a memory-mapped GB file is never copied whole). Chunks of dtypes that
float32 holds exactly (float32, float16, bfloat16, bool, int8/16, uint8/16) are worked in float32, the others
(float64, int32/64, uint32/64) in float64; every sum and dot product is accumulated across chunks in float64. Maxima and
counts are exact up to float32 rounding of each element's error (1e-7 relative), sums and norms are within about
1e-6 relative, the cosine within about 1e-6 (it is taken as (a.a + b.b - |a-b|^2) / 2|a||b|, whose rounding errors
cancel to second order when a and b are close; identical tensors give exactly 1.0). A chunk holding NaN/Inf, or whose
float32 squares or quotients overflow, is redone in float64 element by element. A chunk free of NaN/Inf costs about
fifteen numpy calls; the counts behind the shares are skipped when the chunk's maxima already settle them.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from msdebug_hooks.compare.verdicts import (DEFAULT_TOLERANCE, ERROR, NOT_COMPARABLE, PASS, VERDICTS, WARNING,
                                            Tolerance, row_verdict)
from msdebug_hooks.conditions._blas import single_threaded_blas
from msdebug_hooks.conditions.stats import bfloat16_to_float32

# the verdict names and thresholds live in verdicts.py; they are imported from here too
__all__ = ["compare_arrays", "not_comparable", "TensorComparison", "Tolerance", "DEFAULT_TOLERANCE", "PASS",
           "WARNING", "ERROR", "NOT_COMPARABLE", "VERDICTS", "CHUNK_ELEMENTS"]

CHUNK_ELEMENTS = 1 << 16  # 64K elements: 256 KB per float32 buffer; per-chunk call overhead stays small

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_SUPPORTED_NAMES = _FLOAT_NAMES + _INT_NAMES + ("bool",)


@dataclass(frozen=True)
class TensorComparison:
    """The comparison of one tensor pair. Metric fields are None when the pair is not comparable."""

    verdict: str
    reason: str
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    dtype_a: str
    dtype_b: str
    count: int = 0
    cosine: float | None = None
    euclidean_distance: float | None = None
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    max_rel_error: float | None = None
    share_within_0_1_percent: float | None = None
    share_within_0_5_percent: float | None = None
    allclose_share: float | None = None
    nan_inf_mismatch: int | None = None
    #: ``|a - b| / |b|`` (L2 norms over the positions where both are finite): the tensor's error as a whole, which
    #: near-zero elements cannot blow up; 0.0 when both are zero, inf when only the reference is
    relative_l2_error: float | None = None
    #: ``|a| / |b|``: 1.0 when the magnitudes agree; rounding noise leaves it within about ``relative_l2_error**2``
    norm_ratio: float | None = None
    #: the larger root-mean-square of the two sides (over positions where both are finite)
    largest_rms: float | None = None

    @property
    def comparable(self) -> bool:
        return self.verdict != NOT_COMPARABLE

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON or CSV (shapes as lists)."""
        out = asdict(self)
        out["shape_a"] = list(self.shape_a) if self.shape_a is not None else None
        out["shape_b"] = list(self.shape_b) if self.shape_b is not None else None
        return out


def not_comparable(reason: str, *, shape_a: Any = None, shape_b: Any = None, dtype_a: str = "",
                   dtype_b: str = "") -> TensorComparison:
    """A "not comparable" result (also for callers that could not even load one side)."""
    return TensorComparison(NOT_COMPARABLE, reason, _shape(shape_a), _shape(shape_b), dtype_a, dtype_b)


def _shape(shape: Any) -> tuple[int, ...] | None:
    return None if shape is None else tuple(int(d) for d in shape)


# --- input checks ---------------------------------------------------------------------------------------------------

_dtype_names: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, cached: numpy builds the string on every access, and this runs for every chunk."""
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = dtype.name
    return name


def _as_array(value: Any) -> np.ndarray | str:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - any object may come in; it is reported, never raised
        return f"not an array ({type(exc).__name__}: {exc})"
    if _dtype_name(arr.dtype) not in _SUPPORTED_NAMES:
        return (f"dtype {_dtype_name(arr.dtype)} is not numeric (supported: bool, int8-64, uint8-64, float16, "
                f"bfloat16, float32, float64)")
    return arr


def _comparability(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> str:
    """'' when comparable, else the reason."""
    if a.shape != b.shape:
        return f"shapes differ: {list(a.shape)} vs {list(b.shape)}"
    da, db = _dtype_name(a.dtype), _dtype_name(b.dtype)
    if da == db:
        return ""
    if da in _FLOAT_NAMES and db in _FLOAT_NAMES and tol.compare_across_float_dtypes:
        return ""
    return f"dtypes differ: {da} vs {db}"


# --- the chunk kernel -----------------------------------------------------------------------------------------------

_scratch = threading.local()

#: dtypes whose every value float32 holds exactly: compared in float32 chunks (half the bytes of float64)
_FLOAT32_EXACT = frozenset({"float32", "float16", "bfloat16", "bool", "int8", "uint8", "int16", "uint16"})


def _buffers(size: int, work: np.dtype) -> tuple[np.ndarray, ...]:
    """(A, B, D, R, Q, ones, mask) work buffers of ``size`` elements, reused by the calling thread."""
    cache = getattr(_scratch, "buffers", None)
    if cache is None:
        cache = _scratch.buffers = {}
    found = cache.get(work.char)
    if found is None or found[0].shape[0] < size:
        full = max(size, 1024)
        found = cache[work.char] = (np.empty(full, work), np.empty(full, work), np.empty(full, work),
                                    np.empty(full, work), np.empty(full, work), np.ones(full, work),
                                    np.empty(full, np.bool_))
    return tuple(buf[:size] for buf in found)


def _load(out: np.ndarray, part: np.ndarray) -> np.ndarray:
    """``part`` in the work dtype of ``out`` (a view when it already is; exact conversions otherwise)."""
    if part.dtype == out.dtype:
        return part
    if _dtype_name(part.dtype) == "bfloat16":
        part = bfloat16_to_float32(part)
        if out.dtype == part.dtype:
            return part
    np.copyto(out, part, casting="unsafe")
    return out


class _Totals:
    """Running sums over chunks, in float64."""

    def __init__(self) -> None:
        self.aa = self.bb = 0.0
        self.abs_sum = self.sq_sum = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.finite = 0          # positions where both are finite
        self.mismatch = 0
        self.within_1e3 = self.within_5e3 = self.within_tol = 0


def _kind_codes(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    codes = np.zeros(x.shape, np.int8)
    codes[np.isnan(x)] = 1
    codes[np.isposinf(x)] = 2
    codes[np.isneginf(x)] = 3
    return codes


def _add_chunk(t: _Totals, a: np.ndarray, b: np.ndarray, scratch: tuple[np.ndarray, ...], tol: Tolerance) -> None:
    """Fold one chunk pair (float32 or float64) into the totals; ``scratch`` is (D, R, Q, ones, mask) of its length.

    The cosine needs a.a, b.b and a.b; a.b is taken as (a.a + b.b - |a-b|^2) / 2, one dot fewer. Sums are BLAS dots
    with a vector of ones (faster than ``np.sum``'s pairwise loop). Anything that is not finite here (a
    NaN/Inf in the data, a float32 square or sum that overflowed) sends the chunk to the float64 path.
    """
    d, r, q, ones, mask = scratch
    np.subtract(a, b, out=d)
    np.abs(d, out=d)
    abs_sum = float(np.dot(d, ones))
    aa = float(np.dot(a, a))
    bb = float(np.dot(b, b))
    dd = float(np.dot(d, d))
    if not math.isfinite(abs_sum + aa + bb + dd):
        _add_special_chunk(t, a, b, tol)
        return
    n = a.shape[0]
    max_abs = float(np.maximum.reduce(d))
    if max_abs == 0.0:  # identical chunk: every share is full
        _fold(t, n, aa, bb, abs_sum, dd, max_abs, 0.0, n, n, n)
        return
    np.abs(b, out=r)
    np.add(r, tol.relative_epsilon, out=r)       # r = |b| + eps
    np.divide(d, r, out=q)                       # q = relative error
    max_rel = float(np.maximum.reduce(q))
    if not math.isfinite(max_rel):  # float32 quotient overflowed (huge error against a zero reference)
        _add_special_chunk(t, a, b, tol)
        return
    within_1e3 = n if max_rel <= 1e-3 else _count_le(q, 1e-3, mask)
    within_5e3 = n if max_rel <= 5e-3 else _count_le(q, 5e-3, mask)
    if max_abs <= tol.atol or (max_rel <= tol.rtol and tol.rtol * tol.relative_epsilon <= tol.atol):
        within_tol = n
    else:  # |a-b| - rtol*(|b| + eps) <= atol; rtol*eps (1e-16) is below float rounding
        np.multiply(r, tol.rtol, out=q)
        np.subtract(d, q, out=q)
        within_tol = _count_le(q, tol.atol, mask)
    _fold(t, n, aa, bb, abs_sum, dd, max_abs, max_rel, within_1e3, within_5e3, within_tol)


def _fold(t: _Totals, n: int, aa: float, bb: float, abs_sum: float, dd: float, max_abs: float, max_rel: float,
          within_1e3: int, within_5e3: int, within_tol: int) -> None:
    t.aa += aa
    t.bb += bb
    t.abs_sum += abs_sum
    t.sq_sum += dd
    t.max_abs = max(t.max_abs, max_abs)
    t.max_rel = max(t.max_rel, max_rel)
    t.finite += n
    t.within_1e3 += within_1e3
    t.within_5e3 += within_5e3
    t.within_tol += within_tol


def _count_le(x: np.ndarray, bound: float, mask: np.ndarray) -> int:
    np.less_equal(x, bound, out=mask)
    return int(np.count_nonzero(mask))


def _add_special_chunk(t: _Totals, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> None:
    """A chunk with NaN/Inf (or float32 overflow), in float64: both-finite positions give the metrics, the rest
    agree (same NaN/Inf) or mismatch."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    special = ~both
    ka = _kind_codes(a[special])
    kb = _kind_codes(b[special])
    agree = int(np.count_nonzero(ka == kb))
    t.mismatch += int(ka.shape[0]) - agree
    t.within_1e3 += agree
    t.within_5e3 += agree
    t.within_tol += agree
    af = a[both]
    bf = b[both]
    if af.shape[0] == 0:
        return
    d = np.abs(af - bf)
    if not np.isfinite(d).all():  # finite operands whose difference overflows float64: an extreme error
        d = np.where(np.isfinite(d), d, np.finfo(np.float64).max)
    absb = np.abs(bf)
    rel = d / (absb + tol.relative_epsilon)
    _fold(t, int(af.shape[0]), float(np.dot(af, af)), float(np.dot(bf, bf)), float(d.sum()), float(np.dot(d, d)),
          float(d.max()), float(rel.max()), int(np.count_nonzero(rel <= 1e-3)), int(np.count_nonzero(rel <= 5e-3)),
          int(np.count_nonzero(d <= tol.atol + tol.rtol * absb)))


def _walk(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> _Totals:
    flat_a = np.ravel(a, order="C")
    flat_b = np.ravel(b, order="C")
    n = flat_a.shape[0]
    exact32 = _dtype_name(a.dtype) in _FLOAT32_EXACT and _dtype_name(b.dtype) in _FLOAT32_EXACT
    work = np.dtype(np.float32 if exact32 else np.float64)
    chunk = min(CHUNK_ELEMENTS, n)
    bufa, bufb, *scratch = _buffers(chunk, work)
    totals = _Totals()
    # OpenBLAS only spreads dots of more than 10 000 elements over threads: small tensors skip the switch
    blas = single_threaded_blas() if n > 10_000 else contextlib.nullcontext()
    with blas, np.errstate(invalid="ignore", over="ignore"):  # Inf-Inf is handled, not warned
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            k = stop - start
            ca = _load(bufa[:k], flat_a[start:stop])
            cb = _load(bufb[:k], flat_b[start:stop])
            _add_chunk(totals, ca, cb, tuple(buf[:k] for buf in scratch), tol)
    return totals


# --- from the totals to the metrics and the verdict -----------------------------------------------------------------

def _cosine(t: _Totals) -> float:
    if t.aa == 0.0 and t.bb == 0.0:
        return 1.0
    if t.aa == 0.0 or t.bb == 0.0:
        return 0.0
    if not (math.isfinite(t.aa) and math.isfinite(t.bb) and math.isfinite(t.sq_sum)):
        # squares overflowed float64 (|x| > 1e154): scale-free fallback is not worth a second pass here
        return float("nan")
    ab = (t.aa + t.bb - t.sq_sum) / 2   # |a-b|^2 = a.a + b.b - 2 a.b; errors in a.a, b.b cancel to second order
    product = t.aa * t.bb  # one sqrt: identical tensors give exactly 1.0
    norm = math.sqrt(product) if 0.0 < product < math.inf else math.sqrt(t.aa) * math.sqrt(t.bb)
    return max(-1.0, min(1.0, ab / norm))


def _ratio(top: float, bottom: float, both_zero: float = 0.0) -> float:
    if bottom > 0.0:
        return top / bottom
    return both_zero if top == 0.0 else math.inf


def compare_arrays(actual: Any, reference: Any, tolerance: Tolerance | None = None) -> TensorComparison:
    """Compare ``actual`` (the run under test) with ``reference``; never raises for bad inputs.

    Relative errors are taken against ``reference``. See the module docstring for every definition and
    :class:`Tolerance` for the verdict's thresholds.
    """
    tol = tolerance if tolerance is not None else DEFAULT_TOLERANCE
    a = _as_array(actual)
    b = _as_array(reference)
    if isinstance(a, str) or isinstance(b, str):
        reason = "; ".join(f"{side}: {msg}" for side, msg in (("a", a), ("b", b)) if isinstance(msg, str))
        return not_comparable(reason, shape_a=getattr(a, "shape", None), shape_b=getattr(b, "shape", None),
                              dtype_a=getattr(getattr(a, "dtype", None), "name", ""),
                              dtype_b=getattr(getattr(b, "dtype", None), "name", ""))
    why = _comparability(a, b, tol)
    if why:
        return not_comparable(why, shape_a=a.shape, shape_b=b.shape, dtype_a=a.dtype.name, dtype_b=b.dtype.name)
    n = int(a.size)
    base = dict(shape_a=tuple(a.shape), shape_b=tuple(b.shape), dtype_a=_dtype_name(a.dtype),
                dtype_b=_dtype_name(b.dtype), count=n)
    if n == 0:
        return TensorComparison(PASS, "both empty", **base, nan_inf_mismatch=0)
    t = _walk(a, b, tol)
    finite = t.finite
    c = dict(
        cosine=_cosine(t),
        euclidean_distance=math.sqrt(t.sq_sum),
        max_abs_error=t.max_abs,
        mean_abs_error=t.abs_sum / finite if finite else 0.0,
        max_rel_error=t.max_rel,
        share_within_0_1_percent=t.within_1e3 / n,
        share_within_0_5_percent=t.within_5e3 / n,
        allclose_share=t.within_tol / n,
        nan_inf_mismatch=t.mismatch,
        relative_l2_error=_ratio(math.sqrt(t.sq_sum), math.sqrt(t.bb)),
        norm_ratio=_ratio(math.sqrt(t.aa), math.sqrt(t.bb), both_zero=1.0),
    )
    c["largest_rms"] = math.sqrt(max(t.aa, t.bb) / finite) if finite else 0.0
    verdict, reason = row_verdict(tol, n, nan_inf_mismatch=c["nan_inf_mismatch"], max_abs_error=c["max_abs_error"],
                                  cosine=c["cosine"], norm_ratio=c["norm_ratio"], allclose_share=c["allclose_share"],
                                  relative_l2_error=c["relative_l2_error"], max_rel_error=c["max_rel_error"],
                                  largest_rms=c["largest_rms"])
    if a.dtype != b.dtype:
        reason += f" (dtypes {base['dtype_a']} vs {base['dtype_b']}, compared in float64)"
    return TensorComparison(verdict, reason, **base, **c)
