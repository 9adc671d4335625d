"""The debugger transport against our in-process test server: chunking under the 4 MiB limit, deadlines, errors."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.chunking import CHUNK_BYTES, graph_chunks
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import RequestTimeout, ServerError, ServerUnavailable, TransportClosed

from debug_test_server import DebugTestServer, reassemble_tensors
from mindinsight_server import free_port
from transport_test_calls import send_multi_graphs, send_tensors, tensor_chunks

pytestmark = pytest.mark.timeout(60)


def _tensor(name: str, array: np.ndarray, **fields) -> graph_pb.TensorProto:
    return graph_pb.TensorProto(node_name=name, slot="0", tensor_content=array.tobytes(), dims=list(array.shape),
                                data_type=graph_pb.DT_FLOAT32, **fields)


def test_tensor_chunks_stay_under_the_limit_and_repeat_the_names():
    array = np.arange(1_000_000, dtype=np.float32)            # 4 MB: needs two 3 MiB pieces
    pieces = list(tensor_chunks(_tensor("Default/net/fc.weight", array, iter="prev", truncate=True)))
    assert len(pieces) == 2
    assert all(p.ByteSize() <= CHUNK_BYTES for p in pieces)
    assert [p.finished for p in pieces] == [False, True]
    assert all((p.node_name, p.slot, p.iter, p.truncate, list(p.dims)) ==
               ("Default/net/fc.weight", "0", "prev", True, [1_000_000]) for p in pieces)
    assert b"".join(p.tensor_content for p in pieces) == array.tobytes()


def test_empty_tensor_is_one_finished_piece():
    pieces = list(tensor_chunks(graph_pb.TensorProto(node_name="Default/x", slot="0", iter="")))
    assert len(pieces) == 1 and pieces[0].finished and pieces[0].node_name == "Default/x"


def test_graph_chunks_mark_only_the_last_piece():
    data = bytes(range(256)) * 1000                           # 256 000 bytes in 64 KiB messages: 4 pieces
    pieces = list(graph_chunks(data, chunk_bytes=64 * 1024))
    assert len(pieces) == 4 and [p.finished for p in pieces] == [False] * 3 + [True]
    assert all(p.ByteSize() <= 64 * 1024 for p in pieces)
    assert b"".join(p.buffer for p in pieces) == data


def test_large_tensors_and_graphs_cross_a_server_with_the_default_4mib_limit():
    weights = np.random.default_rng(0).standard_normal((1200, 1000)).astype(np.float32)   # 4.8 MB
    small = np.ones((3,), np.float32)
    big_graph = graph_pb.GraphProto(name="kernel_graph_0", root_name="0", node=[
        graph_pb.NodeProto(name=str(i), op_type="Add", scope="Default/net",
                           full_name=f"Default/net/Add-op{i}" + "x" * 200) for i in range(20_000)])
    serialized = big_graph.SerializeToString()
    assert len(serialized) > 4 * 1024 * 1024
    with DebugTestServer() as server, Transport(server.address) as transport:
        assert send_tensors(transport, [_tensor("Default/net/w", weights), _tensor("Default/net/b", small),
                                       graph_pb.TensorProto(node_name="Default/net/missing", slot="0")]).status == 0
        transport.send_graph(serialized)
        send_multi_graphs(transport, [serialized, graph_pb.GraphProto(name="kernel_graph_1").SerializeToString()])
    pieces = server.recorded.tensor_streams[0]
    assert len(pieces) == 4 and all(p.ByteSize() <= CHUNK_BYTES for p in pieces)
    whole = reassemble_tensors(pieces)
    assert [t.node_name for t in whole] == ["Default/net/w", "Default/net/b", "Default/net/missing"]
    np.testing.assert_array_equal(np.frombuffer(whole[0].tensor_content, np.float32).reshape(1200, 1000), weights)
    assert whole[2].tensor_content == b"" and not whole[2].dims
    graph_stream = server.recorded.graph_streams[0]
    assert graph_pb.GraphProto.FromString(b"".join(c.buffer for c in graph_stream)) == big_graph
    multi = server.recorded.multi_graph_streams[0]
    assert sum(c.finished for c in multi) == 2 and multi[-1].finished


def test_wait_cmd_blocks_without_a_deadline_until_a_command_arrives():
    """The server sees the call with no deadline at all (a transport timeout applied to it would end a pause early)."""
    replies = []
    with DebugTestServer() as server, Transport(server.address, timeout=2) as transport:
        thread = threading.Thread(target=lambda: replies.append(
            transport.wait_cmd(pb.Metadata(device_name="0:0", cur_step=4))))
        thread.start()
        server.wait_for_waits(1)
        assert server.recorded.wait_deadlines[0] > 24 * 3600 and not replies   # grpc reports "none" as ~2**63 ns
        server.command(pb.EventReply(run_cmd=pb.RunCMD(run_level="step", run_steps=1)))
        thread.join(30)
    assert not thread.is_alive() and replies[0].WhichOneof("cmd") == "run_cmd"
    assert server.recorded.waits[0].cur_step == 4


def test_close_cancels_a_pending_wait():
    with DebugTestServer() as server:
        transport = Transport(server.address)
        errors = []
        thread = threading.Thread(target=lambda: errors.append(_raises(transport.wait_cmd, pb.Metadata())))
        thread.start()
        server.wait_for_waits(1)
        transport.close()
        thread.join(5)
    assert not thread.is_alive() and isinstance(errors[0], TransportClosed)
    with pytest.raises(TransportClosed):
        transport.send_heartbeat(pb.Heartbeat(period=30))


def test_unary_calls_have_a_deadline():
    answer = threading.Event()     # the server answers only after the client gave up: the deadline ended the call
    with DebugTestServer() as server, Transport(server.address, timeout=0.3) as transport:
        server.hooks["SendHeartbeat"] = lambda request: answer.wait(60) and None
        try:
            with pytest.raises(RequestTimeout) as info:
                transport.send_heartbeat(pb.Heartbeat(message="alive", period=30))
        finally:
            answer.set()
    assert info.value.method == "SendHeartbeat"


def test_errors_become_our_exceptions():
    with Transport(f"127.0.0.1:{free_port()}", timeout=2) as transport:
        with pytest.raises(ServerUnavailable) as info:
            transport.send_metadata(pb.Metadata())
        assert "SendMetadata" in str(info.value)
    with DebugTestServer() as server, Transport(server.address) as transport:
        def fail(items):
            raise RuntimeError("Invalid watchpoint id")
        server.hooks["SendWatchpointHits"] = fail
        with pytest.raises(ServerError) as info:
            transport.send_watchpoint_hits([pb.WatchpointHit(id=9)])
    assert "Invalid watchpoint id" in str(info.value) or "UNKNOWN" in str(info.value)


def test_bad_settings_are_rejected_with_the_allowed_range():
    with pytest.raises(ValueError, match="chunk_bytes=8388608: allowed"):
        Transport("127.0.0.1:1", chunk_bytes=8 * 1024 * 1024)
    with pytest.raises(ValueError, match="timeout=0"):
        Transport("127.0.0.1:1", timeout=0)


def _raises(fn, *args):
    try:
        fn(*args)
    except Exception as exc:   # the test inspects the type
        return exc
    return None


def test_serialized_pieces_parse_to_exactly_the_chunked_messages():
    """The copy-free view path writes tensor_content by hand; the server must read what tensor_chunks sends."""
    from msdebug_hooks.debugger.chunking import serialized_tensor_pieces

    array = np.arange(300_000, dtype=np.float64)          # 2.4 MB: 3 pieces at 1 MiB
    header = graph_pb.TensorProto(node_name="Default/net/fc.weight", slot="0", iter="prev", truncate=True,
                                  dims=[300_000], data_type=graph_pb.DT_FLOAT64)
    whole = graph_pb.TensorProto()
    whole.CopyFrom(header)
    whole.tensor_content = array.tobytes()
    fast = [graph_pb.TensorProto.FromString(p) for p in
            serialized_tensor_pieces(header, memoryview(array.view(np.uint8)), chunk_bytes=1024 * 1024)]
    assert all(len(p) <= 1024 * 1024 for p in serialized_tensor_pieces(header, array.tobytes(),
                                                                        chunk_bytes=1024 * 1024))
    slow = list(tensor_chunks(whole, chunk_bytes=1024 * 1024))
    assert [p.finished for p in fast] == [False, False, True]
    assert b"".join(p.tensor_content for p in fast) == whole.tensor_content
    for piece in fast:
        piece.ClearField("tensor_content")
        assert (piece.node_name, piece.iter, piece.truncate, list(piece.dims)) == \
            ("Default/net/fc.weight", "prev", True, [300_000])
    (empty,) = [graph_pb.TensorProto.FromString(p) for p in serialized_tensor_pieces(header, b"")]
    assert empty.finished and not empty.tensor_content and len(slow) == 3
    with DebugTestServer() as server, Transport(server.address) as transport:
        transport.send_tensor_values([(header, memoryview(array.view(np.uint8)))])
        (received,) = reassemble_tensors(server.recorded.tensor_streams[0])
    assert received.tensor_content == array.tobytes() and received.data_type == graph_pb.DT_FLOAT64
