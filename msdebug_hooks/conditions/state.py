"""``Totals`` as arrays: the state rows the compiled pass writes, and a batch's totals, one row per tensor.

Why: the compiled kernels cannot take a Python object, so they keep running totals in a float64 row (``fstate``,
slots ``F_*``), an int64 row (``istate``, slots ``I_*``) and a row of counts (the ranges' in-range counts, then
the tolerances' close counts). A batch keeps every tensor's totals in such rows whichever engine fills them, so
that judging reads each total of all tensors as one array (``BatchTotals.columns``) and the compiled pre-judging
reads the rows themselves. A row reads out as ``Totals`` (``totals_of``); numpy's routes write theirs in.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np

from msdebug_hooks.conditions._dtypes import CHUNK_BYTES
from msdebug_hooks.conditions.tensor_statistics import TensorStatistics
from msdebug_hooks.conditions.totals import StatisticsRequest, Totals, finish

# fstate (float64) and istate (int64) slots
F_MAX, F_MIN, F_SUM, F_MEAN, F_M2, F_ABS, F_DIFF, F_PREV_ABS = range(8)
I_N, I_NAN, I_PINF, I_NINF, I_ZERO, I_POS, I_ANY = range(7)
F_SLOTS, I_SLOTS = 8, 7

#: float64 elements per group of small tensors summed together: every temporary of a group stays in cache
GROUP_ELEMENTS = CHUNK_BYTES // 8


class State(NamedTuple):
    """Running totals as arrays: one tensor's rows (1-D), or one row per tensor (2-D)."""

    fstate: np.ndarray
    istate: np.ndarray
    counts: np.ndarray


_START = np.zeros(F_SLOTS)
_START[F_MAX], _START[F_MIN] = -np.inf, np.inf


def new_state(rows: int | None = None, n_counts: int = 0) -> State:
    """State with no element added: zeros, max = -inf and min = +inf; ``rows`` for one row per tensor."""
    if rows is None:
        return State(_START.copy(), np.zeros(I_SLOTS, np.int64), np.zeros(n_counts, np.int64))
    fstate = np.empty((rows, F_SLOTS))
    fstate[:] = _START      # (np.tile costs several times more for the few rows of a step)
    return State(fstate, np.zeros((rows, I_SLOTS), np.int64), np.zeros((rows, n_counts), np.int64))


def totals_of(f: list[float], i: list[int], c: list[int], n_ranges: int) -> Totals:
    """One row (as lists: ``tolist`` reads a row at once) as ``Totals``; a tolerance is close when every element
    was counted close."""
    n = i[I_N]
    return Totals(n, i[I_NAN], i[I_PINF], i[I_NINF], i[I_ZERO], i[I_POS], bool(i[I_ANY]), f[F_MAX], f[F_MIN],
                  f[F_SUM], f[F_MEAN], f[F_M2], f[F_ABS], f[F_DIFF], f[F_PREV_ABS], c[:n_ranges],
                  [count == n for count in c[n_ranges:]])


def write_row(t: Totals, state: State, n_ranges: int) -> None:
    """``t`` (one tensor's) into a row; a close tolerance counts every element, another none."""
    state.fstate[:] = (t.mx, t.mn, t.sum, t.mean, t.m2, t.abs_sum, t.diff_sum, t.prev_abs_sum)
    state.istate[:] = (t.n, t.nan, t.pinf, t.ninf, t.zero, t.pos, t.any_number)
    state.counts[:n_ranges] = t.in_range
    state.counts[n_ranges:] = [t.n if close else 0 for close in t.close]


def columns(state: State, n_ranges: int) -> Totals:
    """Every total of a 2-D state as one array per total (views where the state holds it as it is)."""
    f, i, c = state
    return Totals(i[:, I_N], i[:, I_NAN], i[:, I_PINF], i[:, I_NINF], i[:, I_ZERO], i[:, I_POS], i[:, I_ANY] != 0,
                  f[:, F_MAX], f[:, F_MIN], f[:, F_SUM], f[:, F_MEAN], f[:, F_M2], f[:, F_ABS], f[:, F_DIFF],
                  f[:, F_PREV_ABS], c[:, :n_ranges], c[:, n_ranges:] == i[:, I_N, None])


class Descriptions(NamedTuple):
    """Per tensor of a batch, as arrays: element count, the count or 1 (a safe divisor: empty tensors are never
    judged), whether it has elements, whether a previous value was given, whether it was paired."""

    count: np.ndarray
    count_or_one: np.ndarray
    counted: np.ndarray
    has_previous: np.ndarray
    paired: np.ndarray


class BatchTotals:
    """The totals of a batch's tensors, one state row per tensor, and what each tensor is (element count, dtype
    text, previous value given, previous value paired). ``columns`` gives every total over all tensors as arrays;
    ``statistics(j)`` the ``TensorStatistics`` of one tensor."""

    def __init__(self, size: int, request: StatisticsRequest) -> None:
        self.size = size
        self.request = request
        self.ranges, self.tolerances = request.ranges, request.tolerances
        self.counts_list = [0] * size          # per tensor, as Python values (``count`` etc. are the arrays)
        self.dtypes = [""] * size
        self.has_previous_list = [False] * size
        self.paired_list = [False] * size
        self.fstate, self.istate, self.counts = new_state(size, len(request.ranges) + len(request.tolerances))

    def describe(self, index: int, n: int, dtype_name: str, has_previous: bool, paired: bool) -> None:
        self.counts_list[index] = n
        self.dtypes[index] = dtype_name
        self.has_previous_list[index] = has_previous
        self.paired_list[index] = paired

    def row(self, index: int) -> State:
        """The state row of one tensor (views: a pass adds to it in place)."""
        return State(self.fstate[index], self.istate[index], self.counts[index])

    def rows(self, first: int, last: int) -> State:
        """The state rows of tensors ``first`` to ``last`` - 1 (views)."""
        return State(self.fstate[first:last], self.istate[first:last], self.counts[first:last])

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

    def descriptions(self) -> Descriptions:
        count = self.count
        return Descriptions(count, np.maximum(count, 1), count > 0, self.has_previous, self.paired)

    def totals(self, index: int) -> Totals:
        return totals_of(self.fstate[index].tolist(), self.istate[index].tolist(), self.counts[index].tolist(),
                         len(self.ranges))

    def statistics(self, index: int) -> TensorStatistics:
        return finish(self.totals(index), self.request, self.dtypes[index], self.has_previous_list[index],
                      self.paired_list[index])

    def all_statistics(self) -> list[TensorStatistics]:
        """``statistics(j)`` of every tensor, the rows read out at once."""
        n_ranges, request = len(self.ranges), self.request
        rows = zip(self.fstate.tolist(), self.istate.tolist(), self.counts.tolist(), self.dtypes,
                   self.has_previous_list, self.paired_list)
        return [finish(totals_of(f, i, c, n_ranges), request, dtype_name, has_previous, paired)
                for f, i, c, dtype_name, has_previous, paired in rows]

    def columns(self) -> Totals:
        """Every total over all tensors, as arrays."""
        return columns(State(self.fstate, self.istate, self.counts), len(self.ranges))


class Segments(NamedTuple):
    """Small tensors summed together as segments of one float64 buffer: their rows in the batch, their elements
    (any dtype that converts exactly to float64) and their paired previous values (None: unpaired)."""

    rows: list[int]
    parts: list[np.ndarray]
    previous: list[np.ndarray | None]


def group_bounds(counts: list[int]) -> Iterator[tuple[int, int]]:
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
