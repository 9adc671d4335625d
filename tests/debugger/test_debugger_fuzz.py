"""A hostile or broken server: thousands of random ``WaitCMD`` answers (random valid-ish ``EventReply`` structures,
mutated messages, random bytes, oversized messages) through a raw gRPC handler. The client must neither crash nor
hang, must refuse what is invalid without tripping its last-resort guard, and a real training under such a server
must end with the same steps and losses as an undebugged one."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.session import Decision, DebuggerSession, SessionState
from msdebug_hooks.debugger.transport import Transport

from project import run_python
from fault_server import RUN, FaultServer
from session_rig import LOSS_NODE, SCOPE, WEIGHT_NODE, session_graph

pytestmark = pytest.mark.timeout(150)
TESTS = Path(__file__).resolve().parents[1]
NAMES = [WEIGHT_NODE, LOSS_NODE, f"{SCOPE}/Dense-op1", "fc.weight",
         "", "Default/unknown/x", "x" * 5000, "Default/\u00e9\u4e2d/\U0001f600"]
PARAM_NAMES = ["abs_mean_gt", "abs_mean_lt", "max_gt", "min_lt", "mean_gt", "range_start_inclusive",
               "range_end_inclusive", "range_percentage_gt", "epsilon", "atol", "rtol", "equal_nan",
               "abs_mean_update_ratio_gt",
               "max_min_gt", "param", "", "?" * 80]
NUMBERS = [0.0, 1.0, -1.0, 1e-9, 1e300, -1e300, math.nan, math.inf, -math.inf, 0.5, 100.0, 2.0 ** 63]


def _text(rng: np.random.Generator, choices: list[str]) -> str:
    if rng.random() < 0.15:
        return bytes(rng.integers(32, 127, int(rng.integers(0, 30))).astype(np.uint8)).decode()
    return choices[int(rng.integers(len(choices)))]


def _number(rng: np.random.Generator) -> float:
    return NUMBERS[int(rng.integers(len(NUMBERS)))] if rng.random() < 0.6 else float(rng.normal(0, 1e3))


def random_reply(rng: np.random.Generator, *, allow_exit: bool = True) -> pb.EventReply:
    """A random EventReply: any status, any command kind, fields from plausible to absurd."""
    reply = pb.EventReply(status=int(rng.choice([0, 0, 0, 1, 2, 7, -3])))
    kind = int(rng.integers(6 if allow_exit else 5))
    if kind == 0:
        reply.run_cmd.run_level = _text(rng, ["step", "step", "node", "recheck", "", "STEP", "pause"])
        reply.run_cmd.run_steps = int(rng.choice([1, 0, -1, -2, 2 ** 31 - 1, -(2 ** 31), int(rng.integers(-9, 9))]))
        if rng.random() < 0.3:
            reply.run_cmd.node_name = _text(rng, NAMES)
    elif kind == 1:
        cmd = reply.set_cmd
        cmd.id = int(rng.choice([1, 2, 3, 0, -1, 2 ** 31 - 1, -(2 ** 31), int(rng.integers(1, 50))]))
        cmd.delete = bool(rng.random() < 0.2)
        for _ in range(int(rng.choice([0, 1, 1, 2, 5]))):
            cmd.watch_nodes.add(node_name=_text(rng, NAMES), node_type=_text(rng, ["Parameter", "MatMul", ""]))
        cmd.watch_condition.condition = int(rng.choice([0, 1, 2, 3, 6, 8, 9, 10, 13, 15, 16, 17, 18, 19, 20, 22,
                                                        23, 24, 25, 26, 27, 28, 29, 30, 31, 99, -1]))
        cmd.watch_condition.value = _number(rng)
        for _ in range(int(rng.choice([0, 1, 2, 3, 40]))):
            cmd.watch_condition.params.add(name=_text(rng, PARAM_NAMES), value=_number(rng),
                                           disabled=bool(rng.random() < 0.3))
    elif kind == 2:
        cmd = reply.view_cmd
        cmd.level = int(rng.choice([0, 1, 2, 3, -1]))
        count = int(rng.choice([0, 1, 1, 2, 5, 20, 11_000]))
        for _ in range(count):
            cmd.tensors.add(node_name=_text(rng, NAMES[:4] * 6 + NAMES[4:]),
                            slot=_text(rng, ["0", "0", "0", "1", "", "abc", "9" * 9]),
                            iter=_text(rng, ["", "", "", "prev", "prev", "next"]), truncate=bool(rng.random() < 0.5))
    elif kind == 3:
        reply.version_matched = bool(rng.random() < 0.5)
    elif kind == 4:
        pass                                     # no command at all
    else:
        reply.exit = bool(rng.random() < 0.7)
    return reply


def random_wire(rng: np.random.Generator) -> object:
    """One WaitCMD answer as it goes on the wire: a structure, a mutated one, random bytes, or (rarely) an
    oversized message."""
    roll = rng.random()
    if roll < 0.70:
        return random_reply(rng)
    if roll < 0.85:
        data = bytearray(random_reply(rng).SerializeToString())
        for _ in range(int(rng.integers(1, 4))):
            if data:
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        return bytes(data)
    if roll < 0.9995:
        return bytes(rng.integers(0, 256, int(rng.integers(0, 300))).astype(np.uint8))
    return b"\x12" + b"\xff" * 5 * 1024 * 1024     # over the 4 MiB reply limit


VALUES = {"fc.weight": np.array([[0.5, np.nan, 1.0], [2.0, -np.inf, 0.0]], np.float32), NAMES[1]: np.float32(2.5)}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_five_thousand_random_replies_neither_crash_nor_hang():
    """Run in a fresh interpreter: once MindSpore was imported in the pytest process (an earlier in-process test), it
    forces the pure-Python protobuf parser there, and 5,200 replies then take minutes. The child uses the default
    (C) parser, which is what a training uses unless MindSpore imported first; the count and checks are unchanged."""
    proc = run_python(f"""
        import sys
        sys.path[:0] = [{str(TESTS / "debugger")!r}, {str(TESTS / "helpers")!r}]
        from google.protobuf.internal import api_implementation
        assert api_implementation.Type() != "python", api_implementation.Type()
        import test_debugger_fuzz
        test_debugger_fuzz.five_thousand_random_replies()
    """, timeout=850)
    print(proc.stdout)


def five_thousand_random_replies() -> None:
    """The client neither crashes nor hangs on 5,200 random replies, refuses the invalid ones without its
    last-resort guard firing, and still steps, views and reports hits between them."""
    rng = np.random.default_rng(6)
    total = 5200
    with FaultServer() as server:
        for _ in range(total):
            server.command(RUN if rng.random() < 0.2 else random_wire(rng))   # a valid step now and then
        server.auto_reply = pb.EventReply(exit=True)              # once the stream is spent: end
        sessions = []
        steps = 0
        while not server.commands.empty() and len(sessions) < 2000:
            transport = Transport(server.address, timeout=2, stream_timeout=5)
            session = DebuggerSession(transport, session_graph(), VALUES.get, ms_version="2.10.0",
                                      progress_interval=30, sleep=lambda s: None, reconnect_interval=1e-6,
                                      heartbeat_period=3600)
            sessions.append(session)
            try:
                assert session.connect(timeout=2)
                decision = session.suspend()
                while decision is not Decision.EXIT and session.state is not SessionState.DETACHED \
                        and not server.commands.empty():
                    steps += 1
                    decision = session.step_end()
            finally:
                session.close()
        consumed = len(server.recorded.waits)
    assert consumed >= total                                       # every reply reached a WaitCMD
    assert sum(s.internal_errors for s in sessions) == 0           # validation refused; the guard never fired
    refused = sum(s.refused for s in sessions)
    assert refused > total * 0.2 and steps > total * 0.2
    assert sum(s.losses for s in sessions) > 0 and sum(s.reconnects for s in sessions) > 0
    accepted_views = len(server.recorded.tensor_streams) + len(server.recorded.stat_streams) + \
        len(server.recorded.base_streams)
    print(f"fuzz: {consumed} replies, {len(sessions)} sessions, {steps} steps, {refused} refused, "
          f"{accepted_views} views answered, {sum(s.hits_sent for s in sessions)} hits")
    assert accepted_views > 20 and sum(s.hits_sent for s in sessions) > 0


def test_a_view_over_the_byte_budget_is_answered_as_not_found():
    with FaultServer() as server:
        session = DebuggerSession(Transport(server.address, timeout=2), session_graph(), VALUES.get,
                                  ms_version="2.10.0", max_view_bytes=60, sleep=lambda s: None)
        try:
            assert session.connect()
            request = graph_pb.TensorProto(node_name=NAMES[0], slot="0", truncate=True)
            server.command(pb.EventReply(view_cmd=pb.ViewCMD(level=pb.ViewCMD.statistics, tensors=[request] * 3)))
            server.command(RUN)
            assert session.suspend() is Decision.RUN
        finally:
            session.close()
    (answers,) = server.recorded.stat_streams
    assert [a.tensor_base.data_size for a in answers] == [24, 24, 0] and session.refused == 1


@pytest.mark.mindspore
def test_real_training_under_a_random_server_is_unharmed():
    """LeNet under DebuggerCallback while the server mixes ~400 random structures into its answers (no exit, no
    FAILED: those have their own tests): same steps and losses as without the debugger."""
    from _recording import train_losses
    from mindinsight_server import free_port
    from msdebug_hooks.debugger.callback import DebuggerCallback

    def train(callbacks) -> list[float]:
        return train_losses(callbacks, 10)

    reference = train([])
    rng = np.random.default_rng(60)
    port = free_port()
    with FaultServer(port) as server:
        for i in range(440):
            reply = random_reply(rng, allow_exit=False)
            if reply.status == pb.EventReply.FAILED:
                reply.status = 7                                # refused without the FAILED back-off
            server.command(RUN if i % 40 == 0 else reply)
        server.auto_reply = RUN
        debugger = DebuggerCallback("127.0.0.1", port, rpc_timeout=5)
        losses = train([debugger])
        session = debugger.session
    assert losses == reference and len(losses) == 10
    assert session.internal_errors == 0 and session.refused > 50
    assert len(server.recorded.waits) > 100      # random 'step' / 'node' commands also move training on
