"""Statistics of many small tensors at once: one float64 buffer, one pass for all of them.

Why: a training step hands the online debugger, ``WeightMonitor`` and the offline check dozens to hundreds of
tensors of a few KB each. ``compute_statistics`` spends microseconds of per-call overhead per tensor whatever its
size, so a step's cost grew with the number of tensors rather than with their bytes. Here the small tensors of a
call are copied once into one contiguous float64 buffer and walked segment by segment in one call of the compiled
kernel (``_kernels.accumulate_segments``), or, on the numpy fallback, every statistic is a segment reduction
(``ufunc.reduceat``) over it: the cost is about one pass over the bytes plus a constant.

The results equal ``compute_statistics`` on each tensor: the same definitions (``stats`` module docstring), the
same float64 arithmetic that ``compute_statistics`` uses for tensors of up to ``stats.SMALL_TENSOR`` elements, and
the same final formulas (``stats._finish``). Larger tensors are one kernel call each (their bytes dominate), or go
through ``compute_statistics`` on the fallback. Segments holding NaN or Inf (rare) are finished with the exact
rules (the kernel's careful path; on the fallback, one by one with NaN-aware reductions).
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Collection, Iterable, Sequence

import numpy as np

from msdebug_hooks.conditions import _engine
from msdebug_hooks.conditions import stats as st
from msdebug_hooks.conditions._dtypes import bfloat16_to_float32, dtype_text, flat_kind


#: float64 elements per group: 256 KB per temporary, half of one core's L2 (``stats.CHUNK_BYTES``)
GROUP_ELEMENTS = st.CHUNK_BYTES // 8


def compute_statistics_batch(values: Sequence[Any], previous: Sequence[Any] | None = None,
                             needed: Collection[str] = st.BASIC_STATISTICS, *,
                             ranges: Iterable[tuple[float, float]] = (),
                             allclose_tolerances: Iterable[tuple[float, float]] = (),
                             bfloat16: bool = False, keep_previous: bool = False) -> list[st.TensorStatistics]:
    """``[compute_statistics(v, p, needed, ...) for v, p in zip(values, previous)]``, computed together.

    ``previous``: one entry per value (None where there is none), or None for no previous values at all. Raises
    ``UnsupportedDtypeError`` for a tensor of a dtype the engine does not analyse, as ``compute_statistics`` does.
    ``keep_previous=True``: afterwards every previous entry that is not None holds its value (checked first: see
    ``stats.kept_view``); large float32/float64 tensors are copied in the statistics pass itself.

    >>> [s.max for s in compute_statistics_batch([np.array([1.0, 3.0]), np.array([-2.0])], needed={"max"})]
    [3.0, -2.0]
    """
    found = batch_totals(values, previous, needed, ranges=ranges, allclose_tolerances=allclose_tolerances,
                         bfloat16=bfloat16, keep_into=previous if keep_previous else None)
    return [found.statistics(j) for j in range(found.size)]


def batch_totals(values: Sequence[Any], previous: Sequence[Any] | None = None,
                 needed: Collection[str] = st.BASIC_STATISTICS, *, ranges: Iterable[tuple[float, float]] = (),
                 allclose_tolerances: Iterable[tuple[float, float]] = (), bfloat16: bool = False,
                 keep_into: Sequence[Any] | None = None) -> "BatchTotals":
    """The running totals of every tensor (``compute_statistics_batch`` before its final formulas), kept as arrays
    so that a caller can judge all tensors at once (``judging.find_hits``).

    ``keep_into``: one entry per value, None or an array that receives the value (a writable C-contiguous array of
    its dtype and size, checked before anything is computed: ``stats.kept_view``); it may be the previous entry
    itself. Every tensor's dtype is checked before anything is computed or copied too, so an
    ``UnsupportedDtypeError`` leaves every array as it was.
    """
    needed = st.checked_statistic_names(needed)
    ranges = tuple((float(a), float(b)) for a, b in ranges)
    tolerances = tuple((float(r), float(a)) for r, a in allclose_tolerances)
    values = list(values)
    prevs = _one_per_value("previous", previous, len(values))
    targets = _one_per_value("keep_into", keep_into, len(values))
    field_name = "previous" if keep_into is previous else "keep_into"
    keep = [st.kept_view(v, t, f"{field_name}[{i}]") if t is not None else None
            for i, (v, t) in enumerate(zip(values, targets))]
    flats = [flat_kind(value, bfloat16=bfloat16) for value in values]   # raises before any work or copy
    wants_previous = st.UPDATE_RATIO in needed or bool(tolerances)
    compiled = _engine.kernels()
    found = BatchTotals(len(values), needed, ranges, tolerances, wants_previous, compiled)
    batch = _Batch()
    for index, (value, prev, (flat, kind)) in enumerate(zip(values, prevs, flats)):
        n = flat.shape[0]
        found.has_previous_list[index] = prev is not None
        if n > st.SMALL_TENSOR and compiled is None:
            totals, n, dtype_name, paired = st.statistics_totals(value, prev, needed, ranges, tolerances,
                                                                 bfloat16=bfloat16, keep_into=keep[index])
            found.set_totals(index, totals, n, dtype_name, paired)
            continue
        dtype_name = dtype_text(value, kind)
        prev_flat = prev_kind = None
        if prev is not None and wants_previous:
            candidate, candidate_kind = flat_kind(prev, bfloat16=bfloat16)
            if candidate.shape[0] == n:
                prev_flat, prev_kind = candidate, candidate_kind
        if n > st.SMALL_TENSOR:   # what compute_statistics does, without checking the request again per tensor
            fstate, istate, counts, kept = _engine.compiled_state(compiled, flat, kind, prev_flat, prev_kind, needed,
                                                                  ranges, tolerances, st.chunk_elements(kind),
                                                                  keep[index])
            found.set_state(index, fstate, istate, counts, n, dtype_name, prev_flat is not None)
            if keep[index] is not None and not kept:
                np.copyto(keep[index], flat.view(keep[index].dtype))
            continue
        batch.add(index, _as_float64_source(flat, kind), dtype_name, prev is not None,
                  None if prev_flat is None else _as_float64_source(prev_flat, prev_kind))
    batch.finish(found)
    for index in batch.indices:
        if keep[index] is not None:   # small tensors: their previous values were read into the batch buffer
            np.copyto(keep[index], np.asarray(values[index]).reshape(-1))
    return found


def _one_per_value(field_name: str, entries: Sequence[Any] | None, count: int) -> list:
    if entries is None:
        return [None] * count
    entries = list(entries)
    if len(entries) != count:
        from msdebug_hooks.errors import ConfigError
        raise ConfigError(field_name, f"{len(entries)} entries",
                          f"one entry per value ({count}), None where there is none")
    return entries


class BatchTotals:
    """The running totals of a batch's tensors, one row per tensor: the compiled pass's state arrays as they are
    (``fstate`` / ``istate`` / ``counts`` rows), or, on numpy's fallback, one totals object per tensor. ``columns``
    gives every total over all tensors as arrays; ``statistics(j)`` the ``TensorStatistics`` of one tensor."""

    def __init__(self, size: int, needed: frozenset[str], ranges: tuple[tuple[float, float], ...],
                 tolerances: tuple[tuple[float, float], ...], wants_previous: bool, compiled: Any) -> None:
        self.size = size
        self.needed, self.ranges, self.tolerances = needed, ranges, tolerances
        self.wants_previous = wants_previous
        self.counts_list = [0] * size          # per tensor, as Python values (``count`` etc. are the arrays)
        self.dtypes = [""] * size
        self.has_previous_list = [False] * size
        self.paired_list = [False] * size
        self._k = compiled
        n_counts = len(ranges) + len(tolerances)
        if compiled is not None:
            self.fstate, self.istate, self.counts = _engine.new_state(compiled, size, n_counts)
        self._rows: list[Any] = [None] * size

    def set_state(self, index: int, fstate: np.ndarray, istate: np.ndarray, counts: np.ndarray, n: int,
                  dtype_name: str, paired: bool) -> None:
        self.fstate[index], self.istate[index], self.counts[index] = fstate, istate, counts
        self.describe(index, n, dtype_name, paired)

    def set_totals(self, index: int, totals: Any, n: int, dtype_name: str, paired: bool) -> None:
        self._rows[index] = totals
        self.describe(index, n, dtype_name, paired)

    def describe(self, index: int, n: int, dtype_name: str, paired: bool) -> None:
        self.counts_list[index] = n
        self.dtypes[index] = dtype_name
        self.paired_list[index] = paired

    @property
    def count(self) -> np.ndarray:
        """Element count per tensor."""
        return np.array(self.counts_list, np.int64)

    @property
    def has_previous(self) -> np.ndarray:
        """Per tensor, whether a previous value was given."""
        return np.array(self.has_previous_list, np.bool_)

    @property
    def paired(self) -> np.ndarray:
        """Per tensor, whether its previous value was read element by element (same element count)."""
        return np.array(self.paired_list, np.bool_)

    def descriptions(self) -> tuple[np.ndarray, ...]:
        """(element count, count or 1, count > 0, has_previous, paired) per tensor, as arrays."""
        count = self.count
        return count, np.maximum(count, 1), count > 0, self.has_previous, self.paired

    def totals(self, index: int) -> Any:
        """The running totals of one tensor, as ``stats._finish`` reads them."""
        found = self._rows[index]
        if found is None:
            found = _engine.totals(self._k, self.fstate[index], self.istate[index], self.counts[index],
                                   len(self.ranges))
        return found

    def statistics(self, index: int) -> st.TensorStatistics:
        return st._finish(self.totals(index), self.counts_list[index], self.dtypes[index], self.needed, self.ranges,
                          self.tolerances, self.has_previous_list[index], self.wants_previous,
                          self.paired_list[index])

    def columns(self) -> Any:
        """Every running total over all tensors, as arrays: the fields ``stats._finish`` reads, ``in_range`` and
        ``close`` of shape (tensors, ranges) and (tensors, tolerances)."""
        if self._k is not None and all(row is None for row in self._rows):
            return StateColumns(self._k, self.fstate, self.istate, self.counts, len(self.ranges))
        rows = [self.totals(j) for j in range(self.size)]
        out = SimpleNamespace()
        for name, dtype in (("nan", np.int64), ("pinf", np.int64), ("ninf", np.int64), ("zero", np.int64),
                            ("pos", np.int64), ("any_number", np.bool_), ("mx", np.float64), ("mn", np.float64),
                            ("sum", np.float64), ("mean", np.float64), ("m2", np.float64),
                            ("abs_sum", np.float64), ("diff_sum", np.float64), ("prev_abs_sum", np.float64)):
            setattr(out, name, np.array([getattr(t, name) for t in rows], dtype))
        out.in_range = np.array([list(t.in_range) for t in rows], np.int64).reshape(self.size, len(self.ranges))
        out.close = np.array([list(t.close) for t in rows], np.bool_).reshape(self.size, len(self.tolerances))
        return out


class StateColumns:
    """The columns of the compiled pass's state arrays under the names of ``stats._Accumulator``'s totals, each
    taken when first read (a check reads a few of them)."""

    _SLOTS = {"nan": ("i", "I_NAN"), "pinf": ("i", "I_PINF"), "ninf": ("i", "I_NINF"), "zero": ("i", "I_ZERO"),
              "pos": ("i", "I_POS"), "mx": ("f", "F_MAX"), "mn": ("f", "F_MIN"), "sum": ("f", "F_SUM"),
              "mean": ("f", "F_MEAN"), "m2": ("f", "F_M2"), "abs_sum": ("f", "F_ABS"), "diff_sum": ("f", "F_DIFF"),
              "prev_abs_sum": ("f", "F_PREV_ABS")}

    def __init__(self, k: Any, fstate: np.ndarray, istate: np.ndarray, counts: np.ndarray, n_ranges: int) -> None:
        self._k, self._f, self._i, self._c, self._n_ranges = k, fstate, istate, counts, n_ranges

    def __getattr__(self, name: str) -> np.ndarray:   # only for names not read yet
        if name == "any_number":
            value = self._i[:, self._k.I_ANY] != 0
        elif name == "in_range":
            value = self._c[:, :self._n_ranges]
        elif name == "close":
            value = self._c[:, self._n_ranges:] == self._i[:, self._k.I_N, None]
        elif name in self._SLOTS:
            state, slot = self._SLOTS[name]
            value = (self._f if state == "f" else self._i)[:, getattr(self._k, slot)]
        else:
            raise AttributeError(name)
        setattr(self, name, value)
        return value


def _as_float64_source(flat: np.ndarray, kind: str) -> np.ndarray:
    """A flat array that converts to float64 exactly as the single-tensor path converts it."""
    return bfloat16_to_float32(flat) if kind == "bf16" else flat


class _Batch:
    """The small tensors of one call, concatenated in call order."""

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.parts: list[np.ndarray] = []
        self.dtypes: list[str] = []
        self.has_previous: list[bool] = []
        self.prev_parts: list[np.ndarray | None] = []

    def add(self, index: int, part: np.ndarray, dtype_name: str, has_previous: bool,
            prev_part: np.ndarray | None) -> None:
        self.indices.append(index)
        self.parts.append(part)
        self.dtypes.append(dtype_name)
        self.has_previous.append(has_previous)
        self.prev_parts.append(prev_part)

    def finish(self, found: BatchTotals) -> None:
        """Compute every segment's totals into ``found``."""
        if not self.parts:
            return
        counts = [p.shape[0] for p in self.parts]
        for first, last in group_bounds(counts):
            indices = self.indices[first:last]
            totals = _segment_totals(self.parts[first:last], np.array(counts[first:last], np.int64), found,
                                     self.prev_parts[first:last], indices)
            for k, index in enumerate(indices, start=first):
                if totals is not None:
                    found.set_totals(index, totals[k - first], counts[k], self.dtypes[k],
                                     self.prev_parts[k] is not None)
                else:
                    found.describe(index, counts[k], self.dtypes[k], self.prev_parts[k] is not None)


