"""The debugger never hurts a training it was not asked to stop: each server fault of issue 6 against a real LeNet
training (in this process, through ``DebuggerCallback``), compared with an undebugged run of the same seeded model:
same number of steps, same losses. The servers are ``FaultServer`` (tests/helpers/fault_server.py); none of these
tests may hang (pytest-timeout, servers stopped and subprocesses killed in ``finally``)."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb

from project import EXAMPLES, ROOT
from fault_server import RUN, FaultServer
from mindinsight_server import free_port

pytestmark = [pytest.mark.timeout(90), pytest.mark.mindspore]
BATCHES = 12


def _train(callbacks, batches: int = BATCHES, extra=None) -> list[float]:
    """Train the seeded LeNet for one epoch of ``batches``; the loss of every step that ran."""
    from _recording import train_losses

    return train_losses(callbacks, batches, on_step=extra)


@pytest.fixture(scope="module")
def reference() -> list[float]:
    losses = _train([], batches=30)
    assert len(losses) == 30 and losses[0] != losses[-1]
    return losses


def _debugger(port: int, **options):
    from msdebug_hooks.debugger.callback import DebuggerCallback

    options.setdefault("rpc_timeout", 2)
    options.setdefault("connect_timeout", 1)
    return DebuggerCallback("127.0.0.1", port, **options)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("msdebug_hooks.debugger")]


def test_server_absent_at_start_trains_undebugged_with_one_warning(reference, caplog):
    port = free_port()
    debugger = _debugger(port)
    with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
        losses = _train([debugger])
    assert losses == reference[:BATCHES]
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "after 4 attempts" in warnings[0] and f"127.0.0.1:{port}" in warnings[0]
    assert debugger.session.state.value == "detached"


def test_server_killed_mid_run_training_goes_on_and_a_new_server_is_attached(reference, caplog):
    """Continue mode; the server dies at the 4th wait (step 3). Training runs on at once; a new server on the same
    port is found at a later step end and gets metadata and graph again, then training finishes under it."""
    port = free_port()
    second: list[FaultServer] = []
    debugger = _debugger(port, heartbeat_period=5)

    def at_step(step: int) -> None:
        session = debugger.session
        if step == 5 and not second:
            assert session.state.value == "disconnected"       # lost at step 3, training went on
            second.append(FaultServer(port).__enter__())
            second[0].auto_reply = RUN
        if second and session.reconnects == 0 and step < 29:
            threading.Event().wait(0.2)                         # slow steps until the reconnect attempt is due

    first = FaultServer(port)
    try:
        with first:
            first.auto_reply = RUN
            first.die_after_waits = 4
            with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
                losses = _train([debugger], batches=30, extra=at_step)
        assert losses == reference
        assert [w.cur_step for w in first.recorded.waits] == [0, 1, 2, 3]
        session = debugger.session
        assert (session.losses, session.reconnects) == (1, 1)
        new = second[0].recorded
        assert new.metadata[0].ms_version and new.metadata[0].cur_step >= 5 and len(new.graph_streams) == 1
        steps = [w.cur_step for w in new.waits]
        assert steps[0] == new.metadata[0].cur_step and steps == list(range(steps[0], 31))
        assert new.metadata[-1].training_done and new.metadata[-1].cur_step == 30
    finally:
        for server in second:
            server.__exit__()


@pytest.mark.parametrize("policy", ["continue", "stop"])
def test_server_killed_while_paused_applies_the_policy(reference, policy):
    """Paused at step 3 (nobody answers the wait); the server is killed. ``continue``: training runs to the end;
    ``stop``: it stops cleanly at step 3 (end hooks run)."""
    port = free_port()
    debugger = _debugger(port, on_server_lost=policy)
    with FaultServer(port) as server:
        for _ in range(4):
            server.command(RUN)                                  # initial suspension, steps 1..3
        killer = threading.Thread(target=lambda: (server.wait_for_waits(5, timeout=60), server.die()), daemon=True)
        killer.start()
        losses = _train([debugger])
        killer.join(10)
    assert debugger.session.losses == 1
    if policy == "continue":
        assert losses == reference[:BATCHES]
    else:
        assert losses == reference[:4] and debugger.session.state.value == "exited"


def test_frozen_server_while_paused_is_detected_by_the_heartbeat(reference, caplog):
    """A server that accepts calls and never answers (hung process, half-open connection): the blocked wait has
    no deadline, but five failed heartbeats reopen the channel, which ends the wait; training runs on."""
    port = free_port()
    debugger = _debugger(port, rpc_timeout=1, heartbeat_period=5)
    with FaultServer(port) as server:
        for _ in range(3):
            server.command(RUN)
        freezer = threading.Thread(target=lambda: (server.wait_for_waits(4, timeout=60), server.freeze()),
                                   daemon=True)
        freezer.start()
        with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
            losses = _train([debugger])
        freezer.join(10)
    assert losses == reference[:BATCHES]
    assert debugger.session.losses == 1
    assert any("heartbeat failed 5 times" in w for w in _warnings(caplog))


def test_slow_server_is_bounded_by_deadlines(reference, caplog):
    """A server slower than every deadline: the first contact times out (4 bounded attempts), training runs
    undebugged; no call waits longer than its deadline."""
    port = free_port()
    debugger = _debugger(port, rpc_timeout=0.3, connect_timeout=0.3)
    with FaultServer(port) as server:
        server.delays["SendMetadata"] = 2.0
        with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
            losses = _train([debugger])
    assert losses == reference[:BATCHES]
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "DEADLINE_EXCEEDED" in warnings[0] and "after 4 attempts" in warnings[0]
    assert 1 <= len(server.recorded.metadata) <= 4       # an attempt may expire before the server records it


def test_slow_answers_to_views_and_hits_do_not_stop_the_session():
    """Session level: a view whose answer times out is logged and the session keeps obeying commands."""
    import numpy as np

    from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
    from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
    from msdebug_hooks.debugger.session import Decision, DebuggerSession
    from msdebug_hooks.debugger.transport import Transport

    proto = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    proto.parameters.add(name="w")
    graph = DebugGraph(proto, {"w": GraphParameter("w", "weight", (2,), np.dtype(np.float32), source="live")})
    with FaultServer() as server:
        server.delays["SendTensorStats"] = 1.5
        session = DebuggerSession(Transport(server.address, timeout=0.5, stream_timeout=0.3), graph,
                                  lambda name: np.ones(2, np.float32), ms_version="2.10.0")
        try:
            assert session.connect()
            server.command(pb.EventReply(view_cmd=pb.ViewCMD(level=pb.ViewCMD.statistics, tensors=[
                graph_pb.TensorProto(node_name="Default/w", slot="0", truncate=True)])))
            server.command(RUN)
            assert session.suspend() is Decision.RUN and session.state.value == "running"
        finally:
            session.close()


def test_ctrl_c_while_paused_ends_the_job_promptly(tmp_path):
    """SIGINT to a training paused in the debugger: KeyboardInterrupt reaches the training thread, the callback
    still tells the server training is done, and the process exits (no hang)."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]))
    with FaultServer(port) as server:
        for _ in range(3):
            server.command(RUN)                                   # initial suspension, steps 1, 2
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "scripts" / "fault_train.py"), str(port), "20"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            server.wait_for_waits(4, timeout=60)                  # paused at the end of step 3
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=20)                 # raises (and the test fails) if it hangs
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode != 0 and "KeyboardInterrupt" in out, out
    assert "step 2 loss" in out and "step 3 loss" not in out and "training finished" not in out
    assert server.recorded.metadata[-1].training_done and server.recorded.metadata[-1].cur_step == 3


