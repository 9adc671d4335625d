"""What the client does with each server command: the debugger session state machine.

The transport (``transport.py``) moves messages; this module decides. Each command has one small handler:

* ``_on_run``: ``step`` leaves the suspension (the server counts multi-step continues itself and answers every
  later ``WaitCMD`` with another single step), ``recheck`` re-evaluates the watchpoints and stays, ``node`` runs
  to the end of the step (a Python client sees step boundaries only);
* ``_on_set``: creates, replaces or deletes a watchpoint;
* ``_on_view``: answers tensor requests at value / statistics / base level;
* ``_on_exit``: ends the session; the caller stops training.

PAUSE has no handler because the client never receives it: the server swallows the pause and simply does not
answer the next ``WaitCMD`` (the one at the next step end) until the person continues. ``_wait_for_command`` is
therefore where a paused training sits; a ``ProgressLine`` thread logs a line every few seconds meanwhile.

One blocking ``WaitCMD`` per step, by design. MindInsight moves its step counter, counts down "run N steps",
delivers a pause and stops on a hit only through the ``WaitCMD`` of each step end (protocol doc 1.2, 1.4, 1.5,
1.8), and it never tells the client how many steps are left. Letting the next step start while that wait is in
flight would be one step ahead whenever the answer is not immediate: a pause would stop one step late (the UI would
show step k while the weights are those of step k+1), "continue 3" would run 4, and a terminate while paused would
still run a step. Overlapping the wait with the gap before the next step keeps those exact but hides only the
~0.25 ms of that gap, and an asynchronous call (future + callback) costs more CPU and latency than it hides. So the
per-step cost is kept small instead: a plain blocking unary call on a tiny ``Metadata`` (about 0.3 ms on loopback),
parameters read lazily and only when watched or viewed, previous-step copies only for watched parameters, and one
statistics pass per watched tensor (``check_many``). ``benchmarks/debugger_overhead.py`` measures it.

Faults (the debugger never hurts a training it was not asked to stop; only a pause or a watchpoint hit holds the
training thread):

* Every reply is checked by ``validate.check_reply`` before it is obeyed; a refused one is logged (rate-limited)
  and ignored. A reply that is not an ``EventReply`` at all, an oversized one, or ``status=FAILED`` counts as a
  failed wait (back off, retry); ``max_wait_failures`` in a row, or ``MAX_REFUSED_IN_A_ROW`` refused replies in a
  row, mean the server is lost.
* Server absent at start: ``CONNECT_ATTEMPTS`` tries with backoff, then training runs undebugged (one warning), or
  waits for the server when asked to.
* Server lost (its ``WaitCMD`` fails, or the heartbeat fails ``heartbeat.MAX_FAILURES`` times in a row, which
  reopens the channel and so ends a wait blocked on a frozen server or a half-open connection): by
  ``on_server_lost``, ``"continue"`` (default) runs on at once, no step lost, and at step ends, no more often than
  every ``reconnect_interval`` seconds (doubling to 30 s) for at most ``reconnect_window`` seconds, looks whether a
  server is back (a non-blocking check of the channel); one that is gets the metadata and graph again and holds
  training in a fresh suspension, exactly like a first connection (its watchpoints are whatever it sends).
  ``"stop"`` ends training cleanly at that step end (``Decision.EXIT``).
* While connected this costs nothing per step: one state comparison.

Tensor values come from a ``TensorProvider`` (``provider(name) -> array or None``), asked with a bare parameter
name (``conv1.weight``) or the loss node's full name. Values are read lazily, once per suspension point.
Previous-step copies are kept only for watched parameters: when a suspension ends, their values are copied, and
at the next step end they are "previous" (protocol doc 2.2). A *full* source (``dump_source.DumpTensorSource``)
also has ``tensor_name(node)``, ``slots(tensor)`` and ``value(tensor, slot)``: then every node with a value is
watchable and viewable, on every output slot, and hits name the slot.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks._proto import debug_grpc_pb2 as pb
from msdebug_hooks._proto import ms_graph_pb2 as graph_pb
from msdebug_hooks.conditions import Condition, ConditionResult, check_many, should_evaluate
from msdebug_hooks.conditions.protocol import from_protocol
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.heartbeat import Heartbeat
from msdebug_hooks.debugger.interrupt import sigint_raises
from msdebug_hooks.debugger.progress import ProgressLine
from msdebug_hooks.debugger.settings import validate_policy
from msdebug_hooks.debugger.transport import (MessageTooLarge, ServerError, TlsError, Transport, TransportClosed,
                                              TransportError)
from msdebug_hooks.debugger.validate import MAX_VIEW_BYTES, RateLimitedLog, check_reply
from msdebug_hooks.debugger.views import base_answer, lookup_key, stats_answer, tensor_value_answer
from msdebug_hooks.errors import ConfigError

__all__ = ["Decision", "SessionState", "Watchpoint", "DebuggerSession", "TensorProvider"]

_LOG = get_logger("debugger")
TensorProvider = Callable[[str], Optional[np.ndarray]]
REPORTED_BACKEND = "GPU"   # MindInsight 2.3.1 offers watchpoint conditions only for "GPU" and "Ascend"
CONNECT_ATTEMPTS = 4       # first contact: tries, 0.25 / 0.5 / 1 s apart, before training runs undebugged
MAX_REFUSED_IN_A_ROW = 1000
MAX_RECONNECT_GAP = 30.0


class Decision(enum.Enum):
    """What training should do after a suspension point."""

    RUN = "run"            # run the next step
    EXIT = "exit"          # the person pressed terminate: stop training cleanly
    DETACHED = "detached"  # the debugger gave up (no server, version mismatch, errors): train on without it


class SessionState(enum.Enum):
    NEW = "new"
    SUSPENDED = "suspended"
    RUNNING = "running"
    EXITED = "exited"
    DETACHED = "detached"
    DISCONNECTED = "disconnected"   # server lost; training runs on, reconnect attempts at step ends


@dataclass
class Watchpoint:
    """A watchpoint as the server set it: ``nodes`` are the watch-node names a hit must echo, ``protocol`` the
    received condition, whose every parameter a hit echoes too."""

    id: int
    condition: Condition
    nodes: tuple[str, ...]
    protocol: pb.WatchCondition


class DebuggerSession:
    """The client side of one MindInsight debugger session.

    Args:
        transport: a connected-or-not ``Transport`` (the session closes it when it ends).
        graph: what ``build_graph`` made of the network.
        provider: current tensor values by bare parameter name or loss node full name.
        ms_version: reported to the server, which compares major.minor (2.x is accepted by MindInsight 2.3.1).
        device_id: first part of ``Metadata.device_name`` ("<device>:<graph id>").
        heartbeat_period: seconds between heartbeats (5..3600).
        progress_interval: seconds between "still paused" log lines while waiting for a command.
        max_wait_failures: consecutive failed ``WaitCMD`` answers before the session detaches.
        sleep: back-off sleep (replaceable in tests).
        device_target: the device training really runs on, for the log line that explains the reported backend.
        on_server_lost: "continue" (run on, reconnect later) or "stop" (end training cleanly) when the server is lost.
        reconnect_window: seconds after a loss during which reconnecting is attempted (0: never; detach at once).
        reconnect_interval: seconds before the first reconnect attempt; the gap doubles up to 30 s.
        max_view_bytes: bytes of tensor data one view may ask for (values and statistics); the rest is answered
            as "not found".

    Example::

        session = DebuggerSession(Transport("127.0.0.1:50051"), build_graph(net), provider, ms_version="2.10.0")
        if session.connect() and session.suspend() is Decision.RUN:     # initial suspension at step 0
            for batch in data:
                train_step(batch)
                if session.step_end() is not Decision.RUN:
                    break
        session.finish()
    """

    def __init__(self, transport: Transport, graph: DebugGraph, provider: TensorProvider, *, ms_version: str,
                 device_id: int = 0, heartbeat_period: int = 30, progress_interval: float = 5.0,
                 max_wait_failures: int = 5, sleep: Callable[[float], None] = time.sleep,
                 device_target: str = "", on_server_lost: str = "continue", reconnect_window: float = 600.0,
                 reconnect_interval: float = 2.0, max_view_bytes: int = MAX_VIEW_BYTES) -> None:
        self.transport = transport
        self.graph = graph
        self.provider = provider
        self.ms_version = ms_version
        self.device_target = device_target
        self.device_name = f"{device_id}:{graph.name.rsplit('_', 1)[-1]}"
        self.progress_interval = progress_interval
        self.max_wait_failures = max_wait_failures
        self._sleep = sleep
        self.step = 0
        self.state = SessionState.NEW
        self.watchpoints: dict[int, Watchpoint] = {}
        self.hits_sent = 0
        self._wait_failures = 0
        self._initial = True                       # initial suspension: until the first non-recheck RunCMD
        self._current: dict[str, Optional[np.ndarray]] = {}
        self._previous: dict[str, np.ndarray] = {}
        self._watched: Optional[set[str]] = None   # parameters some watchpoint needs; None = recompute
        self._group_cache: dict[tuple[bool, bool], list] = {}   # what _check_watchpoints evaluates, per situation
        self._warned: set[str] = set()
        self._viewed: set[str] = set()             # op outputs / gradients the UI asked to see: kept every step
        self.heartbeat_period = heartbeat_period
        self._heartbeat = Heartbeat(transport.send_heartbeat, period=heartbeat_period)
        self._progress = ProgressLine(_LOG, interval=progress_interval)
        self.on_server_lost = validate_policy("on_server_lost", on_server_lost)
        if reconnect_window < 0 or reconnect_interval <= 0 or max_view_bytes < 0:
            raise ConfigError("reconnect_window / reconnect_interval / max_view_bytes",
                              (reconnect_window, reconnect_interval, max_view_bytes), ">= 0, > 0 and >= 0")
        self.reconnect_window = float(reconnect_window)
        self.reconnect_interval = float(reconnect_interval)
        self.max_view_bytes = int(max_view_bytes)
        self.refused = 0                 # replies refused by validation (all kinds)
        self.internal_errors = 0         # handler failures the last-resort guard caught (should stay 0)
        self.losses = 0                  # times the server was lost
        self.reconnects = 0
        self._refusals = RateLimitedLog(_LOG)
        self._refused_in_a_row = 0
        self._epoch = 0                  # bumped per handshake: stale heartbeat threads are ignored
        self._generation = 0             # the transport's channel generation our session lives on
        self._lost_at = self._next_attempt = self._gap = 0.0

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """True while connected (suspended or running) or reconnecting after a lost server; False before
        connecting and once exited or detached."""
        return self.state in (SessionState.SUSPENDED, SessionState.RUNNING, SessionState.DISCONNECTED)

    def connect(self, *, wait_for_server: bool = False, timeout: Optional[float] = None) -> bool:
        """Send metadata (version check) and the graph, start the heartbeat. False (and detached, with one
        warning) when the server is absent or refuses; training then runs on without the debugger.

        Args:
            wait_for_server: wait (logging a progress line) until something listens at the address, for a
                training started before MindInsight. Otherwise the first contact is bounded by ``timeout``.
            timeout: deadline in seconds of the first call (the transport's own deadline when None).
        """
        _LOG.info("debugger: connecting to MindInsight at %s, reporting ms_version=%s (MindInsight checks "
                  "major.minor) and backend=%s%s (MindInsight offers watchpoint conditions only for GPU or Ascend, "
                  "and Ascend adds operator_overflow, which a step-level client cannot evaluate)",
                  self.transport.address, self.ms_version, REPORTED_BACKEND,
                  f" while training on {self.device_target}" if self.device_target else "")
        if wait_for_server and not self._wait_for_server():
            return self._detach(f"stopped waiting for MindInsight at {self.transport.address}")
        delay = 0.25
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                problem = self._handshake(timeout)
                break
            except TlsError as exc:          # retrying cannot fix a certificate
                return self._detach(str(exc))
            except TransportError as exc:
                if attempt < CONNECT_ATTEMPTS and not self.transport.closed:
                    _LOG.debug("debugger: connection attempt %d failed: %s", attempt, exc)
                    self._sleep(delay)
                    delay *= 2
                    continue
                port = self.transport.address.rsplit(":", 1)[-1]
                return self._detach(f"cannot reach MindInsight at {self.transport.address} after {attempt} "
                                    f"attempts: {exc} (is it running with --enable-debugger True --debugger-port "
                                    f"{port}? to wait for it, use DebuggerCallback(wait_for_server=True) or msdebug "
                                    "run --wait)")
        if problem is not None:
            return self._detach(problem)
        return True

    def _handshake(self, timeout: Optional[float]) -> Optional[str]:
        """Metadata (version check), graph, heartbeat; SUSPENDED. Returns why the server refused, or None.
        Raises ``TransportError`` when the server cannot be reached."""
        reply = self.transport.send_metadata(self._metadata(ms_version=self.ms_version, graph_num=1),
                                             timeout=timeout)
        if reply.WhichOneof("cmd") != "version_matched":
            return "the server did not answer the version check (MindInsight too old?)"
        if not reply.version_matched:
            return (f"MindInsight refused ms_version={self.ms_version} (version mismatch); use a MindInsight whose "
                    "major.minor is not newer than MindSpore's")
        self.transport.send_graph(self.graph.proto.SerializeToString())
        self._epoch += 1
        epoch = self._epoch
        self._heartbeat.stop(timeout=0)
        self._heartbeat = Heartbeat(self.transport.send_heartbeat, period=self.heartbeat_period,
                                    on_lost=lambda: self._heartbeat_lost(epoch))
        self._heartbeat.start()
        self._wait_failures = self._refused_in_a_row = 0
        self._generation = self.transport.generation
        self.state = SessionState.SUSPENDED
        return None

    def suspend(self) -> Decision:
        """Obey commands until one ends the suspension (initial one at step 0, or after ``step_end``)."""
        if self.state is not SessionState.SUSPENDED:
            return self._decision_for_state()
        with sigint_raises():      # Ctrl-C while paused: KeyboardInterrupt here, not MindSpore's SIGTERM
            return self._command_loop()

    def _command_loop(self) -> Decision:
        while True:
            reply = self._wait_for_command()
            if self.state is not SessionState.SUSPENDED:
                return self._decision_for_state()
            if reply is None:
                continue
            kind = reply.WhichOneof("cmd")
            if kind == "exit":
                return self._on_exit()
            try:
                if kind == "run_cmd":
                    decision = self._on_run(reply.run_cmd)
                    if decision is not None:
                        return decision
                elif kind == "set_cmd":
                    self._on_set(reply.set_cmd)
                elif kind == "view_cmd":
                    self._on_view(reply.view_cmd)
                else:
                    _LOG.debug("debugger: ignoring a reply without a command (%s)", kind)
            except Exception as exc:   # last resort at the trust boundary: a bad command must not end training
                self.internal_errors += 1
                self._refusals.warning("internal", f"debugger: a {kind} command failed and was ignored: {exc!r}")

    def step_end(self) -> Decision:
        """After a completed training step: count it, check the watchpoints, report hits, suspend."""
        if self.state is not SessionState.RUNNING:
            if self.state is SessionState.DISCONNECTED:
                self.step += 1
                return self._try_reconnect() if time.monotonic() >= self._next_attempt else Decision.RUN
            return self._decision_for_state()
        self.step += 1
        self.state = SessionState.SUSPENDED
        self._current.clear()
        self._send_hits(self._check_watchpoints(step_end=True))
        return self.suspend()

    def finish(self) -> None:
        """Training is over: tell the server (it resets its session) and stop the heartbeat. Idempotent."""
        if self.state in (SessionState.SUSPENDED, SessionState.RUNNING):
            try:
                self.transport.send_metadata(self._metadata(training_done=True))
            except TransportError as exc:
                _LOG.debug("debugger: training-done metadata not delivered: %s", exc)
            self.state = SessionState.EXITED
        elif self.state is SessionState.DISCONNECTED:
            self.state = SessionState.EXITED
        self.close()

    def close(self) -> None:
        self._progress.stop()
        self._heartbeat.stop(timeout=1.0)
        self.transport.close()

    # -- a lost server ------------------------------------------------------------------------------------------
    def _heartbeat_lost(self, epoch: int) -> None:
        """Heartbeat thread: the server stopped answering. Reopen the channel, which ends a ``WaitCMD`` blocked on
        a frozen server or a half-open connection, and makes the next one fail at once (``generation``); ``_lose``
        then runs on the training thread."""
        if epoch == self._epoch and self.state in (SessionState.SUSPENDED, SessionState.RUNNING):
            self.transport.reopen()

    def _lose(self, reason: str) -> None:
        """The server is gone: apply ``on_server_lost``."""
        self.losses += 1
        self._progress.end()
        self._heartbeat.stop(timeout=0)
        if self.on_server_lost == "stop":
            _LOG.warning("debugger: %s; stopping the training at step %d (on_server_lost='stop')", reason, self.step)
            self.state = SessionState.EXITED
            self.close()
            return
        if self.reconnect_window <= 0:
            self._detach(reason)
            return
        _LOG.warning("debugger: %s; training continues without the debugger and reconnects if a server is back "
                     "within %.0f s", reason, self.reconnect_window)
        self.state = SessionState.DISCONNECTED
        now = time.monotonic()
        self._lost_at, self._gap = now, self.reconnect_interval
        self._next_attempt = now + self._gap

    def _try_reconnect(self) -> Decision:
        """At a step end while disconnected: if the channel is up again, start the session over and suspend."""
        now = time.monotonic()
        if now - self._lost_at > self.reconnect_window:
            self._detach(f"no server at {self.transport.address} for {self.reconnect_window:.0f} s; stopped "
                         "reconnecting")
            return Decision.DETACHED
        self._gap = min(self._gap * 2, MAX_RECONNECT_GAP)
        self._next_attempt = now + self._gap
        if not self.transport.ready_now():
            return Decision.RUN
        self.watchpoints.clear()
        self._viewed.clear()
        self._update_wanted()
        self._warned = {key for key in self._warned if not key.startswith("unevaluable-")}   # ids start over
        self._previous.clear()
        self._current.clear()
        self._watched = None
        self._group_cache.clear()
        self._initial = True
        try:
            problem = self._handshake(None)
        except TransportError as exc:
            self.state = SessionState.DISCONNECTED
            _LOG.debug("debugger: reconnect failed: %s", exc)
            return Decision.RUN
        if problem is not None:
            self._detach(problem)
            return Decision.DETACHED
        self.reconnects += 1
        _LOG.warning("debugger: reconnected to %s at step %d; the session starts over (graph sent again, "
                     "watchpoints as the server sets them)", self.transport.address, self.step)
        return self.suspend()

    def _wait_for_server(self) -> bool:
        """Block until the channel connects; False only if the transport was closed meanwhile."""
        address = self.transport.address
        port = address.rsplit(":", 1)[-1]
        self._progress.begin(lambda waited: f"debugger: training waits at step {self.step} for the MindInsight "
                                            f"debugger server at {address} (state: connecting, not reachable for "
                                            f"{waited:.0f} s); start it with: mindinsight start --enable-debugger "
                                            f"True --debugger-port {port}")
        try:
            while not self.transport.closed:
                if self.transport.wait_for_ready(1.0):
                    return True
            return False
        finally:
            self._progress.end()

    # -- the command handlers -----------------------------------------------------------------------------------
    def _on_run(self, cmd: pb.RunCMD) -> Optional[Decision]:
        if cmd.run_level == "recheck":
            self._send_hits(self._check_watchpoints(step_end=True, recheck=True))
            return None
        if cmd.run_level == "node":
            self._warn_once("node", "debugger: 'next node' / 'run to node' needs kernel-level hooks; a Python "
                                    "client stops at step ends only, so training runs to the end of this step")
        elif cmd.run_level != "step":
            self._warn_once(cmd.run_level, f"debugger: unknown run level {cmd.run_level!r}; running one step")
        self._leave_suspension()
        return Decision.RUN

    def _on_set(self, cmd: pb.SetCMD) -> None:
        self._watched = None
        self._group_cache.clear()
        if cmd.delete:
            self.watchpoints.pop(cmd.id, None)
            self._update_wanted()
            return
        try:
            condition = from_protocol(cmd.watch_condition.condition, cmd.watch_condition.params)
        except (ConfigError, ValueError, TypeError) as exc:
            self.refused += 1
            self._refusals.warning("watchpoint", f"debugger: watchpoint {cmd.id} refused: {exc}")
            return
        received = pb.WatchCondition()
        received.CopyFrom(cmd.watch_condition)
        self.watchpoints[cmd.id] = Watchpoint(cmd.id, condition, tuple(n.node_name for n in cmd.watch_nodes),
                                              received)
        self._report_unevaluable(self.watchpoints[cmd.id])
        self._update_wanted()

    def _report_unevaluable(self, wp: Watchpoint) -> None:
        """Say once per watchpoint, naming it, when some of its nodes have no value this client can check."""
        name = f"watchpoint {wp.id} ({_condition_name(wp.protocol.condition)})"
        if not wp.nodes:
            self._warn_once(f"unevaluable-{wp.id}", f"debugger: {name} watches no node (MindInsight selected none "
                                                     "for this graph); it can never hit")
            return
        missing = [n for n in wp.nodes if self._tensor_name(n) is None]
        if not missing:
            return
        explain = getattr(self.provider, "why_not", None)
        why = explain(missing[0]) if explain is not None else "this client holds no value for it"
        self._warn_once(f"unevaluable-{wp.id}", f"debugger: {name}: {len(missing)} of {len(wp.nodes)} watched "
                                                f"node(s) cannot be checked and will never hit, e.g. "
                                                f"{missing[0][:200]!r}: {why}")

    def _update_wanted(self) -> None:
        """Tell a capturing source which op outputs / gradients to keep: the watched ones and the viewed ones."""
        want = getattr(self.provider, "want", None)
        if want is None:
            return
        capturable = getattr(self.provider, "capturable", frozenset())
        watched = {t for wp in self.watchpoints.values() for n in wp.nodes
                   if (t := self._tensor_name(n)) is not None and t in capturable}
        want(watched | self._viewed)

    def _on_view(self, cmd: pb.ViewCMD) -> None:
        requests = list(cmd.tensors)
        values = [self._lookup(*lookup_key(r)) for r in requests]
        self._capture_viewed([lookup_key(r)[0] for r, v in zip(requests, values) if v is None])
        if cmd.level != pb.ViewCMD.base:
            budget = self.max_view_bytes
            for i, value in enumerate(values):
                size = int(getattr(value, "nbytes", 0))
                if size > budget:
                    values[i] = None
                    self.refused += 1
                    self._refusals.warning("view", f"debugger: a view asked for more than {self.max_view_bytes} "
                                                   f"bytes of tensors; {requests[i].node_name[:200]!r} answered "
                                                   "as not found")
                else:
                    budget -= size
        try:
            if cmd.level == pb.ViewCMD.base:
                self.transport.send_tensor_bases([base_answer(v) for v in values])
            elif cmd.level == pb.ViewCMD.statistics:
                self.transport.send_tensor_stats([stats_answer(v) for v in values])
            else:
                self.transport.send_tensor_values(tensor_value_answer(r, v) for r, v in zip(requests, values))
        except TransportError as exc:   # the UI asks again; keep obeying commands
            self._refusals.warning("view-send", f"debugger: could not send the requested tensors: {exc}")

    def _capture_viewed(self, names: list[str]) -> None:
        """Op outputs / gradients asked for but not captured in this step: keep them from the next step on."""
        capturable = getattr(self.provider, "capturable", frozenset())
        new = {n for n in names if n in capturable and n not in self._viewed}
        if not new:
            return
        self._viewed |= new
        self._update_wanted()
        for name in sorted(new):
            _LOG.info("debugger: %s is an output kept only while something needs it; it has a value from the next "
                      "step on (continue one step to see it)", name[:200])

    def _on_exit(self) -> Decision:
        _LOG.info("debugger: MindInsight asked to terminate the training at step %d", self.step)
        self.state = SessionState.EXITED
        self.close()
        return Decision.EXIT

    # -- waiting ------------------------------------------------------------------------------------------------
    def _wait_for_command(self) -> Optional[pb.EventReply]:
        """One ``WaitCMD``. A paused training sits here; a line is logged every ``progress_interval`` seconds.
        Returns None after a FAILED answer (backing off), and detaches when the server is gone."""
        self._progress.begin(self._paused_line)
        try:
            reply = self.transport.wait_cmd(self._metadata(), generation=self._generation)
        except TransportClosed as exc:     # closed by us (finish / close from another thread)
            self._detach(f"the connection to {self.transport.address} was closed: {exc}")
            return None
        except (ServerError, MessageTooLarge) as exc:   # a reply that is not an EventReply, or too big
            self._refusals.warning("wait-error", f"debugger: refused a broken reply: {exc}")
            self.refused += 1
            return self._failed_wait(f"{self._wait_failures + 1} broken replies in a row from "
                                     f"{self.transport.address}")
        except TransportError as exc:
            self._lose(f"lost the debugger server at {self.transport.address}: {exc}")
            return None
        finally:
            self._progress.end()
        problem = check_reply(reply)
        if problem is not None:
            self.refused += 1
            self._refused_in_a_row += 1
            self._refusals.warning("refused", f"debugger: refused a reply from {self.transport.address}: {problem}")
            if self._refused_in_a_row >= MAX_REFUSED_IN_A_ROW:
                self._lose(f"{self._refused_in_a_row} invalid replies in a row")
            return None
        self._refused_in_a_row = 0
        if reply.status == pb.EventReply.OK:
            self._wait_failures = 0
            return reply
        return self._failed_wait(f"MindInsight answered {self._wait_failures + 1} waits in a row with FAILED "
                                 "(its session was reset or it has no graph)")

    def _failed_wait(self, reason: str) -> None:
        self._wait_failures += 1
        if self._wait_failures >= self.max_wait_failures:
            self._wait_failures = 0
            self._lose(reason)
            return None
        self._sleep(min(self._wait_failures, 5))
        return None

    def _paused_line(self, waited: float) -> str:
        return (f"debugger: training paused at step {self.step}, waiting for MindInsight at {self.transport.address} "
                f"(state: suspended, {waited:.0f} s); continue, step or terminate in the MindInsight debugger UI")

    # -- watchpoints --------------------------------------------------------------------------------------------
    def _check_watchpoints(self, *, step_end: bool, recheck: bool = False) -> list[pb.WatchpointHit]:
        """Evaluate every live watchpoint on every tensor it watches that we hold; one statistics pass per
        tensor. Returns the hits to report (hit, or NaN/Inf/no-previous errors, as MindSpore reported)."""
        if not self.watchpoints:
            return []
        hits = []
        slots = getattr(self.provider, "slots", None)   # a full source (dump) serves every output slot
        for tensor, entries, conditions in self._groups(step_end):
            for slot in (slots(tensor) if slots is not None else ("0",)):
                value = self._lookup(tensor, slot, False)
                if value is None:
                    continue
                previous = self._previous.get(tensor) if slot == "0" else None
                results = check_many(conditions, value, previous)
                hits.extend(_hit(wp, node, result, slot) for (wp, node), result in zip(entries, results)
                            if result.reportable)
        return hits

    def _groups(self, step_end: bool) -> list[tuple[str, list[tuple[Watchpoint, str]], list[Condition]]]:
        """(tensor, [(watchpoint, watch-node name)], conditions) to evaluate now; cached until watchpoints change."""
        key = (self._initial, step_end)
        cached = self._group_cache.get(key)
        if cached is not None:
            return cached
        groups: dict[str, list[tuple[Watchpoint, str]]] = {}
        for wp in self.watchpoints.values():
            if not should_evaluate(wp.condition, initial_suspension=self._initial, step_end=step_end):
                continue
            for node in wp.nodes:
                tensor = self._tensor_name(node)
                if tensor is not None:
                    groups.setdefault(tensor, []).append((wp, node))
        result = [(tensor, entries, [wp.condition for wp, _ in entries]) for tensor, entries in groups.items()]
        self._group_cache[key] = result
        return result

    def _send_hits(self, hits: list[pb.WatchpointHit]) -> None:
        if not hits:   # an empty stream would cancel the server's multi-step continue
            return
        try:
            self.transport.send_watchpoint_hits(hits)
            self.hits_sent += len(hits)
        except TransportError as exc:
            _LOG.warning("debugger: %d watchpoint hit(s) not delivered: %s", len(hits), exc)

    # -- tensors ------------------------------------------------------------------------------------------------
    def _tensor_name(self, node_name: str) -> Optional[str]:
        """The tensor behind a watch-node name: parameters by their last name component (MindInsight may group
        them under ``Parameter[N]_k/``), the loss by its full name; None for nodes we hold no value of."""
        resolve = getattr(self.provider, "tensor_name", None)   # a full source (dump) knows every op
        if resolve is not None:
            return resolve(node_name)
        holds = getattr(self.provider, "holds", None)   # the light source: inputs, op outputs, gradients too
        last = node_name.rsplit("/", 1)[-1]
        param = self.graph.parameters.get(last)
        if param is not None and (param.source is not None or (holds is not None and holds(last))):
            return last
        if node_name == self.graph.loss_node or (holds is not None and holds(node_name)):
            return node_name
        return None

    def _lookup(self, name: str, slot: str, previous: bool) -> Optional[np.ndarray]:
        if hasattr(self.provider, "value"):   # a full source: every node, every output slot
            return self._lookup_full(name, slot, previous)
        if slot != "0":
            return None
        name = self._tensor_name(name) or name
        if previous:
            return self._previous.get(name) if self.step > 0 else None
        if name not in self._current:
            holds = getattr(self.provider, "holds", None)
            known = name in self.graph.parameters or name == self.graph.loss_node or bool(holds and holds(name))
            self._current[name] = self.provider(name) if known else None
        return self._current[name]

    def _lookup_full(self, name: str, slot: str, previous: bool) -> Optional[np.ndarray]:
        name = self._tensor_name(name) or name
        if previous:   # kept for watched parameters only, as MindSpore did
            return self._previous.get(name) if self.step > 0 and slot == "0" else None
        key = name if slot == "0" else f"{name}:{slot}"
        if key not in self._current:
            self._current[key] = self.provider.value(name, slot)
        return self._current[key]

    def _leave_suspension(self) -> None:
        """Keep previous-step copies of the watched parameters, then run."""
        if self._watched is None:
            self._watched = {t for wp in self.watchpoints.values() for n in wp.nodes
                             if (t := self._tensor_name(n)) is not None and t in self.graph.parameters}
        previous, self._previous = self._previous, {}
        for name in self._watched:
            value = self._lookup(name, "0", False)
            if value is None:
                continue
            kept = previous.get(name)          # reuse last step's buffer: no allocation per step
            if kept is not None and kept.shape == value.shape and kept.dtype == value.dtype:
                np.copyto(kept, value)
                self._previous[name] = kept
            else:
                self._previous[name] = np.array(value, copy=True)
        self._current.clear()
        self._initial = False
        self.state = SessionState.RUNNING

    # -- helpers ------------------------------------------------------------------------------------------------
    def _metadata(self, **fields) -> pb.Metadata:
        return pb.Metadata(device_name=self.device_name, cur_step=self.step, backend=REPORTED_BACKEND,
                           cur_node="", **fields)

    def _detach(self, reason: str) -> bool:
        if self.state is not SessionState.DETACHED:
            _LOG.warning("debugger: %s; training continues without the debugger", reason)
        self.state = SessionState.DETACHED
        self.close()
        return False

    def _decision_for_state(self) -> Decision:
        return {SessionState.EXITED: Decision.EXIT, SessionState.DETACHED: Decision.DETACHED}.get(
            self.state, Decision.RUN)   # RUNNING, and DISCONNECTED under on_server_lost="continue"

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning(message)


def _condition_name(condition: int) -> str:
    try:
        return pb.WatchCondition.Condition.Name(condition)
    except ValueError:
        return f"condition {condition}"


def _hit(wp: Watchpoint, node: str, result: ConditionResult, slot: str = "0") -> pb.WatchpointHit:
    """A hit echoing every parameter the server sent, with ``hit`` and ``actual_value`` where evaluated."""
    evaluated = {p.name: p for p in result.params}
    condition = pb.WatchCondition(condition=wp.protocol.condition, value=wp.protocol.value)
    for sent in wp.protocol.params:
        param = condition.params.add(name=sent.name, disabled=sent.disabled, value=sent.value)
        outcome = evaluated.get(sent.name)
        if outcome is not None:
            param.hit = bool(outcome.hit)
            if outcome.actual_value is not None and np.isfinite(outcome.actual_value):
                param.actual_value = float(outcome.actual_value)
    return pb.WatchpointHit(id=wp.id, error_code=result.error_code, watch_condition=condition,
                            tensor=graph_pb.TensorProto(node_name=node, slot=slot, finished=True))
