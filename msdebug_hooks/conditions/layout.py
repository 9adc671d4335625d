"""A prepared batch layout: the parts of ``find_hits``' statistics pass that do not change from step to step.

Why: a debugger or analyzer checks the same tensors (same shapes and dtypes, usually the same buffers to keep the
values in) with the same conditions every step. For a step of a few small tensors, sorting the tensors into the
kernel's layout again (dtype kinds, segment starts, which tensors are large, state arrays, concatenation buffers,
the keep-buffer checks) costs several times what the compiled kernels take. A layout is built once per (statistics
request, values' dtypes and shapes, previous values' dtypes and shapes, keep buffers) and only filled on later
calls; it sits behind the compiled engine (``statistics_engine.CompiledEngine.prepared_layout``).

Validation on every call: the signature (each value's and previous value's type, dtype and shape; each keep
buffer's identity, dtype and shape) is the cache key, and a keep buffer must still be the same object and writable.
Nothing derived from a value's or previous value's data is kept: their flat views are taken again on every call,
so an array whose data moved is read where it is now. A call the layout does not serve (another engine, a value
that is not a numpy array of a common dtype, a large tensor whose previous value has another precision, a layout
in use by another thread) takes the general path (``batch.batch_totals``), which gives the same totals.
"""
from __future__ import annotations

import threading
import weakref
from types import ModuleType
from typing import Any, NamedTuple, Sequence

import numpy as np

from msdebug_hooks.conditions._dtypes import KIND_BY_DTYPE, dtype_text, work_dtype
from msdebug_hooks.conditions._engine import array_address
from msdebug_hooks.conditions.compiled import NOWHERE, int_view, native, pass_mode, range_bounds, tolerance_array
from msdebug_hooks.conditions.kept import kept_views
from msdebug_hooks.conditions.rules import JudgingRule, RuleTables, compiled_rules
from msdebug_hooks.conditions.state import BatchTotals, Descriptions, State, group_bounds
from msdebug_hooks.conditions.tensor_statistics import SMALL_TENSOR, UPDATE_RATIO_EPSILON
from msdebug_hooks.conditions.totals import StatisticsRequest
from msdebug_hooks.errors import ConfigError

_CACHE: dict[tuple, "PreparedLayout | None"] = {}   # signature -> layout (None: such calls take the general path)
_CACHE_SIZE = 16                                     # a debugger alternates two keep buffers: two layouts a set
_MISSING: Any = object()
_ARRAYS = frozenset({np.ndarray})
_ARRAYS_OR_NONE = frozenset({np.ndarray, type(None)})


def prepared_layout(k: ModuleType, request: StatisticsRequest, values: list, prevs: list,
                    targets: list | None) -> "PreparedLayout | None":
    """The layout for this call, locked for the caller (``release`` it), or None for the general path."""
    signature = _signature(values, prevs, targets)
    if signature is None:
        return None
    key = (request, signature)
    layout = _CACHE.get(key, _MISSING)
    if layout is None:
        return None
    if layout is _MISSING or not layout.keeps_into(targets):   # new, or an id reused by another keep buffer
        try:
            layout = PreparedLayout(k, request, values, prevs, targets)
        except ConfigError:        # a keep buffer that does not fit: the general path names it
            return None
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = layout if layout.servable else None
        if not layout.servable:
            return None
    return layout if layout.lock.acquire(blocking=False) else None


def _signature(values: list, prevs: list, targets: list | None) -> tuple | None:
    """What a layout depends on, or None when some entry is not a numpy array (or None where allowed)."""
    if len(prevs) != len(values) or not _ARRAYS.issuperset(map(type, values)) \
            or not _ARRAYS_OR_NONE.issuperset(map(type, prevs)):
        return None
    kept: tuple | None = None
    if targets is not None:
        if len(targets) != len(values) or not _ARRAYS_OR_NONE.issuperset(map(type, targets)):
            return None
        kept = tuple([None if t is None else (id(t), t.dtype, t.shape) for t in targets])
    return (tuple([(v.dtype, v.shape) for v in values]),
            tuple([None if p is None else (p.dtype, p.shape) for p in prevs]), kept)


class _LayoutTotals(BatchTotals):
    """``BatchTotals`` whose per-tensor descriptions never change: their arrays are made once instead of on every
    call."""

    count = has_previous = paired = None     # plain attributes here, set by ``freeze`` (properties in the base)

    def freeze(self) -> None:
        self.count = np.array(self.counts_list, np.int64)
        self.has_previous = np.array(self.has_previous_list, np.bool_)
        self.paired = np.array(self.paired_list, np.bool_)
        self._descriptions = super().descriptions()

    def descriptions(self) -> Descriptions:
        return self._descriptions


class _LargeTensor(NamedTuple):
    """A tensor of a layout summed on its own: its row, the range bounds and empty keep buffer of its work dtype,
    whether its keep buffer is filled in the pass, and its state row in the layout's totals."""

    index: int
    bounds: np.ndarray
    nowhere: np.ndarray
    fused: bool
    state: State


