"""A fixed sample of every weight's elements, checked every step at a cost that does not grow with the model.

The exact check (``_weight_screen``) copies every weight every step: on a 25 M-parameter model that copy alone is
several percent of a CPU step, whatever the code around it. The sample keeps, per parameter of ``n`` elements, at
most ``size`` of them: ``size / RUN`` runs of ``RUN`` (16) consecutive elements at fixed positions ``first, first +
stride, ...`` (``stride = ceil(n / (size / RUN))``, raised until it shares no factor with the last axis, so that the
runs walk across the columns of a matrix instead of staying in the same ones; ``first`` centres them). Runs, not
single elements: what a sample costs is the cache lines it reads, and a run of 16 float32 is one line (single
elements at 1024 positions read 1024 lines per parameter: 3.4 ms a step on the 25 M-parameter transformer, measured).
A parameter of at most ``size`` elements is sampled whole: its check is exact.

What the sample sees for sure: any run of at least ``stride`` consecutive elements (in row-major order) holds a
sampled element, so a NaN/Inf or a change covering such a run is seen the step it appears. What it can miss: a
NaN/Inf or a change confined to fewer elements between the sampled ones (it is seen at the next exact check), and an
update ratio far from the sample's estimate of it. "No sampled element moved" is never a verdict on its own for a
sampled parameter: ``WeightMonitor`` confirms it with an exact check, since a sparse update (embedding rows outside
the batch) can leave the sampled elements still while others move.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from msdebug_hooks.conditions._engine import array_address, kernels

EPSILON = 1e-9   # the engine's update-ratio epsilon


@dataclass
class SampleVerdict:
    """Per array of a sampled check: no sampled element moved, sampled update ratio, NaN/Inf count among the
    sampled elements, and the largest sampled |change| (the number an ``unchanged`` finding reports)."""

    unchanged: np.ndarray
    ratio: np.ndarray
    not_finite: np.ndarray
    max_change: np.ndarray


RUN = 16         # consecutive elements per sampled run: one 64-byte cache line of float32


def sample_plan(shape: Sequence[int], size: int) -> tuple[int, int, int, int]:
    """(first, stride, blocks, run) of the sample of an array of ``shape`` for a sample of at most ``size``
    elements: ``blocks`` runs of ``run`` consecutive elements starting at ``first + i * stride``."""
    n = math.prod(shape)
    if n <= size:
        return 0, n, 1, n
    run = min(RUN, size)
    stride = -(-n // max(1, size // run))
    last = int(shape[-1]) if len(shape) else 1
    while last > 1 and math.gcd(stride, last) != 1:
        stride += 1
    first = (stride - run) // 2
    return first, stride, (n - first - run) // stride + 1, run


def sampled_positions(plan: tuple[int, int, int, int]) -> np.ndarray:
    """The flat indices a plan samples, in order."""
    first, stride, blocks, run = plan
    return (first + stride * np.arange(blocks)[:, None] + np.arange(run)[None, :]).reshape(-1)


class WeightSample:
    """The sampled elements of a fixed list of arrays at the last check and now, with one call per check."""

    def __init__(self, arrays: Sequence[np.ndarray], *, size: int, rtol: float, atol: float,
                 ratio_gt: Optional[float] = None) -> None:
        self.size = int(size)
        self.rtol, self.atol, self.ratio_gt = float(rtol), float(atol), ratio_gt
        plans = [sample_plan(a.shape, self.size) for a in arrays]
        self.sizes = np.array([a.size for a in arrays], dtype=np.int64)
        self.first = np.array([p[0] for p in plans], dtype=np.int64)
        self.strides = np.array([p[1] for p in plans], dtype=np.int64)
        self.blocks = np.array([p[2] for p in plans], dtype=np.int64)
        self.runs = np.array([p[3] for p in plans], dtype=np.int64)
        self.counts = self.blocks * self.runs
        self.whole = self.counts == self.sizes          # sampled whole: the sample's verdicts are exact
        ends = np.cumsum(self.counts)
        self.starts = ends - self.counts
        all_float32 = all(a.dtype == np.float32 for a in arrays)
        self._kernels = kernels() if all_float32 else None
        dtype = np.float32 if self._kernels is not None else np.float64
        self._previous = np.empty(int(ends[-1]), dtype)
        self._current = np.empty_like(self._previous)
        self._table = np.zeros((6, len(plans)), dtype=np.int64)
        if self._kernels is not None:
            k = self._kernels
            self._table[k.SAMPLE_SIZE], self._table[k.SAMPLE_FIRST] = self.sizes, self.first
            self._table[k.SAMPLE_STRIDE], self._table[k.SAMPLE_BLOCKS] = self.strides, self.blocks
            self._table[k.SAMPLE_RUN] = self.runs
            self._out = np.zeros((k.SAMPLE_ROWS, len(plans)))
        self._positions = [sampled_positions(plan) for plan in plans]   # the numpy path's gather
        self._key: tuple = ()
        self._arrays: list[np.ndarray] = []
        self._arrays_given: Optional[Sequence[np.ndarray]] = None
        self._gather(arrays, self._previous)

    def check(self, arrays: Sequence[np.ndarray]) -> Optional[SampleVerdict]:
        """Gather the sample of ``arrays`` now and measure it against the last check's; None when no array may
        hit (the healthy step's answer: one kernel call). The sample now becomes the one to compare with next."""
        try:
            if self._kernels is not None and self._addresses(arrays):
                k, out = self._kernels, self._out
                ratio = -1.0 if self.ratio_gt is None else float(self.ratio_gt)
                if not k.sample_weights(self._table, self._current, self._previous, self.rtol, self.atol, ratio,
                                        EPSILON, out):
                    return None
                return self._verdict(out[k.SAMPLE_UNCHANGED] > 0, out[k.SAMPLE_CHANGE],
                                     out[k.SAMPLE_PREVIOUS_ABS], out[k.SAMPLE_NOT_FINITE])
            return self._check_numpy(arrays)
        finally:
            self._previous, self._current = self._current, self._previous

    # -- internals -------------------------------------------------------------------------------------------------
    def _addresses(self, arrays: Sequence[np.ndarray]) -> bool:
        """Whether ``arrays`` can go to the kernel (float32, C-contiguous, the sizes planned), their addresses set;
        worked out again only when other array objects come (views of live weights come back the same)."""
        if arrays is self._arrays_given:      # ``ParameterViews`` hands back its list while no storage moved
            return True
        key = tuple(map(id, arrays))
        if key == self._key:
            self._arrays_given = arrays
            return True
        arrays = [np.asarray(a) for a in arrays]
        if len(arrays) != len(self.sizes) or not all(
                a.dtype == np.float32 and a.flags.c_contiguous and a.size == n
                for a, n in zip(arrays, self.sizes.tolist())):
            self._key, self._arrays, self._arrays_given = (), [], None
            return False
        self._table[self._kernels.SAMPLE_ADDRESS] = [array_address(a) for a in arrays]
        self._key, self._arrays = key, arrays          # held while their addresses are in the table
        self._arrays_given = None                      # a copy of the list: this identity check cannot hold
        return True

    def _gather(self, arrays: Sequence[np.ndarray], into: np.ndarray) -> None:
        for index, array in enumerate(arrays):
            start, count = int(self.starts[index]), int(self.counts[index])
            into[start:start + count] = np.asarray(array).reshape(-1)[self._positions[index]]

    def _check_numpy(self, arrays: Sequence[np.ndarray]) -> Optional[SampleVerdict]:
        """The kernel's measurements with numpy (numba missing, or arrays it does not take)."""
        self._gather(arrays, self._current)
        with np.errstate(invalid="ignore", over="ignore"):
            current, previous = self._current.astype(np.float64), self._previous.astype(np.float64)
            difference = np.abs(current - previous)
            close = difference <= np.abs(previous) * self.rtol + self.atol
            unchanged = np.logical_and.reduceat(close, self.starts)
            change = np.add.reduceat(difference, self.starts)
            previous_abs = np.add.reduceat(np.abs(previous), self.starts)
            not_finite = np.add.reduceat(~np.isfinite(current), self.starts).astype(np.float64)
            too_large = (np.zeros(len(self.sizes), bool) if self.ratio_gt is None
                         else change > self.ratio_gt * (previous_abs + EPSILON * self.counts))
        if not (unchanged.any() or not_finite.any() or too_large.any()):
            return None
        return self._verdict(unchanged, change, previous_abs, not_finite)

    def _verdict(self, unchanged: np.ndarray, change: np.ndarray, previous_abs: np.ndarray,
                 not_finite: np.ndarray) -> SampleVerdict:
        """Per-array numbers of a check that may hit (rare: read from the buffers, not kept by the kernel). Runs
        before the buffers swap: ``_current`` is now, ``_previous`` the last check."""
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            ratio = change / (previous_abs + EPSILON * self.counts)
            moves = np.abs(self._current.astype(np.float64) - self._previous.astype(np.float64))
            max_change = np.maximum.reduceat(moves, self.starts)
        return SampleVerdict(np.asarray(unchanged, bool), ratio, np.asarray(not_finite), max_change)
