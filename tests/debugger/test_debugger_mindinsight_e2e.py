"""First end-to-end checks against the real MindInsight 2.3.1: raw protocol messages through our transport on the
training side, the REST calls of the browser UI on the other (docs/debugger-protocol.md sections 1, 3.4, 4).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence, TypeVar

import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.transport import Transport

from transport_test_calls import send_tensors, start_wait_cmd

pytestmark = [pytest.mark.mindinsight, pytest.mark.timeout(300)]

SCOPE = "Default/network-Net/fc-Dense"
WEIGHT = f"{SCOPE}/fc.weight"
_T = TypeVar("_T")


def _tensor_type(shape: Sequence[int]) -> graph_pb.TypeProto:
    return graph_pb.TypeProto(data_type=graph_pb.DT_TENSOR, tensor_type=graph_pb.TypeProto.Tensor(
        elem_type=graph_pb.DT_FLOAT32,
        shape=graph_pb.TensorShapeProto(dim=[graph_pb.TensorShapeProto.Dimension(size=s) for s in shape])))


def minimal_graph(in_features: int = 3, out_features: int = 4) -> graph_pb.GraphProto:
    """The smallest graph MindInsight accepts (protocol doc 3.4): x @ fc.weight + fc.bias, then ReLU."""
    def node(idx: int, op: str, scope: str, inputs: list[str]) -> graph_pb.NodeProto:
        return graph_pb.NodeProto(name=str(idx), op_type=op, scope=scope, full_name=f"{scope}/{op}-op{idx}",
                                  input=[graph_pb.InputProto(name=n) for n in inputs],
                                  output_type=_tensor_type([2, out_features]))
    return graph_pb.GraphProto(name="kernel_graph_0", root_name="0", parameters=[
        graph_pb.ParameterProto(name="x", type=_tensor_type([2, in_features])),
        graph_pb.ParameterProto(name="fc.weight", type=_tensor_type([in_features, out_features])),
        graph_pb.ParameterProto(name="fc.bias", type=_tensor_type([out_features]))], node=[
        node(1, "MatMul", SCOPE, ["x", "fc.weight"]),
        node(2, "BiasAdd", SCOPE, ["1", "fc.bias"]),
        node(3, "ReLU", "Default/network-Net", ["2"])])


def _metadata(step: int, **fields) -> pb.Metadata:
    return pb.Metadata(device_name="0:0", cur_step=step, backend="GPU", **fields)


def _until(fn: Callable[[], _T], ok: Callable[[_T], bool], timeout: float = 20.0) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


@pytest.fixture
def connected(mindinsight_server):
    """A transport that has sent metadata; on the way out the session is terminated so the next test starts clean."""
    transport = Transport(mindinsight_server.grpc_address, timeout=10)
    reply = transport.send_metadata(_metadata(0, ms_version="2.10.0", graph_num=1))
    assert reply.WhichOneof("cmd") == "version_matched" and reply.version_matched
    try:
        yield transport
    finally:
        mindinsight_server.rest.reset()
        transport.close()


def test_graph_appears_waiting_and_run_step_and_terminate_reach_the_client(connected, mindinsight_server):
    rest = mindinsight_server.rest
    assert connected.send_graph(minimal_graph().SerializeToString()).status == pb.EventReply.OK
    wait = start_wait_cmd(connected, _metadata(0))

    reply = rest.wait_for_state("waiting")
    meta = reply["metadata"]
    assert (meta["step"], meta["backend"], meta["graph_name"]) == (0, "GPU", "kernel_graph_0")
    assert meta["debugger_version"] == {"mi": "2.3.1", "ms": "2.10.0"}
    assert [n["name"] for n in reply["graph"]["nodes"]] == ["Default"]
    nodes = {n["name"]: n["type"] for n in rest.retrieve_node(SCOPE)["graph"]["nodes"]}
    assert nodes == {f"{SCOPE}/MatMul-op1": "MatMul", f"{SCOPE}/BiasAdd-op2": "BiasAdd", f"{SCOPE}/x": "Parameter",
                     WEIGHT: "Parameter", f"{SCOPE}/fc.bias": "Parameter"}
    offered = {c["id"] for group in rest.condition_collections() for c in group["conditions"]}
    assert {"weight_overflow", "tensor_too_large", "weight_not_changed"} <= offered   # backend "GPU" enables them
    assert not wait.done()

    rest.continue_steps(1)
    command = wait.result(timeout=20)
    assert command.WhichOneof("cmd") == "run_cmd"
    assert (command.run_cmd.run_level, command.run_cmd.run_steps) == ("step", 1)

    wait = start_wait_cmd(connected, _metadata(1))                    # the step ran; suspend at its end
    assert rest.wait_for(lambda r: r["metadata"]["step"] == 1 and r["metadata"]["state"] == "waiting",
                         what="step 1 waiting")["metadata"]["step"] == 1
    rest.terminate()
    command = wait.result(timeout=20)
    assert command.WhichOneof("cmd") == "exit" and command.exit
    assert rest.wait_for_state("pending")["metadata"]["state"] == "pending"


def test_a_weight_over_4mib_is_viewed_through_chunked_tensors(connected, mindinsight_server):
    """tensor-history asks for the base (dtype/shape), tensors asks for the value; the 4.8 MB value arrives in
    3 MiB pieces and MindInsight shows exactly our numbers."""
    rest = mindinsight_server.rest
    weight = np.random.default_rng(7).standard_normal((1000, 1200)).astype(np.float32)
    connected.send_graph(minimal_graph(1000, 1200).SerializeToString())
    wait = start_wait_cmd(connected, _metadata(0))
    rest.wait_for_state("waiting")

    rest.tensor_history(WEIGHT)
    command = wait.result(timeout=20)
    assert command.view_cmd.level == pb.ViewCMD.base
    (request,) = command.view_cmd.tensors
    assert (request.node_name, request.slot, request.iter, request.truncate) == (WEIGHT, "0", "", True)
    connected.send_tensor_bases([pb.TensorBase(data_type=graph_pb.DT_FLOAT32, shape=weight.shape,
                                               data_size=weight.nbytes)])
    wait = start_wait_cmd(connected, _metadata(0))
    history = _until(lambda: rest.tensor_history(WEIGHT)["tensor_history"][0], lambda h: "shape" in h)
    assert (history["shape"], history["dtype"]) == ([1000, 1200], "DT_FLOAT32")

    assert rest.tensor_value(f"{WEIGHT}:0", shape="[0:2, 0:3]")["tensor_value"]["tensor_status"] == "uncached"
    command = wait.result(timeout=20)
    assert command.view_cmd.level == pb.ViewCMD.value
    (request,) = command.view_cmd.tensors
    send_tensors(connected, [graph_pb.TensorProto(
        node_name=request.node_name, slot=request.slot, iter=request.iter, truncate=request.truncate,
        tensor_content=weight.tobytes(), dims=weight.shape, data_type=graph_pb.DT_FLOAT32)])
    wait = start_wait_cmd(connected, _metadata(0))

    shown = _until(lambda: rest.tensor_value(f"{WEIGHT}:0", shape="[0:2, 0:3]")["tensor_value"],
                   lambda v: v["tensor_status"] == "cached")
    np.testing.assert_array_equal(np.asarray(shown["value"], np.float32), weight[0:2, 0:3])
    assert shown["statistics"]["overall_max"] == pytest.approx(float(weight.max()))
    last_row = rest.tensor_value(f"{WEIGHT}:0", shape="[999, 1190:1200]")["tensor_value"]["value"]
    np.testing.assert_array_equal(np.asarray(last_row, np.float32), weight[999, 1190:1200])
    rest.terminate()
    assert wait.result(timeout=20).exit
