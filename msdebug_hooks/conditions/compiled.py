"""The compiled route's driver: what the numba kernels (``_kernels``) are handed, for one tensor or for segments.

Why apart from the kernels: this side is plain numpy (the kernels module ``k`` is passed in, so importing this
imports no numba); it picks the pass mode, converts what the kernels are not compiled for, and keeps the arrays
a watchpoint set needs (bounds, tolerances) built once. Totals go into state rows (``state``).
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from msdebug_hooks.conditions._dtypes import bfloat16_to_float32, f32_at_least, f32_at_most, work_chunks, work_dtype
from msdebug_hooks.conditions.state import BatchTotals, Segments, State, new_state
from msdebug_hooks.conditions.tensor_statistics import UPDATE_RATIO
from msdebug_hooks.conditions.totals import Bounds, StatisticsRequest

#: an empty keep buffer per work dtype: what ``accumulate`` gets when nothing is copied
NOWHERE = {np.dtype(np.float32): np.empty(0, np.float32), np.dtype(np.float64): np.empty(0, np.float64)}

_ARRAYS: dict[tuple, np.ndarray] = {}  # a watchpoint set's bounds and tolerances, built once (read-only)


def pass_mode(k: ModuleType, needed: frozenset[str]) -> int:
    """The smallest block summary that covers ``needed`` (nan/inf counts come with every mode; the update ratio
    comes from the previous-value loop, whatever the mode)."""
    needed = needed - {UPDATE_RATIO}
    if needed & {"mean", "sd", "positive_count", "negative_count"}:
        return k.MODE_FULL
    if not needed:
        return k.MODE_SPECIALS
    if needed <= {"max", "min"}:
        return k.MODE_EXTREMES
    if needed <= {"abs_mean", "zero_count"}:
        return k.MODE_ABS_ZERO
    return k.MODE_FULL


def native(a: np.ndarray) -> np.ndarray:
    """``a`` as an aligned, C-contiguous, native-byte-order array (the layout the kernels are compiled for)."""
    if a.dtype.isnative and a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.ascontiguousarray(a, a.dtype.newbyteorder("="))


def int_view(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32 if a.dtype.itemsize == 4 else np.int64)


def range_bounds(ranges: tuple[Bounds, ...], dtype: np.dtype) -> np.ndarray:
    """(R, 2) inclusive bounds in the work dtype such that comparing a work-dtype x to them is comparing double(x)
    to the double bounds (float32: the nearest float32 inside the range)."""
    key = ("bounds", ranges, dtype.char)
    found = _ARRAYS.get(key)
    if found is None:
        if dtype == np.float32:
            with np.errstate(over="ignore"):
                pairs = [(f32_at_least(a), f32_at_most(b)) for a, b in ranges]
            found = np.array(pairs, np.float32).reshape(len(ranges), 2)
        else:
            found = np.array(ranges, np.float64).reshape(len(ranges), 2)
        found = _ARRAYS[key] = _frozen(found)
    return found


def tolerance_array(tolerances: tuple[Bounds, ...]) -> np.ndarray:
    key = ("tolerances", tolerances)
    found = _ARRAYS.get(key)
    if found is None:
        found = _ARRAYS[key] = _frozen(np.array(tolerances, np.float64).reshape(len(tolerances), 2))
    return found


def _frozen(a: np.ndarray) -> np.ndarray:
    if len(_ARRAYS) > 256:  # watchpoint sets change rarely; never let a stream of new ones grow this
        _ARRAYS.clear()
    a.flags.writeable = False
    return a


def tensor_into(k: ModuleType, state: State, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None,
                prev_kind: str | None, request: StatisticsRequest, chunk: int,
                keep_into: np.ndarray | None = None) -> bool:
    """Add one tensor to ``state`` (a fresh row) with the compiled pass (``_kernels.accumulate``); returns whether
    ``flat`` was copied into ``keep_into`` in the pass. float32/float64 tensors go in one call, copied into
    ``keep_into`` (a writable flat array of their dtype) in the same pass; converted dtypes, and a previous value of
    another work dtype, one cache-sized chunk at a time (the caller copies then)."""
    work = work_dtype(kind)
    mode = pass_mode(k, request.needed)
    paired = prev_flat is not None
    tol = tolerance_array(request.tolerances)
    fstate, istate, counts = state
    if kind in ("f4", "f8") and (not paired or prev_kind == kind):
        x = native(flat)
        prev = native(prev_flat) if paired else x[:0]
    elif flat.shape[0] <= chunk and (not paired or work == np.float64 or work_dtype(prev_kind) == work):
        x = _as_work(flat, kind, work)  # one exact conversion (float64 holds every supported dtype exactly)
        prev = _as_work(prev_flat, prev_kind, work) if paired else x[:0]
    else:
        x = None
    if x is not None:
        fused = (keep_into is not None and keep_into.dtype == x.dtype and kind in ("f4", "f8")
                 and keep_into is native(keep_into))
        k.accumulate(x, int_view(x), prev, mode, paired, range_bounds(request.ranges, work), tol, fstate, istate,
                     counts, keep_into if fused else NOWHERE[x.dtype])
        return fused
    if paired and work_dtype(prev_kind) != work:
        work = np.dtype(np.float64)  # both sides in float64, as the C++ compared them
    bounds = range_bounds(request.ranges, work)
    x_chunks = work_chunks(flat, kind, chunk, work_dtype(kind))
    p_chunks = work_chunks(prev_flat, prev_kind, chunk, work_dtype(prev_kind)) if paired else None
    for c in x_chunks:
        c = np.asarray(c, work)
        p = np.asarray(next(p_chunks), work) if p_chunks is not None else c[:0]
        k.accumulate(c, int_view(c), p, mode, paired, bounds, tol, fstate, istate, counts, NOWHERE[work])
    return False


def _as_work(flat: np.ndarray, kind: str, work: np.dtype) -> np.ndarray:
    """A flat array of any kind converted exactly to the work dtype (bfloat16 arrives as raw words)."""
    if kind == "bf16":
        flat = bfloat16_to_float32(flat)
    return np.asarray(flat, work)


def segments_into(k: ModuleType, found: BatchTotals, segments: Segments) -> None:
    """Every segment's totals from one call of the compiled pass over the concatenated float64 buffer
    (``_kernels.accumulate_segments``: each segment is summed exactly as a single tensor of its size is), added to
    its row of ``found``."""
    request = found.request
    parts, previous = segments.parts, segments.previous
    m = len(parts)
    counts = [p.shape[0] for p in parts]
    starts = np.zeros(m + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    buf = np.concatenate(parts, dtype=np.float64, casting="unsafe") if m > 1 else np.asarray(parts[0], np.float64)
    paired = np.array([p is not None for p in previous], np.bool_)
    if paired.any():
        pbuf = np.concatenate([p if p is not None else np.zeros(int(c)) for p, c in zip(previous, counts)],
                              dtype=np.float64, casting="unsafe")
    else:
        pbuf = buf[:0]
    fstate, istate, seg_counts = new_state(m, len(request.ranges) + len(request.tolerances))
    k.accumulate_segments(buf, buf.view(np.int64), pbuf, starts, paired, pass_mode(k, request.needed),
                          range_bounds(request.ranges, np.dtype(np.float64)), tolerance_array(request.tolerances),
                          fstate, istate, seg_counts)
    rows = np.asarray(segments.rows)
    found.fstate[rows], found.istate[rows], found.counts[rows] = fstate, istate, seg_counts
