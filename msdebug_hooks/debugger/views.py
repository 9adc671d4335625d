"""Answers to ``ViewCMD``: one item per requested tensor, in request order (docs/debugger-protocol.md 1.7).

Pure functions from (request, value or None) to messages, so they are tested without a channel. The server zips
answers against its requests, so a missing tensor still gets an (empty) answer.
"""
from __future__ import annotations

import numpy as np

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.wire.dtypes import data_type, wire_array
from msdebug_hooks.wire.protocol import PREVIOUS_STEP

__all__ = ["lookup_key", "tensor_value_answer", "base_answer", "stats_answer"]


def lookup_key(request: graph_pb.TensorProto) -> tuple[str, str, bool]:
    """(name, slot, previous) to look a requested tensor up by. Parameters and consts come with ``truncate``: they
    are known by the last component of their scoped name, as MindSpore's client looked them up."""
    name = request.node_name.rsplit("/", 1)[-1] if request.truncate else request.node_name
    return name, request.slot or "0", request.iter == PREVIOUS_STEP


def _echo(request: graph_pb.TensorProto) -> graph_pb.TensorProto:
    return graph_pb.TensorProto(node_name=request.node_name, slot=request.slot, iter=request.iter,
                                truncate=request.truncate, finished=True)


def tensor_value_answer(request: graph_pb.TensorProto,
                        value: np.ndarray | None) -> tuple[graph_pb.TensorProto, memoryview]:
    """Level ``value``, without copying the value: the header (names echoed, dtype, dims) and the value's bytes as
    a memoryview of the array itself, for ``Transport.send_tensor_values``; without a value, an empty finished
    answer that echoes the request."""
    answer = _echo(request)
    if value is None:
        return answer, memoryview(b"")
    array = wire_array(value)
    answer.dims.extend(array.shape)
    answer.data_type = data_type(array.dtype)
    return answer, memoryview(array.reshape(-1).view(np.uint8))


def base_answer(value: np.ndarray | None) -> pb.TensorBase:
    """Level ``base``: dtype, shape and byte size; a missing tensor is ``data_size=0, shape=[0]``."""
    if value is None:
        return pb.TensorBase(data_type=0, shape=[0], data_size=0)
    array = wire_array(value)
    return pb.TensorBase(data_type=data_type(array.dtype), shape=list(array.shape), data_size=array.nbytes)


def stats_answer(value: np.ndarray | None) -> pb.TensorSummary:
    """Level ``statistics``, computed as MindInsight computes its own (min/max/avg over finite values only,
    ``neg_zero_count`` / ``pos_zero_count`` = counts of values < 0 / > 0) so the UI is consistent."""
    base = base_answer(value)
    if value is None:
        return pb.TensorSummary(tensor_base=base, statistics=pb.Statistics())
    array = wire_array(value)
    stats = pb.Statistics(count=int(array.size))
    if array.dtype == np.bool_:
        stats.is_bool = True
        stats.pos_zero_count = int(np.count_nonzero(array))
        stats.zero_count = int(array.size - stats.pos_zero_count)
        return pb.TensorSummary(tensor_base=base, statistics=stats)
    flat = array.reshape(-1)
    if np.issubdtype(flat.dtype, np.floating):
        nan = np.isnan(flat)
        pos_inf, neg_inf = np.isposinf(flat), np.isneginf(flat)
        stats.nan_count, stats.pos_inf_count, stats.neg_inf_count = (int(nan.sum()), int(pos_inf.sum()),
                                                                       int(neg_inf.sum()))
        finite = flat[~(nan | pos_inf | neg_inf)]
    else:
        finite = flat
    stats.neg_zero_count = int(np.count_nonzero(finite < 0))
    stats.pos_zero_count = int(np.count_nonzero(finite > 0))
    stats.zero_count = int(np.count_nonzero(finite == 0))
    if finite.size:
        stats.max_value = float(finite.max())
        stats.min_value = float(finite.min())
        stats.avg_value = float(finite.astype(np.float64).mean())
    return pb.TensorSummary(tensor_base=base, statistics=stats)
