"""Tensors as the training sends them (``TensorProto`` pieces, ``TensorBase``, ``TensorSummary``) -> numpy.

A value arrives in pieces of at most 3 MiB; the content is concatenated until a piece has ``finished``, and dtype,
shape and names are taken from that finishing piece (the protocol's rule). A finished piece without a dtype is the
training's "I hold no such tensor".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.wire.dtypes import numpy_dtype
from msdebug_hooks.wire.protocol import PREVIOUS_STEP

__all__ = ["ReceivedTensor", "TensorStats", "assemble", "stats_from_summary", "MAX_TENSOR_BYTES"]

MAX_TENSOR_BYTES = 1 << 30   # MindInsight drops a single tensor of 1 GiB or more; so do we


@dataclass(frozen=True)
class ReceivedTensor:
    """One tensor of a ``SendTensors`` stream: ``value`` None when the training had none; ``problem`` says why a
    value was refused (inconsistent size, unknown dtype, too large)."""

    node_name: str
    slot: str
    previous: bool
    value: Optional[np.ndarray]
    problem: str = ""


def _to_array(last: graph_pb.TensorProto, content: bytearray) -> tuple[Optional[np.ndarray], str]:
    if last.data_type == graph_pb.DT_UNDEFINED and not content:
        return None, ""
    try:
        dtype = numpy_dtype(last.data_type)
    except KeyError:
        return None, f"data_type={last.data_type} is not a tensor type the protocol carries"
    shape = tuple(int(d) for d in last.dims)
    if any(d < 0 for d in shape):
        return None, f"dims={list(shape)} has a negative size"
    expected = math.prod(shape) * dtype.itemsize
    if len(content) != expected:
        return None, f"{len(content)} bytes for dims={list(shape)} of {dtype} (expected {expected})"
    return np.frombuffer(content, dtype=dtype).reshape(shape), ""     # writable: it owns the bytearray


def assemble(pieces: Iterable[graph_pb.TensorProto]) -> list[ReceivedTensor]:
    """Join the pieces of a ``SendTensors`` stream into whole tensors, in order."""
    tensors: list[ReceivedTensor] = []
    content = bytearray()
    oversize = False
    for piece in pieces:
        if not oversize:
            if len(content) + len(piece.tensor_content) >= MAX_TENSOR_BYTES:
                oversize, content = True, bytearray()
            else:
                content += piece.tensor_content
        if not piece.finished:
            continue
        if oversize:
            value, problem = None, f"larger than {MAX_TENSOR_BYTES} bytes: not kept"
        else:
            value, problem = _to_array(piece, content)
        tensors.append(ReceivedTensor(piece.node_name, piece.slot or "0", piece.iter == PREVIOUS_STEP, value, problem))
        content, oversize = bytearray(), False
    return tensors


@dataclass(frozen=True)
class TensorStats:
    """Statistics the training computed (``ViewCMD`` level statistics): min, max and mean over finite values, as
    MindInsight shows them (NaN when no element is finite, where the protocol sends 0); counts over all elements.
    ``available`` is False when the training had no value."""

    available: bool
    dtype: str
    shape: tuple[int, ...]
    count: int
    min: float
    max: float
    mean: float
    nan_count: int
    pos_inf_count: int
    neg_inf_count: int
    zero_count: int
    negative_count: int
    positive_count: int

    @property
    def finite_count(self) -> int:
        """Elements that are neither NaN nor +-Inf: min, max and mean are over these (NaN when there are none)."""
        return self.count - self.nan_count - self.pos_inf_count - self.neg_inf_count

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _dtype_name(data_type: int) -> str:
    try:
        return str(numpy_dtype(data_type))
    except KeyError:
        return graph_pb.DataType.Name(data_type) if data_type in graph_pb.DataType.values() else str(data_type)


def stats_from_summary(summary: pb.TensorSummary) -> TensorStats:
    base, s = summary.tensor_base, summary.statistics
    available = base.data_size > 0
    # the protocol sends 0 for min / max / mean where no value is finite: NaN says there is none
    finite = int(s.count) - int(s.nan_count) - int(s.pos_inf_count) - int(s.neg_inf_count) > 0
    low, high, mean = (float(s.min_value), float(s.max_value), float(s.avg_value)) if finite else (float("nan"),) * 3
    return TensorStats(available, _dtype_name(base.data_type) if available else "", tuple(int(d) for d in base.shape)
                       if available else (), int(s.count), low, high, mean, int(s.nan_count), int(s.pos_inf_count),
                       int(s.neg_inf_count), int(s.zero_count), int(s.neg_zero_count), int(s.pos_zero_count))
