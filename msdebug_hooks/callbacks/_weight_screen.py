"""A cheap first look at every weight at once, so ``WeightMonitor`` can afford to check every step.

Calling the watchpoint engine on every parameter costs a full statistics pass per parameter and a fixed cost per
call; a 25 M-parameter transformer has over 200 tensors and 100 MB of weights. Instead the screen copies the
parameters into one flat buffer (the copy is needed anyway: on CPU ``asnumpy`` is a view of the live weights,
and the next step compares with it) and, while each cache-sized group of it is still in the CPU cache, takes what
it needs from it. From that it flags the parameters that *might* hit a condition, with margins so that it never
misses one the engine would report; only those go to the engine (``check_tensors``), which has the final word and
supplies the values reported. A healthy step calls it never, and costs about one copy of the weights.

The bounds, for a parameter with previous value p and current value x (n elements):
* unchanged needs every |x-p| <= atol + rtol*|p| (the engine compares in float64). A few sampled elements that break
  this, computed the same way in float64 with a margin, rule it out; a weight that trains breaks it almost
  everywhere. Parameters no sample rules out get the full bound: max|x-p| > atol + rtol*max|p| rules it out.
* change too large is mean|x-p| / (mean|p| + 1e-9) > ratio, i.e. sum|x-p| > ratio * (sum|p| + 1e-9 n);
* NaN/Inf: ``isfinite`` over each group while it is in the cache (no BLAS: OpenBLAS would spread a dot over threads,
  and switching that off around the call costs more than the test itself).
float32 rounding of x-p is at most 2**-24 relative and the sums are numpy's pairwise ones per piece of at most 128 K
elements, added in float64: the margins below cover both.

With the compiled statistics engine (numba) and float32 weights, one kernel call (``_step_kernels.screen_weights``) does
all of it: per array it copies, counts NaN/Inf, and tests allclose exactly (float64, the engine's formula, with the
margin) until the first element that moves, plus the sums when asked, block by block while each is in L1. A LeNet
step's check is then one call instead of a dozen numpy calls and a Python loop over samples.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from msdebug_hooks.conditions._engine import array_address, kernels

_UNCHANGED_MARGIN = 1.0 + 1e-5   # loosen "could be unchanged" by far more than float32 rounding of x-p
_RATIO_MARGIN = 1.0 - 1e-4       # loosen "could be too large" likewise for the pairwise sums
_EPSILON = 1e-9                  # the engine's update-ratio epsilon
GROUP_BYTES = 512 * 1024         # half of a 1 MB L2 (measured best here): a group is copied, then read from the cache
SAMPLES = 16                     # elements per parameter compared exactly to rule "unchanged" out


class WeightScreen:
    """Flat copies of the previous and current values of a fixed list of arrays, and per-array bounds.

    ``rtol``/``atol`` as the engine's unchanged condition; ``ratio_gt`` the update-ratio threshold (None: not
    checked, and the sums it needs are not computed); ``finite``: also flag NaN/Inf.
    """

    def __init__(self, arrays: Sequence[np.ndarray], *, rtol: float, atol: float, ratio_gt: float | None = None,
                 finite: bool = True) -> None:
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        if not len(sizes) or np.any(sizes == 0):
            raise ValueError("WeightScreen needs a non-empty list of non-empty arrays")
        self.rtol, self.atol, self.ratio_gt, self.finite = float(rtol), float(atol), ratio_gt, finite
        self.shapes = [a.shape for a in arrays]
        ends = np.cumsum(sizes)
        self.starts = ends - sizes
        self.sizes = sizes
        self._bounds = list(zip(self.starts.tolist(), ends.tolist()))
        self.dtype = np.result_type(np.float32, *[a.dtype for a in arrays])
        total = int(ends[-1])
        self._prev = np.empty(total, self.dtype)
        self._cur = np.empty(total, self.dtype)
        group = max(1, GROUP_BYTES // self.dtype.itemsize)
        self._groups = _groups(self._bounds, group)
        self._finite = np.empty(group, bool)
        self._work = np.empty(group, self.dtype) if ratio_gt is not None else None
        # SAMPLES flat indices per array, evenly spread from its first element (repeated for tiny arrays)
        self._samples = self.starts[:, None] + (np.arange(SAMPLES)[None, :] * sizes[:, None]) // SAMPLES
        self._rtol_margin, self._atol_margin = self.rtol * _UNCHANGED_MARGIN, self.atol * _UNCHANGED_MARGIN
        self._sources_key: tuple = ()
        self._sources: list[list[np.ndarray]] = []
        self._kernels = kernels() if self.dtype == np.float32 else None
        self._compiled_key: tuple = ()
        self._compiled_sources: list[np.ndarray] = []      # kept alive while their addresses are in use
        self._compiled_sources_table = np.stack([np.zeros(len(sizes), np.int64), sizes])   # addresses, sizes
        self._compiled_out = np.zeros((self._kernels.SCREEN_ROWS, len(sizes))) if self._kernels else None
        self._cur_abs_sum = self._prev_abs_sum = self._change_sum = None
        with np.errstate(invalid="ignore", over="ignore"):
            self._load(arrays, self._prev, with_sums=False)
        self._prev_abs_sum = self._cur_abs_sum

    def _group_sources(self, arrays: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
        """Per group, the slices of ``arrays`` it is made of; kept while the same array objects come back (views of
        the live weights do, step after step)."""
        key = tuple(map(id, arrays))
        if key != self._sources_key:
            arrays = [np.asarray(a) for a in arrays]
            flats = [a.reshape(-1) for a in arrays]
            self._sources = [[flats[index][lo:hi] for index, lo, hi, _, _ in pieces] for _, _, pieces in self._groups]
            # the slices keep the arrays alive, so their ids cannot be reused meanwhile; a non-contiguous array
            # flattens to a copy, which must be made again next time
            self._sources_key = key if all(a.flags.c_contiguous for a in arrays) else ()
        return self._sources

    def _load(self, arrays: Sequence[np.ndarray], into: np.ndarray, *, with_sums: bool = True) -> list[int]:
        """Copy ``arrays`` into ``into`` group by group; the arrays that may hold NaN/Inf. While a group is in the
        cache: the NaN/Inf test and, with ``ratio_gt``, sum|x| (and sum|x-p| when ``with_sums``)."""
        suspects: list[int] = []
        ratio = self.ratio_gt is not None
        abs_sum = np.zeros(len(self.sizes)) if ratio else None
        change_sum = np.zeros(len(self.sizes)) if ratio and with_sums else None
        finite = self._finite if self.finite else None
        for (start, end, pieces), sources in zip(self._groups, self._group_sources(arrays)):
            group = into[start:end]
            np.concatenate(sources, out=group, casting="same_kind")
            if finite is not None:
                flags = np.isfinite(group, out=finite[:end - start])
                if not np.logical_and.reduce(flags):
                    suspects += [index for index, _, _, at, to in pieces if not flags[at:to].all()]
            if ratio:
                work = self._work[:end - start]
                _add_piece_sums(abs_sum, np.abs(group, out=work), pieces)
                if change_sum is not None:
                    np.subtract(group, self._prev[start:end], out=work)
                    _add_piece_sums(change_sum, np.abs(work, out=work), pieces)
        self._cur_abs_sum, self._change_sum = abs_sum, change_sum
        return suspects

    def screen(self, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Copy ``arrays`` in as the current values; per array, a bool mask of the conditions it might hit:
        ``unchanged``, ``change_too_large`` (when ``ratio_gt``), ``nan_or_inf`` (when ``finite``)."""
        masks = {}
        for kind, flagged in self.flag(arrays).items():
            masks[kind] = np.zeros(len(self.sizes), bool)
            masks[kind][flagged] = True
        return masks

    def suspects(self, arrays: Sequence[np.ndarray]) -> list[int]:
        """``screen`` as the sorted indices of the arrays that might hit any condition (what a check needs)."""
        if self._kernels is not None and self._compiled_ready(arrays):
            if not self._screen_compiled():      # a healthy step: one kernel call and this test
                return []
            flagged = self._flags_compiled().values()
        else:
            flagged = self.flag(arrays).values()
        return sorted(set().union(*flagged)) if any(flagged) else []

    def flag(self, arrays: Sequence[np.ndarray]) -> dict[str, list[int]]:
        """``screen`` as index lists: a handful of Python objects instead of numpy masks (every call counts in a
        small network's short step)."""
        if self._kernels is not None and self._compiled_ready(arrays):
            self._screen_compiled()
            return self._flags_compiled()
        if self.ratio_gt is None:         # copies and isfinite: nothing here can raise a floating-point warning
            not_finite = self._load(arrays, self._cur)
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                not_finite = self._load(arrays, self._cur)
        flagged = {"unchanged": self._maybe_unchanged()}
        if self.ratio_gt is not None:
            if self._prev_abs_sum is None:   # the previous check ran compiled: sum |p| here, in float64
                self._prev_abs_sum = np.add.reduceat(np.abs(self._prev, dtype=np.float64), self.starts)
            with np.errstate(invalid="ignore", over="ignore"):
                too_large = self._change_sum > self.ratio_gt * (self._prev_abs_sum + _EPSILON * self.sizes) * \
                    _RATIO_MARGIN
            flagged["change_too_large"] = too_large.nonzero()[0].tolist()
        if self.finite:
            flagged["nan_or_inf"] = not_finite
        return flagged

    def _compiled_ready(self, arrays: Sequence[np.ndarray]) -> bool:
        """Whether ``arrays`` can go to the kernel (float32, C-contiguous, the sizes given at construction), their
        addresses set; worked out again only when other array objects come."""
        key = tuple(map(id, arrays))
        if key == self._compiled_key:
            return True
        arrays = [np.asarray(a) for a in arrays]
        if len(arrays) != len(self.sizes) or not all(
                a.dtype == np.float32 and a.flags.c_contiguous and a.size == size
                for a, size in zip(arrays, self.sizes.tolist())):
            self._compiled_key, self._compiled_sources = (), []
            return False
        self._compiled_sources_table[0] = [array_address(a) for a in arrays]
        self._compiled_key, self._compiled_sources = key, arrays
        return True

    def _screen_compiled(self) -> int:
        """The kernel's pass (copy into the current buffer, measure, flag); how many arrays it flagged."""
        self._cur_abs_sum = None      # not summed here; the numpy path sums the previous values itself if it runs
        ratio = -1.0 if self.ratio_gt is None else self.ratio_gt * _RATIO_MARGIN
        return self._kernels.screen_weights(self._compiled_sources_table, self._cur, self._prev, self._rtol_margin,
                                            self._atol_margin, ratio, _EPSILON, self.finite, self._compiled_out)

    def _flags_compiled(self) -> dict[str, list[int]]:
        k, out = self._kernels, self._compiled_out
        flagged = {"unchanged": np.flatnonzero(out[k.SCREEN_UNCHANGED]).tolist()}
        if self.ratio_gt is not None:
            flagged["change_too_large"] = np.flatnonzero(out[k.SCREEN_TOO_LARGE]).tolist()
        if self.finite:
            flagged["nan_or_inf"] = np.flatnonzero(out[k.SCREEN_NOT_FINITE]).tolist()
        return flagged

    def _maybe_unchanged(self) -> list[int]:
        """The arrays in which no sampled element moved beyond (atol + rtol*|p|) * margin, in float64 (NaN never
        rules out), and the full bound did not rule it out either. The samples are compared as Python floats
        (float64): a weight that trains shows a move at its first sample or two, so this loop is shorter than the
        dozen numpy calls it replaces."""
        rtol, atol = self._rtol_margin, self._atol_margin
        maybe = []
        for index, (now, before) in enumerate(zip(self._cur[self._samples].tolist(),
                                                  self._prev[self._samples].tolist())):
            for x, p in zip(now, before):
                if abs(x - p) > atol + rtol * abs(p):
                    break
            else:                                         # no sample moved: the full bound decides
                start, end = self._bounds[index]
                current, previous = self._cur[start:end], self._prev[start:end]
                with np.errstate(invalid="ignore", over="ignore"):
                    change_max = np.max(np.abs(current - previous))
                    if change_max <= (self.atol + self.rtol * np.max(np.abs(previous))) * _UNCHANGED_MARGIN:
                        maybe.append(index)
        return maybe

    def previous(self, index: int) -> np.ndarray:
        start, end = self._bounds[index]
        return self._prev[start:end].reshape(self.shapes[index])

    def current(self, index: int) -> np.ndarray:
        start, end = self._bounds[index]
        return self._cur[start:end].reshape(self.shapes[index])

    def load(self, arrays: Sequence[np.ndarray]) -> None:
        """Copy ``arrays`` in as the previous values, with no check: the start of an exact one-step check that
        ``WeightMonitor``'s sampled mode runs now and then (the next ``suspects`` compares with these)."""
        with np.errstate(invalid="ignore", over="ignore"):
            self._load(arrays, self._prev, with_sums=False)
        self._prev_abs_sum = self._cur_abs_sum

    def commit(self) -> None:
        """The current values become the previous ones (buffers swap; nothing is copied)."""
        self._prev, self._cur = self._cur, self._prev
        self._prev_abs_sum = self._cur_abs_sum


def _groups(bounds: list[tuple[int, int]], size: int) -> list[tuple[int, int, list[tuple[int, ...]]]]:
    """The flat buffer cut into consecutive groups of at most ``size`` elements: (start, end, pieces), a piece being
    (array index, start, end within the array, start, end within the group) of the part of one array inside the
    group. Large arrays span several groups."""
    groups, pieces, group_start = [], [], 0
    for index, (start, end) in enumerate(bounds):
        lo = start
        while lo < end:
            hi = min(end, group_start + size)
            pieces.append((index, lo - start, hi - start, lo - group_start, hi - group_start))
            lo = hi
            if hi - group_start == size:
                groups.append((group_start, hi, pieces))
                pieces, group_start = [], hi
    if pieces:
        groups.append((group_start, bounds[-1][1], pieces))
    return groups


def _add_piece_sums(totals: np.ndarray, values: np.ndarray, pieces: list[tuple[int, ...]]) -> None:
    """Add each piece's sum of ``values`` (one group) to its array's total: numpy's pairwise sum per piece."""
    for index, _, _, at, to in pieces:
        totals[index] += np.add.reduce(values[at:to])
