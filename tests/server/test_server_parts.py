"""Parts of our debugger server that need no training: how a ``GraphProto`` becomes nodes (MindInsight's rules),
how tensor pieces are reassembled and refused, what a ``SetCMD`` carries, and a protocol client that is not ours
(raw gRPC calls in the C++ client's order: multi-graph, version refusal, training_done)."""
from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.conditions import TensorRangeCondition, TensorUnchangedCondition
from msdebug_hooks.server import DebuggerServer, JobState
from msdebug_hooks.server import commands
from msdebug_hooks.server.graph import parse_graph
from msdebug_hooks.server.tensors import assemble

F32 = graph_pb.TypeProto(data_type=graph_pb.DT_TENSOR,
                         tensor_type=graph_pb.TypeProto.Tensor(elem_type=graph_pb.DT_FLOAT32))
PAIR = graph_pb.TypeProto(data_type=graph_pb.DT_TUPLE, sequence_type=graph_pb.TypeProto.Sequence(elem_types=[F32, F32]))
TRACE = ("# In file /venv/site-packages/mindspore/ops/functional.py:10/    return relu_op(x)/\n"
         "# In file /home/me/train.py:42, 8~20/        x = ops.relu(x)/\n"
         "# In file /home/me/train.py:40/    def construct(self, x):/")


def _graph(name: str = "kernel_graph_0", prefix: str = "") -> graph_pb.GraphProto:
    g = graph_pb.GraphProto(name=name, root_name=name.rsplit("_", 1)[-1])
    for param in ("x", "fc.weight", "fc.bias", "moments.fc.weight", "unused.weight"):
        g.parameters.add(name=f"{prefix}{param}", type=F32)
    scope = "Default/net-Net/fc-Dense"
    g.node.add(name="1", op_type="MatMul", scope=scope, full_name=f"{scope}/MatMul-op1{prefix}",
               input=[graph_pb.InputProto(name=f"{prefix}x"), graph_pb.InputProto(name=f"{prefix}fc.weight")],
               output_type=F32)
    g.node.add(name="2", op_type="ReLU", scope="Default/net-Net", full_name=f"Default/net-Net/ReLU-op2{prefix}",
               input=[graph_pb.InputProto(name="1"), graph_pb.InputProto(name=f"{prefix}fc.bias")], output_type=PAIR,
               source_address=TRACE)
    g.node.add(name="3", op_type="ReluGrad", scope="Gradients/Default/net-Net",
               full_name=f"Gradients/Default/net-Net/ReluGrad-op3{prefix}", input=[graph_pb.InputProto(name="2")],
               output_type=F32)
    g.node.add(name="4", op_type="ApplyMomentum", scope="Default/optimizer-Momentum",
               full_name=f"Default/optimizer-Momentum/ApplyMomentum-op4{prefix}",
               input=[graph_pb.InputProto(name=f"{prefix}fc.weight"),
                      graph_pb.InputProto(name=f"{prefix}moments.fc.weight")])          # no output_type
    g.node.add(name="5", op_type="name_scope", scope="Default", full_name=f"Default/net_scope{prefix}")
    return g


def test_graph_nodes_follow_mindinsight_rules():
    graph = parse_graph([_graph()])
    by_short = {n.short_name: n for n in graph}
    assert "unused.weight" not in by_short                                  # fed no op: dropped
    weight = graph.node("fc.weight")
    assert (weight.name, weight.category, weight.outputs) == ("Default/net-Net/fc-Dense/fc.weight", "weight", 1)
    assert graph.node("moments.fc.weight").category == "parameter"          # optimizer state: not a weight
    assert graph.node("x").category == "parameter"
    relu = graph.node("ReLU-op2")
    assert (relu.category, relu.outputs) == ("activation", 2)               # a tuple output: two slots
    assert relu.inputs == ("Default/net-Net/fc-Dense/MatMul-op1", "Default/net-Net/fc.bias")  # its consumer scope
    assert relu.source == "/home/me/train.py:42  x = ops.relu(x)"           # not MindSpore's, not the def line
    assert graph.node("ReluGrad-op3").category == "gradient"
    assert graph.node("ApplyMomentum-op4").outputs == 0                     # nothing to view or watch
    assert "Default/net_scope" not in graph                                 # a scope is no node
    assert [n.short_name for n in graph.search(category="weight")] == ["fc.weight", "fc.bias"]
    assert [n.short_name for n in graph.search("*Momentum*", watchable=True)] == ["moments.fc.weight"]
    assert [n.short_name for n in graph.search(stack="train.py:42")] == ["ReLU-op2"]
    with pytest.raises(KeyError, match="did you mean"):
        graph.node("fc.weigth")
    with pytest.raises(ValueError, match="category='weights' is not allowed"):
        graph.search(category="weights")