class _Group:
    """Consecutive small tensors summed by one ``accumulate_segments`` call straight into their rows of the
    layout's ``BatchTotals`` (a large tensor between them is an empty segment, which the kernel skips), with the
    concatenation buffers made once."""

    def __init__(self, found: BatchTotals, indices: list[int], sizes: list[int], paired: list[bool]) -> None:
        first, last = indices[0], indices[-1] + 1
        small = set(indices)
        self.indices = indices
        self.starts = np.zeros(last - first + 1, np.int64)
        np.cumsum([sizes[i] if i in small else 0 for i in range(first, last)], out=self.starts[1:])
        total = int(self.starts[-1])
        self.buf = np.empty(total)
        self.bits = self.buf.view(np.int64)
        self.paired = np.array([paired[i] and i in small for i in range(first, last)], np.bool_)
        self.any_paired = bool(self.paired.any())
        self.pbuf = np.zeros(total) if self.any_paired else self.buf[:0]
        self.zeros = [None if paired[i] else np.zeros(sizes[i]) for i in indices]   # unpaired: zeros, as before
        self.fstate, self.istate, self.counts = found.rows(first, last)


class PreparedLayout:
    """One batch's kernel layout and its reusable ``BatchTotals``; ``fill`` runs the pass for a matching call."""

    def __init__(self, k: ModuleType, request: StatisticsRequest, values: list, prevs: list,
                 targets: list | None) -> None:
        self.k = k
        ranges, tolerances, wants_previous = request.ranges, request.tolerances, request.wants_previous
        self.lock = threading.Lock()
        # the keep buffers are the caller's: only weak references here, so a cached layout never keeps a finished
        # session's copies (possibly the size of the model) alive; ``fill`` takes them from the call
        keep = kept_views(values, targets, "keep_into")
        self.targets = None if targets is None else [None if t is None else weakref.ref(t) for t in targets]
        self.mode = pass_mode(k, request.needed)
        self.tolerance_array = tolerance_array(tolerances)
        self.bounds64 = range_bounds(ranges, np.dtype(np.float64))
        self.bounds32 = range_bounds(ranges, np.dtype(np.float32))
        small_sizes = [v.size for v in values if v.size <= SMALL_TENSOR]
        self.scratch = np.empty(max(small_sizes, default=0))            # small float32 tensors, as float64
        self.previous_scratch = np.empty(max(small_sizes, default=0))
        found = self.found = _LayoutTotals(len(values), request)
        self.start_row = found.fstate[0].copy() if len(values) else None
        self.paired = [False] * len(values)
        self.large: list[_LargeTensor] = []
        small: list[int] = []
        self.servable = True
        for index, (value, prev) in enumerate(zip(values, prevs)):
            kind = KIND_BY_DTYPE.get(value.dtype)
            prev_kind = KIND_BY_DTYPE.get(prev.dtype) if prev is not None else None
            if kind is None or (prev is not None and wants_previous and prev_kind is None):
                self.servable = False        # a dtype the general path converts or refuses
                return
            n = value.size
            paired = self.paired[index] = prev is not None and wants_previous and prev.size == n
            found.describe(index, n, dtype_text(value, kind), prev is not None, paired)
            if n <= SMALL_TENSOR:
                small.append(index)
            elif kind in ("f4", "f8") and (not paired or prev_kind == kind):
                fused = keep[index] is not None and keep[index] is native(keep[index])
                self.large.append(_LargeTensor(index, range_bounds(ranges, work_dtype(kind)),
                                               NOWHERE[work_dtype(kind)], fused, found.row(index)))
            else:
                self.servable = False        # converted chunk by chunk: the general path does it
                return
        sizes = [value.size for value in values]
        self.groups = [_Group(found, small[a:b], sizes, self.paired)
                       for a, b in group_bounds([sizes[i] for i in small])]
        found.freeze()
        self.all_float32 = bool(values) and all(v.dtype == np.float32 for v in values) and all(
            not paired or p.dtype == np.float32 for p, paired in zip(prevs, self.paired))
        self._addressed: dict[tuple, Any] = {}       # the arrays' identities -> their address table
        self._seen: set[tuple] = set()               # identities met once: a table is made when one comes back
        self._rule_tables: dict[int, tuple[list[JudgingRule], RuleTables]] = {}   # id(rules) -> (rules, tables)
        self._marked: dict[int, np.ndarray] = {}     # number of conditions -> the marks array

    def reportable_pairs(self, rules: list[JudgingRule]) -> list[list[int]]:
        """[tensor, condition] of the pairs that may be reportable after ``fill``, judged by one compiled call
        (``_step_kernels.mark_reportable``: a superset of ``judging.reportable_pairs``, which the exact evaluation of
        each pair narrows); [] on a step without a hit, which is the whole judging then. The rules' tables are made
        once per condition list."""
        tables = self._rule_tables.get(id(rules))
        if tables is None or tables[0] is not rules:
            if len(self._rule_tables) >= 8:
                self._rule_tables.clear()
            tables = self._rule_tables[id(rules)] = (rules, compiled_rules(self.k, rules, self.found.ranges,
                                                                           self.found.tolerances))
        conditions, comparisons, limits = tables[1]
        found = self.found
        marked = self._marked.get(len(rules))
        if marked is None:
            marked = self._marked[len(rules)] = np.empty((found.size, len(rules)), np.bool_)
        if not self.k.mark_reportable(found.fstate, found.istate, found.counts, found.count, len(found.ranges),
                                      found.has_previous, found.paired, conditions, comparisons, limits,
                                      UPDATE_RATIO_EPSILON, marked):
            return []
        return np.argwhere(marked).tolist()

    def _address_table(self, values: Sequence[Any], prevs: Sequence[Any],
                       targets: Sequence[Any] | None) -> np.ndarray | None:
        """``fill_float32``'s table for these arrays, or None when one of them cannot be read by address (not
        C-contiguous, aligned and native), or when these arrays come for the first time. Kept per identity of the
        arrays: the debugger passes the same views and two alternating keep buffers every step, so its identities
        come back; arrays read anew every call (a dump's files) never do and never pay for a table. An entry holds
        the arrays by weak reference only, and is dropped the moment one of them dies (a weak reference's
        callback), so an id in a key always names the array that was measured."""
        key = (tuple(map(id, values)), tuple(map(id, prevs)), None if targets is None else tuple(map(id, targets)))
        entry = self._addressed.get(key)
        if entry is not None:
            return entry[1]
        if key not in self._seen:     # an id met again later may be another array: the table is measured then
            if len(self._seen) >= 8:
                self._seen.clear()
            self._seen.add(key)
            return None
        arrays = [*values, *[p for p, paired in zip(prevs, self.paired) if paired],
                  *[t for t in targets or () if t is not None]]
        if not all(a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative for a in arrays):
            return None
        table = np.zeros((len(values), self.k.FILL_COLUMNS), np.int64)
        for j, (value, prev) in enumerate(zip(values, prevs)):
            keep = None if targets is None else targets[j]
            table[j] = (array_address(value), array_address(prev) if self.paired[j] else 0,
                        0 if keep is None else array_address(keep), value.size, value.size > SMALL_TENSOR,
                        self.paired[j])
        if len(self._addressed) >= 4:
            self._addressed.clear()
        entries = self._addressed

        def forget(_: Any) -> None:
            entries.pop(key, None)

        refs = [weakref.ref(a, forget) for a in (*values, *prevs, *(targets or ())) if a is not None]
        entries[key] = (refs, table)
        return table

    def keeps_into(self, targets: list | None) -> bool:
        """Whether ``targets`` are the very keep buffers this layout was built for, still writable."""
        if targets is None:
            return self.targets is None
        mine = self.targets
        return mine is not None and all((t is None and m is None) or (m is not None and t is m() and t.flags.writeable)
                                        for t, m in zip(targets, mine))

    def release(self) -> None:
        self.lock.release()

    def fill(self, values: Sequence[Any], prevs: Sequence[Any], targets: Sequence[Any] | None) -> BatchTotals:
        """The batch's totals for this call (the same object each call: read it before releasing the layout);
        ``targets``: the keep buffers ``keeps_into`` accepted."""
        k, found = self.k, self.found
        if self.all_float32:
            table = self._address_table(values, prevs, targets)
            if table is not None:    # the same arrays as on an earlier call: one kernel call does it all
                k.fill_float32(table, self.mode, self.bounds32, self.bounds64, self.tolerance_array, self.scratch,
                               self.previous_scratch, self.start_row, found.fstate, found.istate, found.counts)
                return found
        keep = [None] * len(values) if targets is None else [None if t is None else t.reshape(-1) for t in targets]
        if self.start_row is not None:
            found.fstate[:] = self.start_row
            found.istate.fill(0)
            found.counts.fill(0)
        for index, bounds, nowhere, fused, (fstate, istate, counts) in self.large:   # rows of ``found``
            keep_into = keep[index] if fused else nowhere
            x = native(values[index].ravel())
            prev = native(prevs[index].ravel()) if self.paired[index] else x[:0]
            k.accumulate(x, int_view(x), prev, self.mode, self.paired[index], bounds, self.tolerance_array,
                         fstate, istate, counts, keep_into)
            if keep[index] is not None and not fused:
                np.copyto(keep[index], x.view(keep[index].dtype))
        for group in self.groups:
            parts = [values[i].ravel() for i in group.indices]
            np.concatenate(parts, out=group.buf, casting="unsafe")
            if group.any_paired:
                np.concatenate([prevs[i].ravel() if z is None else z for i, z in zip(group.indices, group.zeros)],
                               out=group.pbuf, casting="unsafe")
            k.accumulate_segments(group.buf, group.bits, group.pbuf, group.starts, group.paired, self.mode,
                                  self.bounds64, self.tolerance_array, group.fstate, group.istate, group.counts)
            for index, part in zip(group.indices, parts):
                if keep[index] is not None:   # after the pass: a keep buffer may be the previous value itself
                    keep[index][...] = part   # (same dtype: a plain copy, cheaper than np.copyto)
        return found


__all__ = ["PreparedLayout", "prepared_layout"]
