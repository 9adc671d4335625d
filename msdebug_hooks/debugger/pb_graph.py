"""The graph a sync dump writes (``rank_<r>/graphs/ms_output_trace_code_graph_<g>.pb``), made ready for MindInsight.

That file is MindSpore's ``anf_ir.proto`` ``ModelProto``: ``ir_version`` (1), ``domain`` (2), ``model_version`` (3),
``graph`` (4, a ``GraphProto``). Its ``GraphProto`` uses the same field numbers as MindInsight's ``ms_graph.proto``
(which is what MindSpore's own debugger exported: same exporter), so the project's generated ``ms_graph_pb2`` parses
field 4 as is, ``source_address`` stack text included (``# In file <path>:<line>, <col>~<col>/ <code>/``), which is
what MindInsight's stack list and "search by code line" read. The outer message is not in our proto, so its few
top-level fields are walked here at the wire level (checked on MindSpore 2.10 CPU dumps).

Fixes before sending: the graph is called ``kernel_graph<id>`` in 2.10, but MindInsight takes the graph id from the
text after the last ``_`` (``int("graph0")`` fails in its hit list), and a lone graph whose id is not 0 (the training
graph of a process that compiled another graph first) is "not found" by its REST API, so the one graph sent is
always ``kernel_graph_0``; names must not contain ``< > "`` (MindInsight rejects them); and the stack text is
rewritten to the form MindInsight parses (:func:`mindinsight_source_address`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
from msdebug_hooks.errors import DumpError

__all__ = ["read_model_graph", "dump_graph_files", "debug_graph_from_dump", "output_count", "find_graph",
           "mindinsight_source_address"]

_MODEL_GRAPH_FIELD = 4
_FORBIDDEN = str.maketrans({"<": "_", ">": "_", '"': "_"})
_LOCATION = re.compile(r"(?P<head>In file .+?):(?P<line>\d+)(?:~\d+)?(?:, [\d~]+)?/")
_GRAPH_FILE = re.compile(r"^ms_output_trace_code_graph_(\d+)\.pb$")
_NP_OF_DT = {graph_pb.DT_BOOL: np.bool_, graph_pb.DT_INT8: np.int8, graph_pb.DT_INT16: np.int16,
             graph_pb.DT_INT32: np.int32, graph_pb.DT_INT64: np.int64, graph_pb.DT_UINT8: np.uint8,
             graph_pb.DT_UINT16: np.uint16, graph_pb.DT_UINT32: np.uint32, graph_pb.DT_UINT64: np.uint64,
             graph_pb.DT_FLOAT16: np.float16, graph_pb.DT_FLOAT32: np.float32, graph_pb.DT_FLOAT64: np.float64}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def read_model_graph(path: Path | str) -> graph_pb.GraphProto:
    """The ``GraphProto`` inside a dump's ``.pb`` (a ``ModelProto``); a bare ``GraphProto`` file is read too."""
    path = Path(path)
    data = path.read_bytes()
    pos, graph_bytes = 0, None
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire = key >> 3, key & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 2:
                length, pos = _varint(data, pos)
                if number == _MODEL_GRAPH_FIELD:
                    graph_bytes = data[pos:pos + length]
                pos += length
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ValueError(f"wire type {wire}")
        if pos != len(data):
            raise ValueError("truncated field")
    except ValueError as exc:
        graph_bytes = None
        detail = str(exc)
    else:
        detail = "no graph field (4)"
    try:
        if graph_bytes is not None:
            return graph_pb.GraphProto.FromString(graph_bytes)
        return graph_pb.GraphProto.FromString(data)
    except Exception as exc:   # protobuf's DecodeError
        raise DumpError(path, "a MindSpore graph file (a ModelProto with a GraphProto in field 4)",
                        detail=f"{detail}; {exc}") from None


def dump_graph_files(rank_dir: Path | str) -> dict[int, Path]:
    """graph id -> ``.pb`` file under ``rank_<r>/graphs``."""
    graphs = Path(rank_dir) / "graphs"
    found = {}
    if graphs.is_dir():
        for item in graphs.iterdir():
            match = _GRAPH_FILE.match(item.name)
            if match:
                found[int(match[1])] = item
    return found


def mindinsight_source_address(text: str) -> str:
    """MindSpore 2.x writes ``# In file <path>:<line>[~<end>], <col>~<col>/<code>/``; MindInsight 2.3.1 reads only
    ``:<line>/`` (its regex needs the ``/`` right after the line number, otherwise the frame gets no file and no
    line), so the column and end-line parts are dropped; everything else is kept as is."""
    return "\n".join(_LOCATION.sub(r"\g<head>:\g<line>/", line) for line in text.split("\n"))


def _shape_dtype(type_proto: graph_pb.TypeProto) -> tuple[tuple[int, ...], np.dtype]:
    tensor = type_proto.tensor_type
    return (tuple(int(d.size) for d in tensor.shape.dim),
            np.dtype(_NP_OF_DT.get(tensor.elem_type, np.float32)))


def debug_graph_from_dump(proto: graph_pb.GraphProto, graph_id: int,
                          parameters: Iterable[tuple[str, Any, str]] = ()) -> DebugGraph:
    """A ``DebugGraph`` over the dump's graph ``graph_id``: sent as ``kernel_graph_0``, names cleaned, and every graph
    parameter tied to its live MindSpore ``Parameter`` (``parameters``: (name, Parameter, role) triples) so weights
    are viewed and watched from the network, as the light source does; ops are served from the dump files."""
    graph = graph_pb.GraphProto()
    graph.CopyFrom(proto)
    graph.name = "kernel_graph_0"   # the one graph sent; MindInsight 2.3.1 does not find a lone graph named otherwise
    graph.root_name = "0"
    for node in graph.node:
        node.full_name = node.full_name.translate(_FORBIDDEN)
        node.scope = node.scope.translate(_FORBIDDEN)
        if node.source_address:
            node.source_address = mindinsight_source_address(node.source_address)
    live = {name: (param, role) for name, param, role in parameters}
    result = DebugGraph(graph)
    for param in graph.parameters:
        shape, dtype = _shape_dtype(param.type)
        source, role = live.get(param.name, (None, "input"))
        result.parameters[param.name] = GraphParameter(param.name, role, shape, dtype, source)
    for node in graph.node:
        if node.full_name:
            result.nodes[node.full_name] = node.op_type
    return result


def output_count(node: graph_pb.NodeProto) -> int:
    """How many outputs MindInsight shows for a node (one per tuple element; none without ``output_type``)."""
    if not node.HasField("output_type"):
        return 0
    if node.output_type.data_type == graph_pb.DT_TUPLE:
        return len(node.output_type.sequence_type.elem_types) or 1
    return 1


def find_graph(rank_dir: Path | str, graph_id: Optional[int] = None) -> tuple[int, Path]:
    """The graph to show: ``graph_id`` or, without one, the only / largest graph the dump holds."""
    files = dump_graph_files(rank_dir)
    if not files:
        raise DumpError(rank_dir, "graphs/ms_output_trace_code_graph_<id>.pb", detail="the dump wrote no graph")
    if graph_id is not None:
        if graph_id not in files:
            raise DumpError(rank_dir, f"graph {graph_id}", detail=f"the dump holds graphs {sorted(files)}")
        return graph_id, files[graph_id]
    best = max(files, key=lambda g: files[g].stat().st_size)
    return best, files[best]
