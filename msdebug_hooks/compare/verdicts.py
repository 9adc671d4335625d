"""The verdict of one row of a comparison: pass, warning or error for a tensor pair, and the thresholds behind it.

``metrics.py`` measures how far apart two tensors are; this module turns those numbers into a verdict with the
sentence that says why (``row_verdict``), against a ``Tolerance``. A row's verdict colours one line of a table;
where two runs *part* is decided by ``attribution.py`` from all the rows in execution order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import real_number

__all__ = ["PASS", "WARNING", "ERROR", "NOT_COMPARABLE", "VERDICTS", "Tolerance", "DEFAULT_TOLERANCE", "Verdict",
           "row_verdict"]

PASS = "pass"
WARNING = "warning"
ERROR = "error"
NOT_COMPARABLE = "not comparable"
#: verdicts from best to worst; ``not comparable`` is ranked apart (a check that could not look)
VERDICTS = (PASS, WARNING, ERROR, NOT_COMPARABLE)


@dataclass(frozen=True)
class Tolerance:
    """Thresholds of one pair's verdict. Change them with ``dataclasses.replace(DEFAULT_TOLERANCE, rtol=1e-3)``.

    The verdict colours one row of a table; where two runs *part* is decided by :mod:`.attribution` from the
    pairs' ``relative_l2_error`` in execution order, not by any one row. Defaults and why:

    * ``pass``: every element within ``atol + rtol * |b|`` with ``rtol = atol = 1e-4`` (TroubleShooter's allclose
      default) and ``cosine >= 0.9999`` (msprobe's cosine bar); or ``|a - b| / |b| <= 1e-4`` (``relative_l2_pass``):
      the tensor as a whole agrees to 1e-4 even if elements near zero have large relative errors (after a ReLU or a
      BatchNorm, in gradients); or every absolute error at most ``atol`` with ``cosine >= 0.99``.
    * ``error``: any NaN/Inf disagreement; ``cosine < 0.99`` (the direction changed: a wrong operator, layout or
      input), also when every error is within ``atol``; or the norm moved by more than 0.5 % (``norm_shift_error``:
      values scaled as a whole, which the cosine does not see; rounding noise moves the norm by about the square of
      the relative error, 1e-5 for an error of 0.3 %). Tensors whose root-mean-square is at most ``negligible``
      (1e-6) on both sides count as zero and are judged by ``atol`` alone.
    * ``warning``: anything between: typically fp16/bf16 against fp32, or a gradient whose elements near zero
      carry rounding noise.
    """

    rtol: float = 1e-4
    atol: float = 1e-4
    cosine_pass: float = 0.9999
    cosine_error: float = 0.99
    #: error when ``|a| / |b|`` is off 1 by more than this (values moved as a whole)
    norm_shift_error: float = 0.005
    #: pass when ``|a - b| / |b|`` is at most this
    relative_l2_pass: float = 1e-4
    #: the eps in |a-b| / (|b| + eps)
    relative_epsilon: float = 1e-12
    #: root-mean-square at or below which a tensor counts as zero (its cosine is not judged)
    negligible: float = 1e-6
    #: float16/bfloat16/float32/float64 against each other (mixed precision) instead of "not comparable"
    compare_across_float_dtypes: bool = True

    def __post_init__(self) -> None:
        """Raises ``ConfigError`` (a ``ValueError``) naming the first threshold out of its range."""
        for name in ("rtol", "atol", "relative_epsilon", "negligible", "norm_shift_error", "relative_l2_pass"):
            real_number(f"Tolerance.{name}", getattr(self, name), minimum=0, allowed="a finite number >= 0")
        for name in ("cosine_pass", "cosine_error"):
            real_number(f"Tolerance.{name}", getattr(self, name), minimum=-1, maximum=1,
                        allowed="a number in [-1, 1]")
        if self.cosine_error > self.cosine_pass:
            raise ConfigError("Tolerance.cosine_error", self.cosine_error,
                              f"at most cosine_pass ({self.cosine_pass!r})")


DEFAULT_TOLERANCE = Tolerance()


class Verdict(NamedTuple):
    """One row's verdict (``PASS`` / ``WARNING`` / ``ERROR``) and the sentence that says why."""

    verdict: str
    reason: str


def row_verdict(tol: Tolerance, count: int, *, nan_inf_mismatch: int, max_abs_error: float, cosine: float,
                norm_ratio: float, allclose_share: float, relative_l2_error: float, max_rel_error: float,
                largest_rms: float) -> Verdict:
    """The verdict of a comparable, non-empty pair of ``count`` elements from its metrics (``TensorComparison``'s
    fields of the same names); the rules are ``Tolerance``'s docstring."""
    if nan_inf_mismatch:
        return Verdict(ERROR, f"{nan_inf_mismatch} of {count} positions are NaN/Inf on one side only (or of "
                              "another kind)")
    if max_abs_error <= tol.atol:
        if largest_rms <= tol.negligible:
            return Verdict(PASS, f"every absolute error <= atol {tol.atol:g} (both sides are about zero)")
        if math.isfinite(cosine) and cosine >= tol.cosine_error:
            return Verdict(PASS, f"every absolute error <= atol {tol.atol:g}")
        return Verdict(ERROR, f"cosine {cosine:.6g} < {tol.cosine_error:g}: the values are small (every absolute "
                              f"error <= atol {tol.atol:g}) but point elsewhere")
    if not math.isfinite(cosine) or cosine < tol.cosine_error:
        return Verdict(ERROR, f"cosine {cosine:.6g} < {tol.cosine_error:g}")
    shift = abs(norm_ratio - 1.0)
    if shift > tol.norm_shift_error:
        return Verdict(ERROR, f"the values moved as a whole: the norm is {100 * shift:.2f} % "
                              f"{'larger' if norm_ratio > 1 else 'smaller'} than the reference's "
                              f"(> {100 * tol.norm_shift_error:g} %)")
    if allclose_share >= 1.0 and cosine >= tol.cosine_pass:
        return Verdict(PASS, f"every element within atol {tol.atol:g} + rtol {tol.rtol:g} * |reference|")
    if relative_l2_error <= tol.relative_l2_pass:
        return Verdict(PASS, f"|a - b| / |b| = {relative_l2_error:.3g} <= {tol.relative_l2_pass:g}")
    if allclose_share < 1.0:
        outside = count - round(allclose_share * count)
        return Verdict(WARNING, f"{outside} of {count} elements outside atol {tol.atol:g} + rtol {tol.rtol:g} * "
                                f"|reference| (|a - b| / |b| = {relative_l2_error:.3g}, max relative error "
                                f"{max_rel_error:.3g})")
    return Verdict(WARNING, f"cosine {cosine:.6g} < {tol.cosine_pass:g}")