def group_bounds(counts: list[int]) -> Iterable[tuple[int, int]]:
    """[first, last) runs of consecutive tensors holding at most ``GROUP_ELEMENTS`` elements (at least one tensor):
    every temporary of a group stays in the CPU cache, as the single-tensor path's chunks do."""
    first, size = 0, 0
    for k, n in enumerate(counts):
        if size and size + n > GROUP_ELEMENTS:
            yield first, k
            first, size = k, 0
        size += n
    if first < len(counts):
        yield first, len(counts)


def _segment_totals(parts: list[np.ndarray], counts: np.ndarray, found: BatchTotals,
                    prev_parts: list[np.ndarray | None], indices: list[int]) -> list[SimpleNamespace] | None:
    """Per segment, the running totals ``stats._finish`` reads (the fields of ``stats._Accumulator``); the compiled
    pass writes them into ``found``'s state rows ``indices`` instead (and None is returned)."""
    m = len(parts)
    needed, ranges, tolerances = found.needed, found.ranges, found.tolerances
    compiled = _engine.kernels()
    if compiled is not None:
        _compiled_segment_totals(compiled, parts, counts, found, prev_parts, indices)
        return None
    totals = [_empty_totals(len(ranges), len(tolerances)) for _ in range(m)]
    live = np.flatnonzero(counts)               # reduceat cannot express an empty segment: they keep the zeros
    if live.size == 0:
        return totals
    buf = np.concatenate([parts[k] for k in live], dtype=np.float64, casting="unsafe")
    seg_counts = counts[live]
    starts = np.zeros(live.size, np.int64)
    np.cumsum(seg_counts[:-1], out=starts[1:])
    need_zero = st.ZERO_COUNT in needed or st.POSITIVE_COUNT in needed or st.NEGATIVE_COUNT in needed
    need_sign = st.POSITIVE_COUNT in needed or st.NEGATIVE_COUNT in needed
    with np.errstate(all="ignore"):
        sums = np.add.reduceat(buf, starts)
        # a segment with NaN/Inf has a non-finite sum (float32-range values cannot overflow a float64 sum; a
        # float64 overflow also lands here, where the exact per-segment path is right anyway)
        special = ~np.isfinite(sums)
        need_extremes = st.MAX in needed or st.MIN in needed
        maxs = np.maximum.reduceat(buf, starts) if need_extremes else None
        mins = np.minimum.reduceat(buf, starts) if need_extremes else None
        means = sums / seg_counts
        m2s = abs_sums = zeros = poss = None
        if st.SD in needed:
            dev = buf - np.repeat(means, seg_counts)
            m2s = np.add.reduceat(np.multiply(dev, dev, out=dev), starts)
        if st.ABS_MEAN in needed:
            abs_sums = np.add.reduceat(np.abs(buf), starts)
        if need_zero:
            zeros = _count_segments(buf == 0, starts)
        if need_sign:
            poss = _count_segments(buf > 0, starts)
        in_range = [_count_segments((buf >= lo) & (buf <= hi), starts) for lo, hi in ranges]
        prev_totals = _previous_totals(buf, starts, seg_counts, [prev_parts[k] for k in live], tolerances)
    for j, k in enumerate(live):
        t = totals[k]
        t.n = int(seg_counts[j])
        t.sum = float(sums[j])
        t.mean = float(means[j])
        t.m2 = float(m2s[j]) if m2s is not None else 0.0
        t.abs_sum = float(abs_sums[j]) if abs_sums is not None else 0.0
        t.zero = int(zeros[j]) if zeros is not None else 0
        t.pos = int(poss[j]) if poss is not None else 0
        t.in_range = [int(c[j]) for c in in_range]
        t.any_number = True
        if need_extremes:
            t.mx, t.mn = float(maxs[j]), float(mins[j])
        if prev_totals is not None and prev_parts[k] is not None:
            t.diff_sum, t.prev_abs_sum, t.close = prev_totals[j]
        if special[j]:
            _finish_special_segment(t, buf[starts[j]:starts[j] + seg_counts[j]], need_extremes)
    return totals


