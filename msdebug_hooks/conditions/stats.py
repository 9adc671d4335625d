"""Tensor statistics for watchpoints, computed the way MindSpore's debugger did, in one pass over memory.

Why one pass: a statistic is memory-bound. Calling numpy once per statistic reads the whole tensor from RAM a dozen
times; here every needed statistic is taken from one read, by the engine ``statistics_engine.current_engine()``
gives: compiled kernels (numba: blocks that stay in L1) or, where numba is missing, numpy over chunks that stay in
L2. Only the statistics the caller names are computed. What each statistic means, and how exact it is, is written
in ``tensor_statistics``; ``docs/performance.md`` has the measured speeds.
"""
from __future__ import annotations

from typing import Any, Collection, Iterable

import numpy as np

from msdebug_hooks.conditions._dtypes import (  # noqa: F401 (public names of this module since the start)
    CHUNK_BYTES, SUPPORTED_DTYPES_TEXT, UnsupportedDtypeError, bfloat16_to_float32, chunk_elements, dtype_text,
    flat_kind)
from msdebug_hooks.conditions.kept import kept_view
from msdebug_hooks.conditions.statistics_engine import current_engine
from msdebug_hooks.conditions.tensor_statistics import (  # noqa: F401 (public names of this module since the start)
    ABS_MEAN, ALL_STATISTICS, BASIC_STATISTICS, MAX, MEAN, MIN, NEGATIVE_COUNT, POSITIVE_COUNT, SD, SMALL_TENSOR,
    UPDATE_RATIO, UPDATE_RATIO_EPSILON, ZERO_COUNT, TensorStatistics, checked_statistic_names)
from msdebug_hooks.conditions.totals import StatisticsRequest, finish


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
    request = StatisticsRequest.checked(needed, ranges, allclose_tolerances)
    keep = kept_view(value, previous) if keep_previous and previous is not None else None
    return request_statistics(value, previous, request, bfloat16=bfloat16, chunk_bytes=chunk_bytes, keep_into=keep)


def request_statistics(value: Any, previous: Any, request: StatisticsRequest, *, bfloat16: bool = False,
                       chunk_bytes: int = CHUNK_BYTES, keep_into: np.ndarray | None = None) -> TensorStatistics:
    """``compute_statistics`` for a request already checked (a caller that asks the same every time keeps it);
    ``keep_into``: a ``kept_view`` that receives ``value``."""
    flat, kind = flat_kind(value, bfloat16=bfloat16)
    n = flat.shape[0]
    has_previous = previous is not None
    prev_flat = prev_kind = None
    if has_previous:
        prev_flat, prev_kind = flat_kind(previous, bfloat16=bfloat16)
        if not (request.wants_previous and prev_flat.shape[0] == n):
            prev_flat = prev_kind = None
    work, work_kind = flat, kind
    if n <= SMALL_TENSOR and kind in ("f4", "conv4", "bf16"):
        # small tensors: float64 sums, agreeing with the C++ double loop to rounding
        work, work_kind = (bfloat16_to_float32(flat) if kind == "bf16" else flat), "conv8"
    found = current_engine().tensor_totals(work, work_kind, prev_flat, prev_kind, request,
                                           chunk_elements(work_kind, chunk_bytes), keep_into)
    if keep_into is not None and not found.kept:
        np.copyto(keep_into, flat.view(keep_into.dtype))
    return finish(found.totals, request, dtype_text(value, kind), has_previous, prev_flat is not None)