def _tiny_session(server, **options):
    import numpy as np

    from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
    from msdebug_hooks.debugger.graph import DebugGraph
    from msdebug_hooks.debugger.session import DebuggerSession
    from msdebug_hooks.debugger.transport import Transport

    graph = DebugGraph(graph_pb.GraphProto(name="kernel_graph_0", root_name="0"))
    return DebuggerSession(Transport(server.address, timeout=1), graph, lambda name: np.zeros(1),
                           ms_version="2.10.0", sleep=lambda s: None, **options)


def test_heartbeat_loss_during_a_step_makes_the_next_wait_fail_at_once():
    """The heartbeat gives up while a step runs (no wait in flight): the next step end must not start a wait on
    the frozen server (it would block forever); training runs on."""
    with FaultServer() as server:
        session = _tiny_session(server)
        try:
            assert session.connect()
            server.command(RUN)
            assert session.suspend().value == "run"
            server.freeze()
            session._heartbeat_lost(session._epoch)            # what the heartbeat thread does after 5 failures
            assert session.step_end().value == "run" and session.state.value == "disconnected"
            assert len(server.recorded.waits) == 1
        finally:
            session.close()


def test_a_server_that_comes_back_after_failed_waits_gets_the_session_again():
    """MindInsight answers FAILED after it reset its session (e.g. missed heartbeats): after five, the session is
    re-established with metadata and graph at a later step end, without a new process."""
    with FaultServer() as server:
        session = _tiny_session(server, reconnect_interval=0.01)
        try:
            assert session.connect()
            for _ in range(5):
                server.command(pb.EventReply(status=pb.EventReply.FAILED))
            assert session.suspend().value == "run" and session.state.value == "disconnected"
            server.auto_reply = RUN
            threading.Event().wait(0.05)
            assert session.step_end().value == "run" and session.reconnects == 1
            assert len(server.recorded.metadata) == 2 and len(server.recorded.graph_streams) == 2
            assert server.recorded.metadata[1].cur_step == 1 and server.recorded.waits[-1].cur_step == 1
        finally:
            session.close()


def test_keepalive_shorter_than_the_server_ping_policy_would_kill_a_paused_wait():
    """Why the transport's keepalive is 6 minutes: a gRPC server with default settings (MindInsight's) answers
    pings more frequent than every 5 minutes with GOAWAY "too_many_pings", which ends the very wait a paused
    training sits in. Shown here with a 1 s keepalive; the default is above the server's 5-minute minimum."""
    import inspect

    from msdebug_hooks.debugger.transport import ServerUnavailable, Transport

    assert inspect.signature(Transport).parameters["keepalive_s"].default >= 300
    with FaultServer() as server:
        transport = Transport(server.address, keepalive_s=1)
        try:
            with pytest.raises(ServerUnavailable, match="(?i)too many pings|too_many_pings"):
                transport.wait_cmd(pb.Metadata())              # nobody answers: only the pings can end it
        finally:
            transport.close()
