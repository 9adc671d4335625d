"""Tensor throughput: the client's whole answer to a view of a 32 MiB weight (read, answer, cut into pieces,
stream), and a pull of it through our server's API, each against raw grpcio on the same loopback (a client-streaming
call of ready-made pieces with identity serializers)."""
from __future__ import annotations

import statistics
import time
from concurrent import futures

import grpc

from debugger_bench import servers
from debugger_bench.servers import RAW_METHOD, pb


def big_graph():
    """(graph, value) of a one-layer network whose ``fc.weight`` is 2048 x 4096 float32 = 32 MiB."""
    from mindspore import nn

    from msdebug_hooks.debugger.graph import build_graph

    class Big(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(4096, 2048)

        def construct(self, x):
            return self.fc(x)

    graph = build_graph(Big())
    return graph, graph.parameters["fc.weight"].source.asnumpy()


def _pieces(weight) -> list[bytes]:
    """The weight's bytes cut as the client cuts a tensor: the raw baseline's ready-made pieces."""
    import numpy as np

    from msdebug_hooks.debugger.transport import CHUNK_BYTES

    view = memoryview(weight.reshape(-1).view(np.uint8))
    return [bytes(view[i:i + CHUNK_BYTES]) for i in range(0, len(view), CHUNK_BYTES)]


def _rates(what: str, weight, ours: list[float], raw: list[float]) -> tuple[float, float]:
    """(ours, raw) MiB/s from the medians of the timed transfers (the first of each, a warm-up, left out), printed."""
    mib = weight.nbytes / 2 ** 20
    raw_rate, our_rate = mib / statistics.median(raw[1:]), mib / statistics.median(ours[1:])
    print(f"{what.format(mib=mib)} {our_rate:.0f} MiB/s, raw grpcio {raw_rate:.0f} MiB/s "
          f"({100 * our_rate / raw_rate:.0f} % of raw), median of {len(raw) - 1}")
    return our_rate, raw_rate


def view_throughput(repeats: int) -> tuple[float, float]:
    """The client's answer to a view of the 32 MiB weight against raw grpcio: (client, raw) MiB/s, printed."""
    from msdebug_hooks.debugger.session import DebuggerSession
    from msdebug_hooks.debugger.tensors import NetworkTensors
    from msdebug_hooks.debugger.transport import Transport
    from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

    graph, weight = big_graph()
    proc, port = servers.start_server(0)
    try:
        transport = Transport(f"127.0.0.1:{port}", stream_timeout=300)
        session = DebuggerSession(transport, graph, NetworkTensors(graph), ms_version="2.10.0")
        request = pb.ViewCMD(level=pb.ViewCMD.value, tensors=[graph_pb.TensorProto(
            node_name="Default/fc-Dense/fc.weight", slot="0", iter="", truncate=True)])
        raw_call = transport._channel.stream_unary(RAW_METHOD, request_serializer=None, response_deserializer=None)
        pieces = _pieces(weight)
        client, raw = [], []
        for _ in range(repeats + 1):                 # interleaved; the first of each is a warm-up
            start = time.perf_counter()
            assert int(raw_call(iter(pieces), timeout=300)) == weight.nbytes
            raw.append(time.perf_counter() - start)
            start = time.perf_counter()
            session._on_view(request)                # the whole client path: read, answer, chunk, stream
            session.tensors.forget_current()          # read the parameter again next time, as a new view would
            client.append(time.perf_counter() - start)
        transport.close()
    finally:
        servers.stop(proc)
    return _rates("tensor view of a {mib:.0f} MiB weight: client", weight, client, raw)



def server_pull_throughput(repeats: int) -> tuple[float, float]:
    """``job.tensor`` of a 32 MiB weight from a suspended client, against raw grpcio on the same loopback."""
    import threading

    import numpy as np

    from msdebug_hooks.debugger.session import DebuggerSession
    from msdebug_hooks.debugger.tensors import NetworkTensors
    from msdebug_hooks.debugger.transport import Transport
    from msdebug_hooks.server import DebuggerServer

    graph, weight = big_graph()

    def joined(iterator, context) -> bytes:
        return str(len(b"".join(iterator))).encode()

    raw_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    raw_server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Raw", {
        "Push": grpc.stream_unary_rpc_method_handler(joined, request_deserializer=None, response_serializer=None)}),))
    raw_port = raw_server.add_insecure_port("127.0.0.1:0")
    raw_server.start()
    pieces = _pieces(weight)
    ours, raw = [], []
    with DebuggerServer(port=0, log_reports=False) as server, \
            grpc.insecure_channel(f"127.0.0.1:{raw_port}") as channel:
        transport = Transport(server.address, stream_timeout=300)
        session = DebuggerSession(transport, graph, NetworkTensors(graph), ms_version="2.10.0")
        client = threading.Thread(target=lambda: session.connect() and session.suspend(), daemon=True)
        client.start()
        job = server.wait_for_training(timeout=60)
        push = channel.stream_unary(RAW_METHOD, request_serializer=None, response_deserializer=None)
        for _ in range(repeats + 1):                 # interleaved; the first of each is a warm-up
            start = time.perf_counter()
            assert int(push(iter(pieces), timeout=300)) == weight.nbytes
            raw.append(time.perf_counter() - start)
            start = time.perf_counter()
            pulled = job.tensor("fc.weight", timeout=300)
            ours.append(time.perf_counter() - start)
            assert np.array_equal(pulled, weight)
        job.terminate()
        client.join(30)
        transport.close()
    raw_server.stop(None)
    return _rates("tensor pull of a {mib:.0f} MiB weight through the server API:", weight, ours, raw)

