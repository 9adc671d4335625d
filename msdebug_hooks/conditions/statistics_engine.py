"""The one interface every statistics caller goes through, and its two engines: compiled (numba) and numpy.

Why: the statistics are computed four ways (numpy over chunks, numpy over segments, the compiled pass over one
tensor, the compiled pass over segments), and a prepared layout (``layout``) speeds up a batch checked every step.
``compute_statistics``, ``compute_statistics_batch``, ``check_tensors`` and ``find_hits`` ask ``current_engine()``
(the engine ``_engine`` chose) for one tensor's totals, a batch's rows, or a prepared layout, and never choose a
route themselves. Both engines fill the same ``Totals`` / state rows, which ``totals.finish`` reads.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from types import ModuleType

import numpy as np

from msdebug_hooks.conditions import _engine, compiled
from msdebug_hooks.conditions.layout import PreparedLayout, prepared_layout
from msdebug_hooks.conditions.numpy_chunks import chunk_totals
from msdebug_hooks.conditions.numpy_segments import segments_into
from msdebug_hooks.conditions.state import BatchTotals, Segments, new_state, totals_of, write_row
from msdebug_hooks.conditions.totals import StatisticsRequest, TensorTotals, Totals


class StatisticsEngine(ABC):
    """Totals of one tensor or of a batch's segments. Every method takes a flat tensor as (array, kind) pairs
    (``_dtypes.flat_kind``; converted dtypes are converted by the engine, exactly), and a paired previous value
    (same element count) or None."""

    @abstractmethod
    def tensor_totals(self, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                      request: StatisticsRequest, chunk: int, keep_into: np.ndarray | None = None) -> TensorTotals:
        """One tensor's totals, read ``chunk`` elements at a time where it is converted; ``keep_into`` (a flat
        writable array of the tensor's dtype) may receive the tensor in the same pass (``kept`` says so)."""

    def totals_into(self, found: BatchTotals, index: int, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None,
                    prev_kind: str | None, chunk: int, keep_into: np.ndarray | None = None) -> bool:
        """``tensor_totals`` into row ``index`` of a batch (a large tensor of it); returns whether it was kept."""
        found_totals = self.tensor_totals(flat, kind, prev_flat, prev_kind, found.request, chunk, keep_into)
        write_row(found_totals.totals, found.row(index), len(found.ranges))
        return found_totals.kept

    @abstractmethod
    def segments_into(self, found: BatchTotals, segments: Segments) -> None:
        """Every segment's totals (a group of a batch's small tensors) into its row of ``found``."""

    def prepared_layout(self, request: StatisticsRequest, values: list, prevs: list,
                        targets: list | None) -> PreparedLayout | None:
        """A layout prepared on an earlier call with the same signature (locked: ``release`` it), or None for the
        general path (``batch.batch_totals``)."""
        return None


class NumpyEngine(StatisticsEngine):
    """numpy's chunked pass (``numpy_chunks``) and segment reductions (``numpy_segments``)."""

    def tensor_totals(self, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                      request: StatisticsRequest, chunk: int, keep_into: np.ndarray | None = None) -> TensorTotals:
        return TensorTotals(chunk_totals(flat, kind, prev_flat, prev_kind, request, chunk), False)

    def segments_into(self, found: BatchTotals, segments: Segments) -> None:
        segments_into(found, segments)


class CompiledEngine(StatisticsEngine):
    """The compiled pass (``compiled`` drives the kernels module ``k``), and the prepared layouts behind it."""

    def __init__(self, k: ModuleType) -> None:
        self.k = k

    def tensor_totals(self, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None, prev_kind: str | None,
                      request: StatisticsRequest, chunk: int, keep_into: np.ndarray | None = None) -> TensorTotals:
        if not flat.shape[0]:      # nothing to hand the kernels: the totals of no element
            return TensorTotals(Totals.empty(len(request.ranges), len(request.tolerances)), False)
        fstate, istate, counts = state = new_state(n_counts=len(request.ranges) + len(request.tolerances))
        kept = compiled.tensor_into(self.k, state, flat, kind, prev_flat, prev_kind, request, chunk, keep_into)
        return TensorTotals(totals_of(fstate.tolist(), istate.tolist(), counts.tolist(), len(request.ranges)), kept)

    def totals_into(self, found: BatchTotals, index: int, flat: np.ndarray, kind: str, prev_flat: np.ndarray | None,
                    prev_kind: str | None, chunk: int, keep_into: np.ndarray | None = None) -> bool:
        return compiled.tensor_into(self.k, found.row(index), flat, kind, prev_flat, prev_kind, found.request, chunk,
                                    keep_into)

    def segments_into(self, found: BatchTotals, segments: Segments) -> None:
        compiled.segments_into(self.k, found, segments)

    def prepared_layout(self, request: StatisticsRequest, values: list, prevs: list,
                        targets: list | None) -> PreparedLayout | None:
        return prepared_layout(self.k, request, values, prevs, targets)


_NUMPY = NumpyEngine()
_compiled_engine: CompiledEngine | None = None


def current_engine() -> StatisticsEngine:
    """The engine that runs now (``_engine.kernels``: numba's compiled pass unless missing or chosen off)."""
    global _compiled_engine
    k = _engine.kernels()
    if k is None:
        return _NUMPY
    engine = _compiled_engine
    if engine is None or engine.k is not k:
        engine = _compiled_engine = CompiledEngine(k)
    return engine
