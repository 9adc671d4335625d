"""The session state machine against our in-process test server (real gRPC, real transport, no MindInsight):
what each command makes the client do, in the order the protocol doc prescribes."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.session import Decision, DebuggerSession, SessionState
from msdebug_hooks.debugger.transport import Transport

from debug_test_server import reassemble_tensors
from session_rig import LOSS_NODE, SCOPE, WEIGHT_NODE, Cond, run_cmd, session_graph, set_cmd, view_cmd
from mindinsight_server import free_port

pytestmark = pytest.mark.timeout(60)

def test_connect_reports_version_backend_and_graph_then_suspends_at_step_0(session, server):
    assert session.connect()
    (meta,) = server.recorded.metadata
    assert (meta.device_name, meta.cur_step, meta.backend, meta.ms_version, meta.graph_num) == \
        ("0:0", 0, "GPU", "2.10.0", 1)
    assert graph_pb.GraphProto.FromString(b"".join(c.buffer for c in server.recorded.graph_streams[0])).name == \
        "kernel_graph_0"
    server.command(run_cmd())
    assert session.suspend() is Decision.RUN and session.state is SessionState.RUNNING
    assert [w.cur_step for w in server.recorded.waits] == [0]


def test_a_watchpoint_hit_at_step_end_echoes_every_parameter(session, server, values):
    session.connect()
    server.command(set_cmd(1, Cond.tensor_too_large, [("abs_mean_gt", 0, True), ("max_gt", 1.0, False),
                                                   ("min_gt", 0, True), ("mean_gt", 0, True)]))
    server.command(run_cmd())
    assert session.suspend() is Decision.RUN
    assert not server.recorded.hit_streams                       # nothing evaluated at the initial suspension
    values["fc.weight"] = np.array([[0.1, 3.0, 0.2], [0.0, 0.0, 0.0]], np.float32)
    server.command(run_cmd())
    assert session.step_end() is Decision.RUN
    (hits,) = server.recorded.hit_streams
    (hit,) = hits
    assert (hit.id, hit.error_code, hit.tensor.node_name, hit.tensor.slot) == (1, 0, WEIGHT_NODE, "0")
    params = {p.name: (p.disabled, p.hit, p.actual_value) for p in hit.watch_condition.params}
    assert params == {"abs_mean_gt": (True, False, 0.0), "max_gt": (False, True, 3.0),
                      "min_gt": (True, False, 0.0), "mean_gt": (True, False, 0.0)}
    assert [w.cur_step for w in server.recorded.waits] == [0, 0, 1]
    assert server.recorded.order[-2:] == ["SendWatchpointHits", "WaitCMD"]   # hits first, then the wait


def test_change_conditions_compare_with_the_value_at_the_previous_suspension(session, server, values):
    session.connect()
    server.command(set_cmd(2, Cond.tensor_not_changed, [("rtol", 1e-5, False), ("atol", 0, True),
                                                     ("equal_nan", 0, True)]))
    server.command(set_cmd(3, Cond.tensor_change_too_large, [("abs_mean_update_ratio_gt", 0.5, False),
                                                          ("epsilon", 0, True)]))
    server.command(run_cmd())
    session.suspend()
    server.command(run_cmd())
    session.step_end()                                            # unchanged weight: not_changed hits
    assert [h.id for h in server.recorded.hit_streams[0]] == [2]
    values["fc.weight"] = values["fc.weight"] * 3                 # ratio |1.5-0.5|/0.5 = 2 > 0.5
    server.command(run_cmd())
    session.step_end()
    (hit,) = server.recorded.hit_streams[1]
    assert hit.id == 3 and hit.watch_condition.params[0].actual_value == pytest.approx(2.0)


def test_recheck_at_step_0_evaluates_only_initialization_and_stays(session, server, values):
    values["fc.weight"] = np.zeros((2, 3), np.float32)
    session.connect()
    server.command(set_cmd(4, Cond.tensor_initialization, [("zero_percentage_ge", 100, False), ("max_gt", 0, True),
                                                       ("min_lt", 0, True)]))
    server.command(set_cmd(5, Cond.tensor_all_zero, [("zero_percentage_ge", 50, False)]))
    server.command(pb.EventReply(run_cmd=pb.RunCMD(run_level="recheck")))
    server.command(run_cmd())
    assert session.suspend() is Decision.RUN
    assert [h.id for h in server.recorded.hit_streams[0]] == [4]  # all_zero waits for the first step end
    assert len(server.recorded.waits) == 4                        # set, set, recheck, run: one wait each


def test_views_answer_each_request_in_order_at_every_level(session, server, values):
    big = np.arange(1_200_000, dtype=np.float32).reshape(1000, 1200)    # 4.8 MB: chunked
    values["fc.weight"] = big
    session.connect()
    server.command(view_cmd(pb.ViewCMD.base, (WEIGHT_NODE, "", True), (f"{SCOPE}/Dense-op1", "", False)))
    server.command(view_cmd(pb.ViewCMD.statistics, (LOSS_NODE, "", False)))
    server.command(view_cmd(pb.ViewCMD.value, (WEIGHT_NODE, "", True), (WEIGHT_NODE, "prev", True)))
    server.command(run_cmd())
    session.suspend()
    bases = server.recorded.base_streams[0]
    assert [(b.data_type, list(b.shape), b.data_size) for b in bases] == \
        [(graph_pb.DT_FLOAT32, [1000, 1200], big.nbytes), (0, [0], 0)]
    (summary,) = server.recorded.stat_streams[0]
    assert (summary.statistics.count, summary.statistics.max_value, summary.statistics.pos_zero_count) == (1, 2.5, 1)
    weight, prev = reassemble_tensors(server.recorded.tensor_streams[0])
    assert len(server.recorded.tensor_streams[0]) == 3             # 2 pieces + the empty "prev" answer
    np.testing.assert_array_equal(np.frombuffer(weight.tensor_content, np.float32).reshape(1000, 1200), big)
    assert (weight.node_name, weight.truncate, list(weight.dims)) == (WEIGHT_NODE, True, [1000, 1200])
    assert (prev.iter, prev.tensor_content) == ("prev", b"")       # step 0: no previous step yet
    assert values.reads == 2                                       # each tensor read once per suspension


def test_deleted_watchpoints_stop_hitting(session, server):
    session.connect()
    server.command(set_cmd(6, Cond.tensor_general_overflow, []))
    server.command(pb.EventReply(set_cmd=pb.SetCMD(id=6, delete=True)))
    server.command(run_cmd())
    session.suspend()
    server.command(run_cmd())
    session.step_end()
    assert not session.watchpoints and not server.recorded.hit_streams


def test_exit_ends_the_session_and_stops_the_heartbeat(session, server):
    session.connect()
    server.command(pb.EventReply(exit=True))
    assert session.suspend() is Decision.EXIT
    assert session.state is SessionState.EXITED and not session._heartbeat.alive
    assert session.step_end() is Decision.EXIT


def test_a_paused_training_logs_progress_until_continued(session, server, caplog):
    session.connect()
    result = []
    worker = threading.Thread(target=lambda: result.append(session.suspend()))
    with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
        worker.start()
        server.wait_for_waits(1)
        worker.join(0.7)                                           # paused: nobody answers the WaitCMD
        assert worker.is_alive()
        server.command(run_cmd())
        worker.join(5)
    assert result == [Decision.RUN]
    assert any("training paused at step 0, waiting for the debugger server" in r.message for r in caplog.records)


def test_repeated_failed_waits_lose_the_server_and_training_goes_on(session, server):
    """Five FAILED answers in a row: the server is lost (on_server_lost="continue": run on, reconnect later;
    the reconnect itself is tested in test_debugger_faults.py)."""
    session.connect()
    for _ in range(5):
        server.command(pb.EventReply(status=pb.EventReply.FAILED))
    assert session.suspend() is Decision.RUN
    assert session.state is SessionState.DISCONNECTED and len(server.recorded.waits) == 5
    assert session.losses == 1


def test_no_server_means_one_warning_and_no_hang(values, caplog):
    session = DebuggerSession(Transport(f"127.0.0.1:{free_port()}", timeout=2), session_graph(), values,
                              ms_version="2.10.0")
    with caplog.at_level(logging.WARNING, logger="msdebug_hooks.debugger"):
        assert not session.connect()
        assert session.suspend() is Decision.DETACHED and session.step_end() is Decision.DETACHED
        session.finish()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "training continues without the debugger" in warnings[0].message


def test_training_done_is_reported_at_the_end(session, server):
    session.connect()
    server.command(run_cmd())
    session.suspend()
    server.command(run_cmd())
    session.step_end()
    session.finish()
    assert server.recorded.metadata[-1].training_done and server.recorded.metadata[-1].cur_step == 1


def test_a_session_takes_its_settings_checked_once(server, values):
    """``settings`` (or its fields one by one, over it) decide the device name, heartbeat and pause lines; a bad value
    is refused by ``DebuggerSettings`` with its usual message before anything starts."""
    from msdebug_hooks.debugger.settings import DebuggerSettings
    from msdebug_hooks.errors import ConfigError

    settings = DebuggerSettings(device_id=3, heartbeat_period=60, on_server_lost="stop")
    session = DebuggerSession(Transport(server.address, timeout=5), session_graph(), values, ms_version="2.10.0",
                              settings=settings, progress_interval=0.2)
    try:
        assert session.settings == DebuggerSettings(device_id=3, heartbeat_period=60, on_server_lost="stop",
                                                    progress_interval=0.2)
        assert session.device_name == "3:0" and session.connect()
        (beat,) = server.recorded.heartbeats[:1]
        assert beat.period == 60
    finally:
        session.close()
    for name, value in (("heartbeat_period", 3), ("reconnect_interval", 0), ("max_view_bytes", -1)):
        with Transport(server.address, timeout=5) as transport, pytest.raises(ConfigError, match=f"{name}={value}"):
            DebuggerSession(transport, session_graph(), values, ms_version="2.10.0", **{name: value})
