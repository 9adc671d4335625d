"""How far apart are two tensors? The metrics of a precision comparison and a pass/warning/error verdict.

``compare_arrays(actual, reference)`` compares the run under test (``actual``, "a") with the reference run
(``reference``, "b"); "relative" always means relative to the reference.

Definitions (every element cast to float64 first):

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

Speed: large tensors are walked once in float64 chunks that stay in the CPU cache (16K elements, 128 KB), with
buffers reused across calls, so memory use does not grow with the tensor. A chunk free of NaN/Inf costs about a
dozen numpy calls; the counts behind the shares are skipped when the chunk's maximum already settles them.
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from msdebug_hooks.conditions._blas import single_threaded_blas
from msdebug_hooks.conditions.stats import bfloat16_to_float32

PASS = "pass"
WARNING = "warning"
ERROR = "error"
NOT_COMPARABLE = "not comparable"
#: verdicts from best to worst; ``not comparable`` is ranked apart (a check that could not look)
VERDICTS = (PASS, WARNING, ERROR, NOT_COMPARABLE)

CHUNK_ELEMENTS = 1 << 14  # 16K float64 = 128 KB per buffer; four buffers fit one core's 512 KB L2

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_SUPPORTED_NAMES = _FLOAT_NAMES + _INT_NAMES + ("bool",)


@dataclass(frozen=True)
class Tolerance:
    """Thresholds of the verdict. Change them with ``dataclasses.replace(DEFAULT_TOLERANCE, rtol=1e-3)``.

    Defaults and why:

    * ``pass``: every element within ``atol + rtol * |b|`` with ``rtol = atol = 1e-4`` (TroubleShooter's allclose
      default: two runs of the same float32 computation, summed in another order, stay far inside it) **and**
      ``cosine >= 0.9999`` (msprobe's cosine bar), or every absolute error at most ``atol`` (differences that small
      say nothing about direction, so the cosine of two near-zero tensors is not held against them).
    * ``error``: any NaN/Inf disagreement; or ``cosine < 0.99`` (the direction changed: a wrong operator, layout or
      input); or fewer than 90 % of the elements within 0.5 % relative error (the values moved as a whole, e.g. a
      scaled weight, which the cosine does not see). Both only when some absolute error exceeds ``atol``.
    * ``warning``: anything between, typically fp16/bf16 against fp32 (errors of 1e-3), which deserves a look but
      is not proof of a bug.
    """

    rtol: float = 1e-4
    atol: float = 1e-4
    cosine_pass: float = 0.9999
    cosine_error: float = 0.99
    #: error when the share of elements within 0.5 % relative error falls below this
    share_within_0_5_percent_error: float = 0.90
    #: the eps in |a-b| / (|b| + eps)
    relative_epsilon: float = 1e-12
    #: float16/bfloat16/float32/float64 against each other (mixed precision) instead of "not comparable"
    compare_across_float_dtypes: bool = True

    def __post_init__(self) -> None:
        for name in ("rtol", "atol", "relative_epsilon"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Tolerance.{name}={value!r} is not allowed: a finite number >= 0")
        for name in ("cosine_pass", "cosine_error", "share_within_0_5_percent_error"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and -1.0 <= value <= 1.0):
                raise ValueError(f"Tolerance.{name}={value!r} is not allowed: a number in [-1, 1]")
        if self.cosine_error > self.cosine_pass:
            raise ValueError(f"Tolerance.cosine_error={self.cosine_error!r} is not allowed: "
                             f"at most cosine_pass ({self.cosine_pass!r})")


DEFAULT_TOLERANCE = Tolerance()


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
    """``dtype.name``, cached: numpy builds the string on every access (tens of us per call under load)."""
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
        return f"dtype {_dtype_name(arr.dtype)} is not numeric (supported: bool, int8-64, uint8-64, float16, bfloat16, " \
               f"float32, float64)"
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


def _buffers(size: int) -> tuple[np.ndarray, ...]:
    """(A, B, D, R, mask) float64/bool work buffers of ``size`` elements, reused by the calling thread."""
    cache = getattr(_scratch, "buffers", None)
    if cache is None or cache[0].shape[0] < size:
        full = max(size, 1024)
        cache = _scratch.buffers = (np.empty(full), np.empty(full), np.empty(full), np.empty(full),
                                    np.empty(full, np.bool_))
    return tuple(buf[:size] for buf in cache)


def _load(out: np.ndarray, part: np.ndarray) -> np.ndarray:
    """``part`` as float64 in ``out`` (exact for every supported dtype but int64/uint64 beyond 2**53)."""
    name = _dtype_name(part.dtype)
    if name == "bfloat16":
        np.copyto(out, bfloat16_to_float32(part))
    elif name == "float64":
        return part  # already float64: read in place
    else:
        np.copyto(out, part, casting="unsafe")
    return out


class _Totals:
    """Running sums over chunks."""

    def __init__(self) -> None:
        self.ab = self.aa = self.bb = 0.0
        self.abs_sum = self.sq_sum = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.finite = 0          # positions where both are finite
        self.agreeing_special = 0  # same NaN/Inf on both sides
        self.mismatch = 0
        self.within_1e3 = self.within_5e3 = self.within_tol = 0


def _kind_codes(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    codes = np.zeros(x.shape, np.int8)
    codes[np.isnan(x)] = 1
    codes[np.isposinf(x)] = 2
    codes[np.isneginf(x)] = 3
    return codes


def _add_chunk(t: _Totals, a: np.ndarray, b: np.ndarray, d: np.ndarray, r: np.ndarray, mask: np.ndarray,
               tol: Tolerance) -> None:
    """Fold one float64 chunk pair into the totals; ``d``, ``r``, ``mask`` are scratch of the same length."""
    np.subtract(a, b, out=d)
    np.abs(d, out=d)
    abs_sum = float(np.add.reduce(d))
    if not math.isfinite(abs_sum):  # a NaN/Inf somewhere (or an overflowing difference): the careful path
        _add_special_chunk(t, a, b, tol)
        return
    n = a.shape[0]
    t.ab += float(np.dot(a, b))
    t.aa += float(np.dot(a, a))
    t.bb += float(np.dot(b, b))
    t.abs_sum += abs_sum
    t.sq_sum += float(np.dot(d, d))
    max_abs = float(np.maximum.reduce(d))
    t.max_abs = max(t.max_abs, max_abs)
    t.finite += n
    if max_abs == 0.0:  # identical chunk: every share is full
        t.within_1e3 += n
        t.within_5e3 += n
        t.within_tol += n
        return
    np.abs(b, out=r)
    np.add(r, tol.relative_epsilon, out=r)
    np.divide(d, r, out=r)
    max_rel = float(np.maximum.reduce(r))
    t.max_rel = max(t.max_rel, max_rel)
    t.within_1e3 += n if max_rel <= 1e-3 else _count_le(r, 1e-3, mask)
    t.within_5e3 += n if max_rel <= 5e-3 else _count_le(r, 5e-3, mask)
    if max_abs <= tol.atol or (max_rel <= tol.rtol and tol.rtol * tol.relative_epsilon <= tol.atol):
        t.within_tol += n
    else:  # |a-b| - rtol*|b| <= atol
        np.abs(b, out=r)
        np.multiply(r, tol.rtol, out=r)
        np.subtract(d, r, out=r)
        t.within_tol += _count_le(r, tol.atol, mask)


def _count_le(x: np.ndarray, bound: float, mask: np.ndarray) -> int:
    np.less_equal(x, bound, out=mask)
    return int(np.count_nonzero(mask))


def _add_special_chunk(t: _Totals, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> None:
    """A chunk with NaN/Inf: split into both-finite positions (metrics) and the rest (agree or mismatch)."""
    fa = np.isfinite(a)
    fb = np.isfinite(b)
    both = fa & fb
    special = ~both
    ka = _kind_codes(a[special])
    kb = _kind_codes(b[special])
    agree = int(np.count_nonzero(ka == kb))
    t.agreeing_special += agree
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
    t.ab += float(np.dot(af, bf))
    t.aa += float(np.dot(af, af))
    t.bb += float(np.dot(bf, bf))
    t.abs_sum += float(d.sum())
    t.sq_sum += float(np.dot(d, d))
    t.max_abs = max(t.max_abs, float(d.max()))
    t.finite += int(af.shape[0])
    absb = np.abs(bf)
    rel = d / (absb + tol.relative_epsilon)
    t.max_rel = max(t.max_rel, float(rel.max()))
    t.within_1e3 += int(np.count_nonzero(rel <= 1e-3))
    t.within_5e3 += int(np.count_nonzero(rel <= 5e-3))
    t.within_tol += int(np.count_nonzero(d <= tol.atol + tol.rtol * absb))


def _walk(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> _Totals:
    flat_a = np.ravel(a, order="C")
    flat_b = np.ravel(b, order="C")
    n = flat_a.shape[0]
    chunk = min(CHUNK_ELEMENTS, n)
    bufa, bufb, bufd, bufr, bufm = _buffers(chunk)
    totals = _Totals()
    # OpenBLAS only spreads dots of more than 10 000 elements over threads: small tensors skip the switch
    blas = single_threaded_blas() if n > 10_000 else contextlib.nullcontext()
    with blas, np.errstate(invalid="ignore", over="ignore"):  # Inf-Inf is handled, not warned
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            k = stop - start
            ca = _load(bufa[:k], flat_a[start:stop])
            cb = _load(bufb[:k], flat_b[start:stop])
            _add_chunk(totals, ca, cb, bufd[:k], bufr[:k], bufm[:k], tol)
    return totals


# --- the verdict ----------------------------------------------------------------------------------------------------

def _cosine(t: _Totals) -> float:
    if t.aa == 0.0 and t.bb == 0.0:
        return 1.0
    if t.aa == 0.0 or t.bb == 0.0:
        return 0.0
    if not (math.isfinite(t.aa) and math.isfinite(t.bb) and math.isfinite(t.ab)):
        # squares overflowed float64 (|x| > 1e154): scale-free fallback is not worth a second pass here
        return float("nan")
    product = t.aa * t.bb  # one sqrt: identical tensors give exactly 1.0
    norm = math.sqrt(product) if 0.0 < product < math.inf else math.sqrt(t.aa) * math.sqrt(t.bb)
    return max(-1.0, min(1.0, t.ab / norm))


def _verdict(c: dict[str, Any], n: int, tol: Tolerance) -> tuple[str, str]:
    if c["nan_inf_mismatch"]:
        return ERROR, f"{c['nan_inf_mismatch']} of {n} positions are NaN/Inf on one side only (or of another kind)"
    max_abs = c["max_abs_error"]
    cosine = c["cosine"]
    if max_abs <= tol.atol:
        return PASS, f"every absolute error <= atol {tol.atol:g}"
    if not math.isfinite(cosine) or cosine < tol.cosine_error:
        return ERROR, f"cosine {cosine:.6g} < {tol.cosine_error:g}"
    if c["share_within_0_5_percent"] < tol.share_within_0_5_percent_error:
        return ERROR, (f"only {100 * c['share_within_0_5_percent']:.2f} % of elements within 0.5 % relative error "
                       f"(< {100 * tol.share_within_0_5_percent_error:g} %)")
    if c["allclose_share"] >= 1.0 and cosine >= tol.cosine_pass:
        return PASS, f"every element within atol {tol.atol:g} + rtol {tol.rtol:g} * |reference|"
    if c["allclose_share"] < 1.0:
        outside = n - round(c["allclose_share"] * n)
        return WARNING, (f"{outside} of {n} elements outside atol {tol.atol:g} + rtol {tol.rtol:g} * |reference| "
                         f"(max relative error {c['max_rel_error']:.3g})")
    return WARNING, f"cosine {cosine:.6g} < {tol.cosine_pass:g}"


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
    )
    verdict, reason = _verdict(c, n, tol)
    if a.dtype != b.dtype:
        reason += f" (dtypes {base['dtype_a']} vs {base['dtype_b']}, compared in float64)"
    return TensorComparison(verdict, reason, **base, **c)