def test_pieces_are_joined_until_finished_and_bad_ones_refused():
    value = np.arange(12, dtype=np.float64).reshape(3, 4)
    data = value.tobytes()
    pieces = [graph_pb.TensorProto(node_name="n", slot="1", tensor_content=data[:40]),
              graph_pb.TensorProto(node_name="n", slot="1", tensor_content=data[40:], finished=True, dims=[3, 4],
                                   data_type=graph_pb.DT_FLOAT64, iter="prev"),
              graph_pb.TensorProto(node_name="missing", slot="0", finished=True),
              graph_pb.TensorProto(node_name="short", tensor_content=b"\0" * 6, finished=True, dims=[2],
                                   data_type=graph_pb.DT_FLOAT32),
              graph_pb.TensorProto(node_name="odd", tensor_content=b"\0" * 4, finished=True, data_type=14)]
    joined, missing, short, odd = assemble(pieces)
    np.testing.assert_array_equal(joined.value, value)
    assert (joined.slot, joined.previous) == ("1", True)
    assert missing.value is None and missing.problem == ""
    assert short.value is None and "6 bytes for dims=[2]" in short.problem
    assert odd.value is None and "data_type=14" in odd.problem


def test_set_command_carries_every_parameter_in_order_with_disabled_ones():
    graph = parse_graph([_graph()])
    reply = commands.set_watchpoint(3, TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1,
                                                            range_percentage_lt=50), [graph.node("fc.weight")])
    params = [(p.name, p.value, p.disabled) for p in reply.set_cmd.watch_condition.params]
    assert params == [("range_start_inclusive", -1.0, False), ("range_end_inclusive", 1.0, False),
                      ("range_percentage_lt", 50.0, False), ("range_percentage_gt", 0.0, True),
                      ("max_min_lt", 0.0, True), ("max_min_gt", 0.0, True)]
    node = reply.set_cmd.watch_nodes[0]
    assert (node.node_name, node.node_type, node.graph_name) == ("Default/net-Net/fc-Dense/fc.weight", "Parameter",
                                                                 "kernel_graph_0")
    hidden = commands.set_watchpoint(4, TensorUnchangedCondition(), []).set_cmd.watch_condition.params
    assert [(p.name, p.value, p.disabled) for p in hidden] == [("rtol", 1e-5, False), ("atol", 1e-8, False),
                                                               ("equal_nan", 0.0, False)]


def _stub(channel):
    unary = {name: channel.unary_unary(f"/debugger.EventListener/{name}", request_serializer=kind.SerializeToString,
                                       response_deserializer=pb.EventReply.FromString)
             for name, kind in (("WaitCMD", pb.Metadata), ("SendMetadata", pb.Metadata),
                                ("SendHeartbeat", pb.Heartbeat))}
    multi = channel.stream_unary("/debugger.EventListener/SendMultiGraphs",
                                 request_serializer=pb.Chunk.SerializeToString,
                                 response_deserializer=pb.EventReply.FromString)
    return unary, multi


