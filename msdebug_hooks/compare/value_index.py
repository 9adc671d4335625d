"""Tensors found by value: which of a file's tensors equal a given one (or its transpose), within a tolerance.

compare-weights asks this for every tensor it could not pair by name, and for every pair whose values differ (is A's
value somewhere else in B?). Comparing each against all of B element by element would read B once per question, so
each tensor gets a fingerprint first -- its size, NaN/Inf counts, mean, mean |x|, max |x|, min and max -- and only
the tensors whose fingerprint could belong to an equal tensor are compared exactly.

The fingerprint test never loses a real match: ``np.allclose(a, b, rtol, atol)`` means ``|a_i - b_i| <= atol +
rtol * |b_i|`` for every element, so the means, mean magnitudes, extremes and largest magnitudes of ``a`` and ``b``
differ by at most ``atol + rtol * (the larger one's mean |x|, resp. max |x|)``; NaN and Inf must sit at the same
places, so their counts are equal. All fingerprint entries are unchanged by transposing or reshaping, so one test
covers a tensor, its transpose, and its other layouts of :mod:`.layouts` (Conv1d's ``[o, i, 1, k]`` / ``[o, i, k]``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.layouts import one_layout

#: fingerprint columns
_NAN, _POS_INF, _NEG_INF, _MEAN, _MEAN_ABS, _MAX_ABS, _LOW, _HIGH = range(8)


def values_close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    """``np.allclose`` in float64, NaN equal to NaN (a weight that is NaN in both files is not a conversion bug)."""
    return bool(np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol,
                            equal_nan=True))


def fingerprint(value: np.ndarray) -> np.ndarray:
    """The eight numbers an equal tensor shares within the tolerance (see the module docstring)."""
    x = np.asarray(value)
    if x.dtype.kind not in "fiub":
        x = x.astype(np.float64)  # bfloat16 and other numpy-foreign floats arrive as float32 already
    print_ = np.zeros(8)
    if x.size == 0:
        return print_
    finite = np.isfinite(x) if x.dtype.kind == "f" else None
    if finite is not None and not finite.all():
        print_[_NAN] = np.count_nonzero(np.isnan(x))
        print_[_POS_INF] = np.count_nonzero(x == np.inf)
        print_[_NEG_INF] = np.count_nonzero(x == -np.inf)
        x = x[finite]
        if x.size == 0:
            return print_
    magnitude = np.abs(x.astype(np.float64) if x.dtype.kind in "iub" else x)
    print_[_MEAN] = x.mean(dtype=np.float64)
    print_[_MEAN_ABS] = magnitude.mean(dtype=np.float64)
    print_[_MAX_ABS] = magnitude.max()
    print_[_LOW], print_[_HIGH] = x.min(), x.max()
    return print_


class ValueIndex:
    """The tensors of one file by fingerprint; fingerprints are computed on the first question, once each."""

    def __init__(self, weights: Mapping[str, np.ndarray], rtol: float, atol: float) -> None:
        self._weights = weights
        self._rtol, self._atol = rtol, atol
        self._prints: dict = {}
        self._buckets: Optional[dict] = None   # size -> (names in file order, fingerprint matrix)

    def fingerprint_of(self, name: str) -> np.ndarray:
        if name not in self._prints:
            self._prints[name] = fingerprint(self._weights[name])
        return self._prints[name]

    def distinctive(self, name: str) -> bool:
        """True when the tensor is not one repeated value (a zero bias or a ones scale says nothing about where it
        came from, so finding it under another name proves nothing)."""
        value = self._weights[name]
        print_ = self.fingerprint_of(name)
        return value.size > 1 and print_[_HIGH] - print_[_LOW] > self._atol + self._rtol * print_[_MAX_ABS]

    def equal(self, value: np.ndarray, value_print: np.ndarray, among: Optional[Iterable[str]] = None) -> list:
        """``[(name, transposed)]`` in file order: the tensors equal to ``value`` (``transposed``: equal to
        ``value.T``, which also catches a square weight stored transposed), optionally only among ``among``."""
        names, prints = self._bucket(value.size)
        if not names:
            return []
        wanted = None if among is None else set(among)
        scale_mean = np.maximum(prints[:, _MEAN_ABS], value_print[_MEAN_ABS])
        scale_max = np.maximum(prints[:, _MAX_ABS], value_print[_MAX_ABS])
        slack = 1e-12 * (1.0 + scale_max)
        bound_mean = self._atol + self._rtol * scale_mean + slack
        bound_max = self._atol + self._rtol * scale_max + slack
        delta = np.abs(prints - value_print)
        fits = ((delta[:, :_MEAN] == 0).all(axis=1) & (delta[:, _MEAN] <= bound_mean)
                & (delta[:, _MEAN_ABS] <= bound_mean) & (delta[:, _MAX_ABS:] <= bound_max[:, None]).all(axis=1))
        found = []
        for row in np.flatnonzero(fits):
            name = names[row]
            if wanted is not None and name not in wanted:
                continue
            other = self._weights[name]
            if other.shape == value.shape and values_close(value, other, self._rtol, self._atol):
                found.append((name, False))
            elif value.ndim >= 2 and other.shape == value.shape[::-1] and \
                    values_close(value.T, other, self._rtol, self._atol):
                found.append((name, True))
            elif other.shape != value.shape:   # a layout of the table (Conv1d [o, i, 1, k] / [o, i, k]): a reshape
                reshaped, other, layout = one_layout(value, other)
                if layout and values_close(reshaped, other, self._rtol, self._atol):
                    found.append((name, False))
        return found

    def _bucket(self, size: int) -> tuple:
        if self._buckets is None:
            by_size: dict = {}
            for name, value in self._weights.items():
                by_size.setdefault(int(np.asarray(value).size), []).append(name)
            self._buckets = {size: (names, None) for size, names in by_size.items()}
        names, prints = self._buckets.get(size, ([], None))
        if names and prints is None:
            prints = np.stack([self.fingerprint_of(name) for name in names])
            self._buckets[size] = (names, prints)
        return names, prints