def _compiled_segment_totals(k: Any, parts: list[np.ndarray], counts: np.ndarray, found: BatchTotals,
                             prev_parts: list[np.ndarray | None], indices: list[int]) -> None:
    """The same totals from one call of the compiled pass over the concatenated float64 buffer
    (``_kernels.accumulate_segments``: each segment is summed exactly as ``compute_statistics`` sums it), written
    into ``found``'s state rows ``indices``."""
    needed, ranges, tolerances = found.needed, found.ranges, found.tolerances
    m = len(parts)
    starts = np.zeros(m + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    buf = np.concatenate(parts, dtype=np.float64, casting="unsafe") if m > 1 else np.asarray(parts[0], np.float64)
    paired = np.array([p is not None for p in prev_parts], np.bool_)
    if paired.any():
        pbuf = np.concatenate([p if p is not None else np.zeros(int(c)) for p, c in zip(prev_parts, counts)],
                              dtype=np.float64, casting="unsafe")
    else:
        pbuf = buf[:0]
    fstate, istate, seg_counts = _engine.new_state(k, m, len(ranges) + len(tolerances))
    k.accumulate_segments(buf, buf.view(np.int64), pbuf, starts, paired, _engine.pass_mode(k, needed),
                          _engine.range_bounds(ranges, np.dtype(np.float64)),
                          _engine.tolerance_array(tolerances), fstate, istate, seg_counts)
    rows = np.asarray(indices)
    found.fstate[rows], found.istate[rows], found.counts[rows] = fstate, istate, seg_counts


def _empty_totals(n_ranges: int, n_tolerances: int) -> SimpleNamespace:
    return SimpleNamespace(n=0, nan=0, pinf=0, ninf=0, zero=0, pos=0, mx=-math.inf, mn=math.inf, any_number=False,
                           sum=0.0, mean=0.0, m2=0.0, abs_sum=0.0, diff_sum=0.0, prev_abs_sum=0.0,
                           close=[True] * n_tolerances, in_range=[0] * n_ranges)


def _count_segments(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Trues per segment (``add.reduceat`` on bool would OR them)."""
    return np.add.reduceat(mask.view(np.int8), starts, dtype=np.int64)


def _previous_totals(buf: np.ndarray, starts: np.ndarray, seg_counts: np.ndarray, prev_parts: list,
                     tolerances: tuple[tuple[float, float], ...]) -> list | None:
    """Per live segment (diff_sum, prev_abs_sum, [allclose per tolerance]); None when no segment is paired."""
    if all(p is None for p in prev_parts):
        return None
    pbuf = np.concatenate([p if p is not None else np.zeros(int(c)) for p, c in zip(prev_parts, seg_counts)],
                          dtype=np.float64, casting="unsafe")
    diff = np.abs(buf - pbuf)
    prev_abs = np.abs(pbuf, out=pbuf)
    diff_sums = np.add.reduceat(diff, starts)
    prev_abs_sums = np.add.reduceat(prev_abs, starts)
    closes = [_count_segments(diff <= atol + rtol * prev_abs, starts) == seg_counts for rtol, atol in tolerances]
    return [(float(diff_sums[j]), float(prev_abs_sums[j]), [bool(c[j]) for c in closes])
            for j in range(starts.shape[0])]


def _finish_special_segment(t: SimpleNamespace, seg: np.ndarray, need_extremes: bool) -> None:
    """A segment holding NaN or Inf: counts and NaN-skipping max/min, as the chunked single-tensor path."""
    nan = int(np.count_nonzero(np.isnan(seg)))
    t.nan = nan
    t.pinf = int(np.count_nonzero(seg == np.inf))
    t.ninf = int(np.count_nonzero(seg == -np.inf))
    if nan == seg.shape[0]:
        t.any_number = False
    elif nan and need_extremes:
        t.mx, t.mn = float(np.fmax.reduce(seg)), float(np.fmin.reduce(seg))


__all__ = ["compute_statistics_batch"]
