"""The graph builder on a real LeNet train network, and what the real MindInsight 2.3.1 makes of the graph."""
from __future__ import annotations

import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.debugger.graph import build_graph, scope_of
from msdebug_hooks.debugger.transport import Transport

from transport_test_calls import start_wait_cmd

WEIGHTS = ["conv1.weight", "conv2.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
BACKBONE = "Default/network-WithLossCell/_backbone-LeNet5"


@pytest.fixture(scope="module")
def lenet_graph():
    from lenet import make_model

    model, _network = make_model(0.01)
    return build_graph(model.train_network), model


def _walk(nodes):
    for node in nodes:
        yield node
        yield from _walk(node.get("nodes", []))


def test_scope_names_follow_mindspore():
    classes = {"network": "WithLossCell", "network._backbone": "LeNet5", "network._backbone.conv1": "Conv2d"}
    assert scope_of("network._backbone.conv1", classes) == f"{BACKBONE}/conv1-Conv2d"
    assert scope_of("", {}) == "Default"


@pytest.mark.mindspore
@pytest.mark.timeout(120)
def test_lenet_graph_has_weights_optimizer_states_and_loss(lenet_graph):
    graph, model = lenet_graph
    roles = {name: p.role for name, p in graph.parameters.items()}
    assert [n for n, r in roles.items() if r == "weight"] == WEIGHTS
    assert {n for n, r in roles.items() if r == "optimizer_state"} == \
        {"global_step", "learning_rate", "momentum"} | {f"moments.{w}" for w in WEIGHTS}
    for name in WEIGHTS:                                  # the tensor behind each name is the live Parameter
        assert graph.parameters[name].source is dict(model.train_network.parameters_and_names())[name]
    assert graph.parameters["fc1.weight"].shape == (120, 400)
    assert graph.loss_node == ("Default/network-WithLossCell/_loss_fn-SoftmaxCrossEntropyWithLogits/"
                               "SoftmaxCrossEntropyWithLogits-op9")
    proto = graph.proto
    assert (proto.name, proto.root_name) == ("kernel_graph_0", "0")
    consumed = {i.name for node in proto.node for i in node.input}
    assert {p.name for p in proto.parameters} <= consumed          # an unconsumed parameter would vanish
    for node in proto.node:
        assert node.full_name == f"{node.scope}/{node.op_type}-op{node.name}" and node.HasField("output_type")
    conv1 = next(n for n in proto.node if n.scope == f"{BACKBONE}/conv1-Conv2d")
    assert [i.name for i in conv1.input] == ["data", "conv1.weight"]
    assert sum(n.op_type == "ApplyMomentum" for n in proto.node) == len(WEIGHTS)


@pytest.mark.mindspore
@pytest.mark.mindinsight
@pytest.mark.timeout(300)
def test_mindinsight_lists_the_weights_and_watches_exactly_them(lenet_graph, mindinsight_server):
    """The graph REST call lists the 8 weights (not the optimizer's moments), and a weight watchpoint created in the
    UI reaches the client as a SetCMD over exactly those parameters."""
    graph, _model = lenet_graph
    rest = mindinsight_server.rest
    transport = Transport(mindinsight_server.grpc_address)
    try:
        assert transport.send_metadata(pb.Metadata(device_name="0:0", backend="GPU", ms_version="2.10.0",
                                                   graph_num=1)).version_matched
        transport.send_graph(graph.proto.SerializeToString())
        wait = start_wait_cmd(transport, pb.Metadata(device_name="0:0", cur_step=0, backend="GPU"))
        rest.wait_for_state("waiting")

        found = [n["name"] for n in _walk(rest.search("", node_category="weight")["nodes"])
                 if n["type"] == "Parameter"]
        assert sorted(name.rsplit("/", 1)[-1] for name in found) == sorted(WEIGHTS)
        assert all(name.startswith(BACKBONE + "/") for name in found)
        conv1 = {n["name"]: n["type"] for n in rest.retrieve_node(f"{BACKBONE}/conv1-Conv2d")["graph"]["nodes"]}
        assert conv1 == {f"{BACKBONE}/conv1-Conv2d/Conv2d-op1": "Conv2d", f"{BACKBONE}/conv1-Conv2d/data": "Parameter",
                         f"{BACKBONE}/conv1-Conv2d/conv1.weight": "Parameter"}

        watchpoint = rest.create_watchpoint("weight_too_large", {"max_gt": 1.0})["id"]
        rest.continue_steps(1)
        command = wait.result(timeout=20)
        assert command.WhichOneof("cmd") == "set_cmd" and command.set_cmd.id == watchpoint
        watched = sorted(n.node_name for n in command.set_cmd.watch_nodes)
        assert watched == sorted(found)
        assert command.set_cmd.watch_condition.condition == pb.WatchCondition.tensor_too_large
        wait = start_wait_cmd(transport, pb.Metadata(device_name="0:0", cur_step=0, backend="GPU"))
        while (command := wait.result(timeout=20)).WhichOneof("cmd") != "run_cmd" or \
                command.run_cmd.run_level != "step":     # the recheck MindInsight queues at step 0 comes first
            wait = start_wait_cmd(transport, pb.Metadata(device_name="0:0", cur_step=0, backend="GPU"))
        wait = start_wait_cmd(transport, pb.Metadata(device_name="0:0", cur_step=1, backend="GPU"))
        rest.wait_for(lambda r: r["metadata"]["step"] == 1 and r["metadata"]["state"] == "waiting", what="step 1")
        rest.terminate()
        assert wait.result(timeout=20).exit
        rest.wait_for_state("pending")
    finally:
        rest.reset()
        transport.close()


@pytest.mark.mindspore
@pytest.mark.timeout(180)
def test_light_graph_has_gradient_nodes_stacks_and_captures_only_what_is_wanted():
    """PyNative (MindSpore's default): hooks exist only while wanted; values are the real layer outputs and the
    real gradients the optimizer applied."""
    import numpy as np
    from lenet import make_dataset, make_model

    from msdebug_hooks.debugger.capture import CellCapture

    model, network = make_model(0.01)
    graph = build_graph(model.train_network)
    conv1 = f"{BACKBONE}/conv1-Conv2d/Conv2d-op1"
    grad = f"Gradients/{BACKBONE}/fc3-Dense/GradOf_fc3.bias-op26"
    assert graph.gradients[grad] == "fc3.bias" and len(graph.gradients) == len(WEIGHTS)
    stack = next(n.source_address for n in graph.proto.node if n.full_name == conv1)
    assert "lenet.py" in stack and "def construct(self, x):" in stack      # the script's LeNet5, under Conv2d's

    capture = CellCapture(graph)
    assert not network.conv1._forward_hook and not model._optimizer._forward_pre_hook   # nothing by default
    capture.want({conv1, grad, "no-such-node"})
    assert len(network.conv1._forward_hook) == 1 and len(model._optimizer._forward_pre_hook) == 1
    before = network.fc3.bias.asnumpy().copy()
    model.train(1, make_dataset(1), dataset_sink_mode=False)
    assert capture.values[conv1].shape == (32, 6, 28, 28)
    lr = 0.01   # Momentum at step 1: bias -= lr * gradient (the moment starts at zero)
    np.testing.assert_allclose(before - lr * capture.values[grad], network.fc3.bias.asnumpy(), rtol=1e-5, atol=1e-7)
    capture.want(set())
    assert not network.conv1._forward_hook and not model._optimizer._forward_pre_hook and not capture.values
