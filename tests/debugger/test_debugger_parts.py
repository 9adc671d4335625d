"""Small debugger parts without MindInsight: view answers, protocol dtypes, the heartbeat thread."""
from __future__ import annotations

import time

import numpy as np
import pytest

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.wire.dtypes import data_type, numpy_dtype, wire_array
from msdebug_hooks.debugger.heartbeat import Heartbeat
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.views import base_answer, lookup_key, stats_answer, tensor_value_answer

from debug_test_server import DebugTestServer
from mindinsight_server import free_port

pytestmark = pytest.mark.timeout(60)


def test_statistics_match_mindinsight_conventions():
    value = np.array([np.nan, np.inf, -np.inf, -2.0, 0.0, 0.0, 3.0, 5.0], np.float32)
    s = stats_answer(value).statistics
    assert (s.count, s.nan_count, s.pos_inf_count, s.neg_inf_count) == (8, 1, 1, 1)
    assert (s.max_value, s.min_value, s.avg_value) == (5.0, -2.0, pytest.approx(1.2))   # finite values only
    assert (s.neg_zero_count, s.pos_zero_count, s.zero_count) == (1, 2, 2)     # < 0, > 0, == 0
    flags = stats_answer(np.array([True, False, True])).statistics
    assert (flags.is_bool, flags.pos_zero_count, flags.zero_count) == (True, 2, 1)
    assert stats_answer(None).tensor_base.data_size == 0


def test_answers_echo_the_request_and_describe_the_value():
    request = graph_pb.TensorProto(node_name="Default/net/Parameter[5]_0/fc.weight", slot="0", iter="prev",
                                   truncate=True)
    assert lookup_key(request) == ("fc.weight", "0", True)
    assert lookup_key(graph_pb.TensorProto(node_name="Default/net/ReLU-op3", slot="1")) == \
        ("Default/net/ReLU-op3", "1", False)
    value = np.arange(6, dtype=np.int64).reshape(2, 3)
    answer, content = tensor_value_answer(request, value)
    assert (answer.node_name, answer.iter, answer.truncate, answer.finished) == \
        (request.node_name, "prev", True, True)
    assert (list(answer.dims), answer.data_type) == ([2, 3], graph_pb.DT_INT64)
    assert bytes(content) == value.tobytes()
    missing, nothing = tensor_value_answer(request, None)
    assert missing.finished and not missing.tensor_content and not missing.dims and len(nothing) == 0
    assert (base_answer(None).data_type, list(base_answer(None).shape)) == (0, [0])
    scalar = base_answer(np.float32(2.5))
    assert (scalar.data_type, list(scalar.shape), scalar.data_size) == (graph_pb.DT_FLOAT32, [], 4)


def test_dtypes_the_protocol_cannot_carry_are_sent_as_float32_little_endian():
    assert data_type(np.float16) == graph_pb.DT_FLOAT16 and numpy_dtype(graph_pb.DT_UINT8) == np.uint8
    assert data_type(np.longdouble) == graph_pb.DT_UNDEFINED
    assert wire_array(np.array([1.25], np.longdouble)).dtype == np.float32
    assert wire_array(np.float32(2.0)).shape == () and wire_array(np.ones((3, 2)).T).flags.c_contiguous
    big_endian = np.array([1.5, -2.0], dtype=">f4")
    assert wire_array(big_endian).dtype == np.dtype("<f4")
    assert wire_array(big_endian).tobytes() == np.array([1.5, -2.0], "<f4").tobytes()


def test_heartbeat_beats_at_once_and_stops_promptly():
    with DebugTestServer() as server, Transport(server.address) as transport:
        beat = Heartbeat(transport.send_heartbeat, period=30).start()
        deadline = time.monotonic() + 5
        while not server.recorded.heartbeats and time.monotonic() < deadline:
            time.sleep(0.01)
        beat.stop()                        # joins for at most 5 s: a thread stuck in its 30 s sleep is still alive
        assert not beat.alive
    (sent,) = server.recorded.heartbeats
    assert (sent.message, sent.period) == ("Debugger is alive", 30)


def test_heartbeat_gives_up_after_five_failures_without_raising():
    with Transport(f"127.0.0.1:{free_port()}", timeout=1) as transport:
        beat = Heartbeat(transport.send_heartbeat, period=5, retry_after=0.01).start()
        beat._thread.join(20)
    assert not beat.alive and beat.failures == 5 and beat.beats == 0


def test_heartbeat_period_outside_the_server_range_is_refused():
    """Checked once, in the settings every heartbeat's period comes from."""
    from msdebug_hooks.debugger.settings import DebuggerSettings

    with pytest.raises(ValueError, match="heartbeat_period=3 is not allowed: an int 5..3600"):
        DebuggerSettings(heartbeat_period=3)
