"""Numbers behind a NaN/Inf origin: is a value finite, what an operator's inputs held, and the hint they give.

Plain numpy. The hint reads the operator's kind from its type or the function the user called (``Log`` / ``ops.log``,
``Sqrt``, ``Div`` / ``/``, ``Exp``, ``Pow``, matrix products and sums) and the input statistics, never a name of the
user's network: log of 0 or of a negative, sqrt of a negative, a zero denominator, exp above the largest argument the
dtype holds (88.72 in float32, 11.09 in float16), and an output beyond the dtype's range from finite inputs (an
overflow, e.g. under a loss scale).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["as_array", "is_finite", "TensorStats", "stats", "hint", "first_bad"]


def as_array(value: Any) -> Optional[np.ndarray]:
    """A numpy array from a numpy array, a MindSpore tensor (``asnumpy``) or a number; ``None`` for anything else."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "asnumpy") and hasattr(value, "dtype"):
        try:
            return value.asnumpy()
        except Exception:   # noqa: BLE001 - a tensor that cannot be read (no data yet): not a value
            return None
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return np.asarray(value)
    return None


def is_finite(array: Optional[np.ndarray]) -> bool:
    """Whether every element is finite (integers, booleans and missing values are)."""
    if array is None or array.dtype.kind not in "fc":
        return True
    return bool(np.isfinite(array).all())


def first_bad(array: np.ndarray) -> Optional[tuple[tuple[int, ...], float]]:
    """The index and value of the first non-finite element (row-major), or ``None``."""
    if array.dtype.kind not in "fc":
        return None
    bad = np.flatnonzero(~np.isfinite(array))
    if not bad.size:
        return None
    index = tuple(int(i) for i in np.unravel_index(int(bad[0]), array.shape))
    return index, float(array.reshape(-1)[int(bad[0])])


@dataclass(frozen=True)
class TensorStats:
    """What one tensor held: shape, dtype, min / max / abs-max over its finite elements, NaN and Inf counts, how
    many elements are 0 and negative."""

    shape: tuple
    dtype: str
    min: Optional[float]
    max: Optional[float]
    abs_max: Optional[float]
    nan: int
    inf: int
    zeros: int
    negatives: int

    def text(self) -> str:
        if self.min is None:
            body = "no finite element"
        else:
            body = f"min {self.min:.4g}, max {self.max:.4g}, abs-max {self.abs_max:.4g}"
        extra = [f"{self.nan} NaN" if self.nan else "", f"{self.inf} Inf" if self.inf else "",
                 f"{self.zeros} zero(s)" if self.zeros else ""]
        extra = [part for part in extra if part]
        return f"{self.dtype}{list(self.shape)}: {body}" + (f" ({', '.join(extra)})" if extra else "")

    def as_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype, "min": self.min, "max": self.max,
                "abs_max": self.abs_max, "nan": self.nan, "inf": self.inf, "zeros": self.zeros,
                "negatives": self.negatives}


def stats(array: np.ndarray) -> TensorStats:
    array = np.asarray(array)
    if array.dtype.kind not in "fciub":
        return TensorStats(tuple(array.shape), str(array.dtype), None, None, None, 0, 0, 0, 0)
    values = array.astype(np.float64, copy=False) if array.dtype.kind in "iub" else array
    finite = np.isfinite(values)
    kept = values[finite]
    nan = int(np.isnan(values).sum())
    inf = int(values.size - finite.sum() - nan)
    if kept.size:
        low, high = float(kept.min()), float(kept.max())
        return TensorStats(tuple(array.shape), str(array.dtype), low, high, max(abs(low), abs(high)), nan, inf,
                           int((kept == 0).sum()), int((kept < 0).sum()))
    return TensorStats(tuple(array.shape), str(array.dtype), None, None, None, nan, inf, 0, 0)


def _kind(op: str) -> str:
    """The operator's kind from its type (``RealDiv``) or the call the user wrote (``ops.log``, ``/``)."""
    name = op.lower().rsplit(".", 1)[-1].strip()
    for kind, words in (("log", ("log", "log1p")), ("sqrt", ("sqrt", "rsqrt")), ("exp", ("exp", "expm1")),
                        ("pow", ("pow", "**")), ("div", ("div", "realdiv", "floordiv", "divnonan", "/", "reciprocal",
                                                         "truediv"))):
        if name in words or any(name.startswith(word) for word in words if word.isalpha()):
            return kind
    return "other"


_EXP_LIMIT = {"float16": 11.09, "float32": 88.72, "float64": 709.78, "bfloat16": 88.72}


def hint(op: str, inputs: Sequence[Optional[TensorStats]], output: Optional[TensorStats]) -> str:
    """One line saying what made this operator's output non-finite, from its kind and its inputs' statistics."""
    kind = _kind(op)
    first = inputs[0] if inputs else None
    if kind == "log" and first is not None and first.min is not None:
        if first.min < 0:
            return f"log of a negative number (input min {first.min:.4g}): NaN; clamp the input or use log(x + eps)"
        if first.zeros or first.min == 0:
            return "log of 0: -inf; add a small epsilon (ops.log(x + 1e-8)) or clamp the input"
    if kind == "sqrt" and first is not None and first.min is not None and first.min < 0:
        return (f"sqrt of a negative number (input min {first.min:.4g}): NaN; clamp the input at 0 or take the "
                f"absolute value")
    if kind == "sqrt" and first is not None and first.zeros and op.lower().endswith("rsqrt"):
        return "rsqrt of 0: inf; add an epsilon before the root"
    if kind == "div":
        denominator = inputs[1] if len(inputs) > 1 else first
        if denominator is not None and (denominator.zeros or denominator.min == 0 or denominator.max == 0):
            return "division by zero: the denominator holds 0; add an epsilon or mask the zeros"
    if kind == "exp" and first is not None and first.max is not None:
        dtype = output.dtype if output is not None else first.dtype
        limit = _EXP_LIMIT.get(dtype.replace("mindspore.", "").lower())
        if limit is not None and first.max > limit:
            return (f"exp overflow: input max {first.max:.4g} is above {limit} (the largest exp() argument "
                    f"{dtype} holds); subtract the max first (softmax trick) or clamp the input")
    if kind == "pow" and first is not None and first.min is not None and first.min < 0:
        return f"power of a negative base (min {first.min:.4g}) with a fractional exponent: NaN"
    if output is not None and output.inf and not output.nan:
        largest = max((s.abs_max for s in inputs if s is not None and s.abs_max is not None), default=None)
        around = f" (largest input magnitude {largest:.4g})" if largest is not None else ""
        return (f"overflow: finite inputs{around} give a result beyond the range of {output.dtype}; under a loss "
                f"scale lower the scale or use dynamic loss scaling that skips such steps, else normalize the "
                f"inputs or lower the learning rate")
    return "finite inputs give a NaN result here; check the operator's valid input range"