def test_a_raw_protocol_client_with_two_graphs_runs_steps_and_ends_with_training_done():
    with DebuggerServer(port=0, log_reports=False) as server, grpc.insecure_channel(server.address) as channel:
        unary, multi = _stub(channel)
        meta = pb.Metadata(device_name="3:0", cur_step=0, backend="GPU", ms_version="1.8.1", graph_num=2)
        assert unary["SendMetadata"](meta, timeout=10).version_matched
        assert unary["WaitCMD"](meta, timeout=10).status == pb.EventReply.FAILED    # no graph yet
        assert unary["SendHeartbeat"](pb.Heartbeat(message="alive", period=3), timeout=10).status == \
            pb.EventReply.FAILED                                                    # period outside 5..3600
        first, second = _graph().SerializeToString(), _graph("kernel_graph_1", "g1_").SerializeToString()
        chunks = [pb.Chunk(buffer=first[:50]), pb.Chunk(buffer=first[50:], finished=True),
                  pb.Chunk(buffer=second, finished=True)]
        assert multi(iter(chunks), timeout=10).status == pb.EventReply.OK
        replies = []
        client = threading.Thread(target=lambda: [replies.append(unary["WaitCMD"](
            pb.Metadata(device_name="3:0", cur_step=step), timeout=60)) for step in range(3)])
        client.start()
        job = server.wait_for_training(timeout=30)
        assert (job.rank, job.graph.graph_names) == (3, ["kernel_graph_0", "kernel_graph_1"])
        assert job.node("g1_fc.weight").graph == "kernel_graph_1"
        job.run(2, timeout=30)
        assert [r.run_cmd.run_level for r in replies] == ["step", "step"] and job.step == 2
        unary["SendMetadata"](pb.Metadata(device_name="3:0", cur_step=2, training_done=True), timeout=10)
        assert job.state is JobState.FINISHED and "finished at step 2" in job.reason
        client.join(30)                                                             # its wait at step 2 ends too
        assert not client.is_alive() and replies[2].status == pb.EventReply.FAILED
        bad = pb.Metadata(device_name="0:0", ms_version="dev")
        with grpc.insecure_channel(server.address) as other:
            assert not _stub(other)[0]["SendMetadata"](bad, timeout=10).version_matched
        assert server.jobs[-1].state is JobState.MISMATCH


@pytest.mark.parametrize("line, said", [("wait abc", "*** wait 'abc': give a number of seconds, e.g. wait 600"),
                                        ("wait 0.2", "*** timed out: ")])
def test_the_prompts_wait_refuses_a_bad_duration_and_says_when_nobody_came(line, said):
    import io

    from msdebug_hooks.server.shell import DebuggerShell

    out = io.StringIO()
    with DebuggerServer(port=0, log_reports=False) as server:
        shell = DebuggerShell(server, stdout=out, interactive=False)
        shell.onecmd(line)
    assert out.getvalue().startswith(said) and shell.bad_input and shell.job is None


def test_the_trainings_warnings_reach_the_prompt_once_and_only_whole_lines(tmp_path):
    """``training_notices.py``: the project's warnings and errors in the training's output log, each text once (a
    loss that stays NaN says so every step), a line still being written left for the next look, INFO, MindSpore's
    and the script's own lines left out; no log (``--output -``): nothing."""
    from msdebug_hooks.server.training_notices import TrainingNotices

    log = tmp_path / "out.log"
    log.write_text("[msdebug] INFO rank 0: debugger: connecting\n"
                   "[WARNING] ME(1:2,MainProcess):2026 some MindSpore line\n"
                   "[msdebug] WARNING rank 0: debugger: the loss of step 2 is inf. Inspect this step now\n"
                   "[msdebug] WARNING rank 0: debugger: the loss of step 2 is inf. Inspect this step now\n"
                   "[msdebug] ERROR rank 0: debugger: cap")
    notices = TrainingNotices(log)
    assert notices.new() == ["warning from the training: rank 0: debugger: the loss of step 2 is inf. Inspect this "
                             "step now"]
    with open(log, "a") as stream:
        stream.write("turing failed\nstep 3\n[msdebug] WARNING rank 0: debugger: the loss of step 2 is inf. Inspect "
                     "this step now\n")
    assert notices.new() == ["error from the training: rank 0: debugger: capturing failed"]
    assert notices.new() == [] and TrainingNotices(None).new() == []
    assert TrainingNotices(tmp_path / "not-yet.log").new() == []
    log.write_text(log.read_text() + "[msdebug] WARNING rank 0: stopping training: the debugger server asked to "
                   "terminate the training at step 2\n")
    assert notices.new() == []          # the prompt's own terminate, echoed: said already
