"""Statistics of many small tensors at once: one float64 buffer, one pass for all of them.

Why: a training step hands the online debugger, ``WeightMonitor`` and the offline check dozens to hundreds of
tensors of a few KB each. ``compute_statistics`` spends a fixed per-call overhead per tensor whatever its size, so a
step's cost grew with the number of tensors rather than with their bytes. Here the small tensors of a call are
copied into float64 buffers of about ``state.GROUP_ELEMENTS`` and each buffer is summed segment by segment in one
engine call (the compiled ``accumulate_segments``, or numpy's segment reductions): the cost is about one pass over
the bytes plus a constant.

The results equal ``compute_statistics`` on each tensor: the same definitions (``tensor_statistics``), the same
float64 arithmetic that ``compute_statistics`` uses for tensors of up to ``SMALL_TENSOR`` elements, and the same
final formulas (``totals.finish``). Larger tensors are one engine call each (their bytes dominate).
"""
from __future__ import annotations

from typing import Any, Collection, Iterable, Sequence

import numpy as np

from msdebug_hooks.conditions._dtypes import bfloat16_to_float32, chunk_elements, dtype_text, flat_kind
from msdebug_hooks.conditions.kept import kept_views
from msdebug_hooks.conditions.state import BatchTotals, Segments, group_bounds
from msdebug_hooks.conditions.statistics_engine import current_engine
from msdebug_hooks.conditions.tensor_statistics import BASIC_STATISTICS, SMALL_TENSOR, TensorStatistics
from msdebug_hooks.conditions.totals import StatisticsRequest


def compute_statistics_batch(values: Sequence[Any], previous: Sequence[Any] | None = None,
                             needed: Collection[str] = BASIC_STATISTICS, *,
                             ranges: Iterable[tuple[float, float]] = (),
                             allclose_tolerances: Iterable[tuple[float, float]] = (),
                             bfloat16: bool = False, keep_previous: bool = False) -> list[TensorStatistics]:
    """``[compute_statistics(v, p, needed, ...) for v, p in zip(values, previous)]``, computed together.

    ``previous``: one entry per value (None where there is none), or None for no previous values at all. Raises
    ``UnsupportedDtypeError`` for a tensor of a dtype the engine does not analyse, as ``compute_statistics`` does.
    ``keep_previous=True``: afterwards every previous entry that is not None holds its value (checked first: see
    ``kept.kept_view``); large float32/float64 tensors are copied in the statistics pass itself.

    >>> [s.max for s in compute_statistics_batch([np.array([1.0, 3.0]), np.array([-2.0])], needed={"max"})]
    [3.0, -2.0]
    """
    found = batch_totals(values, previous, needed, ranges=ranges, allclose_tolerances=allclose_tolerances,
                         bfloat16=bfloat16, keep_into=previous if keep_previous else None)
    return found.all_statistics()


def batch_totals(values: Sequence[Any], previous: Sequence[Any] | None = None,
                 needed: Collection[str] = BASIC_STATISTICS, *, ranges: Iterable[tuple[float, float]] = (),
                 allclose_tolerances: Iterable[tuple[float, float]] = (), bfloat16: bool = False,
                 keep_into: Sequence[Any] | None = None) -> BatchTotals:
    """The running totals of every tensor (``compute_statistics_batch`` before its final formulas), kept as arrays
    so that a caller can judge all tensors at once (``judging``).

    ``keep_into``: one entry per value, None or an array that receives the value (a writable C-contiguous array of
    its dtype and size, checked before anything is computed: ``kept.kept_view``); it may be the previous entry
    itself. Every tensor's dtype is checked before anything is computed or copied too, so an
    ``UnsupportedDtypeError`` leaves every array as it was.
    """
    request = StatisticsRequest.checked(needed, ranges, allclose_tolerances)
    values = list(values)
    prevs = one_per_value("previous", previous, len(values))
    targets = one_per_value("keep_into", keep_into, len(values))
    field_name = "previous" if keep_into is previous else "keep_into"
    keep = kept_views(values, targets, field_name)
    flats = [flat_kind(value, bfloat16=bfloat16) for value in values]   # raises before any work or copy
    wants_previous = request.wants_previous
    engine = current_engine()
    found = BatchTotals(len(values), request)
    small = Segments([], [], [])
    for index, (value, prev, (flat, kind)) in enumerate(zip(values, prevs, flats)):
        n = flat.shape[0]
        prev_flat = prev_kind = None
        if prev is not None and wants_previous:
            candidate, candidate_kind = flat_kind(prev, bfloat16=bfloat16)
            if candidate.shape[0] == n:
                prev_flat, prev_kind = candidate, candidate_kind
        found.describe(index, n, dtype_text(value, kind), prev is not None, prev_flat is not None)
        if n > SMALL_TENSOR:   # what compute_statistics does, without checking the request again per tensor
            kept = engine.totals_into(found, index, flat, kind, prev_flat, prev_kind, chunk_elements(kind),
                                      keep[index])
            if keep[index] is not None and not kept:
                np.copyto(keep[index], flat.view(keep[index].dtype))
            continue
        small.rows.append(index)
        small.parts.append(_as_float64_source(flat, kind))
        small.previous.append(None if prev_flat is None else _as_float64_source(prev_flat, prev_kind))
    for first, last in group_bounds([p.shape[0] for p in small.parts]):
        engine.segments_into(found, Segments(small.rows[first:last], small.parts[first:last],
                                             small.previous[first:last]))
    for index in small.rows:
        if keep[index] is not None:   # small tensors: their previous values were read into the batch buffer
            np.copyto(keep[index], np.asarray(values[index]).reshape(-1))
    return found


def one_per_value(field_name: str, entries: Sequence[Any] | None, count: int) -> list:
    """``entries`` as a list of ``count`` entries (None: ``count`` Nones), or a ``ConfigError`` for another
    length."""
    if entries is None:
        return [None] * count
    entries = list(entries)
    if len(entries) != count:
        from msdebug_hooks.errors import ConfigError
        raise ConfigError(field_name, f"{len(entries)} entries",
                          f"one entry per value ({count}), None where there is none")
    return entries


def _as_float64_source(flat: np.ndarray, kind: str) -> np.ndarray:
    """A flat array that converts to float64 exactly as the single-tensor path converts it."""
    return bfloat16_to_float32(flat) if kind == "bf16" else flat


__all__ = ["compute_statistics_batch"]
