"""What the client does with each server command: the debugger session state machine and its reconnect policy.

The transport (``transport.py``) moves messages; this module decides. Each command has one small handler:

* ``_on_run``: ``step`` leaves the suspension (the server counts multi-step continues itself and answers every
  later ``WaitCMD`` with another single step), ``recheck`` re-evaluates the watchpoints and stays, ``node`` runs
  to the end of the step (a Python client sees step boundaries only);
* ``_on_set``: creates, replaces or deletes a watchpoint (the bookkeeping is ``watchpoints.WatchpointTable``);
* ``_on_view``: answers tensor requests at value / statistics / base level;
* ``_on_exit``: ends the session; the caller stops training;
* ``_send_hits``: reports the hits found at a suspension point.

PAUSE has no handler because the client never receives it: the server simply does not answer the next step end's
``WaitCMD`` until the person continues, so ``_wait_for_command`` is where a paused training sits (a ``ProgressLine``
says so every few seconds). One blocking ``WaitCMD`` per step, by design (why: docs/debugger-protocol.md 1.4),
except in a free run, which only our own server starts (``free_run.py``): then a step end costs no round trip.

Faults (the debugger never hurts a training it was not asked to stop; only a pause or a hit holds the training):
replies are validated before they are obeyed, and too many refused, broken or FAILED ones in a row mean the server
is lost (``replies.py``); a server absent at start gets a few tries, then training runs undebugged after one warning
(``reaching.py``). A lost server (its ``WaitCMD`` fails, or the heartbeat fails ``heartbeat.MAX_FAILURES`` times,
which reopens the channel and so ends a wait on a frozen server) is handled by ``on_server_lost``: ``"continue"``
(default) runs on at once, no step lost, and at step ends within ``reconnect_window`` looks whether a server is back;
one that is gets metadata and graph again and holds training in a fresh suspension, like a first connection.
``"stop"`` ends training cleanly at that step end. While connected this costs one state comparison per step.

Tensor values come from a ``sources.TensorSource`` (the light ``NetworkTensors`` or the dump's
``DumpTensorSource``; a plain function ``name -> array | None`` is wrapped as a light source over the graph).
"""
from __future__ import annotations

import enum
import time
from typing import Callable, Optional, Union

from msdebug_hooks._log import get_logger
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.debugger.client_facts import error_note, heartbeat_message
from msdebug_hooks.debugger.free_run import FREE_RUN_LEVEL, WATCH_NODE, FreeRun
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.heartbeat import Heartbeat
from msdebug_hooks.debugger.interrupt import sigint_raises
from msdebug_hooks.debugger.progress import ProgressLine
from msdebug_hooks.debugger.reaching import ReconnectSchedule, reach_server, wait_for_listener
from msdebug_hooks.debugger.settings import validate_policy
from msdebug_hooks.debugger.replies import ReplyIntake
from msdebug_hooks.debugger.sources import TensorProvider, TensorSource, as_source
from msdebug_hooks.debugger.transport import Transport, TransportError
from msdebug_hooks.debugger.validate import MAX_VIEW_BYTES, RateLimitedLog
from msdebug_hooks.debugger.viewing import TensorViewer
from msdebug_hooks.debugger.watchpoints import ReceivedWatchpoint, WatchpointTable, prepare_engine
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.rank import world_size

__all__ = ["Decision", "SessionState", "DebuggerSession"]

_LOG = get_logger("debugger")
REPORTED_BACKEND = "GPU"   # MindInsight 2.3.1 offers watchpoint conditions only for "GPU" and "Ascend"


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


class DebuggerSession:
    """The client side of one debugger session (MindInsight's, or ``msdebug debug`` / ``serve``).

    Args:
        transport: a connected-or-not ``Transport`` (the session closes it when it ends).
        graph: what ``build_graph`` made of the network.
        provider: the ``TensorSource`` (or a function: values by bare parameter name or loss node full name).
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

    def __init__(self, transport: Transport, graph: DebugGraph, provider: Union[TensorSource, TensorProvider], *,
                 ms_version: str, device_id: int = 0, heartbeat_period: int = 30, progress_interval: float = 5.0,
                 max_wait_failures: int = 5, sleep: Callable[[float], None] = time.sleep,
                 device_target: str = "", on_server_lost: str = "continue", reconnect_window: float = 600.0,
                 reconnect_interval: float = 2.0, max_view_bytes: int = MAX_VIEW_BYTES) -> None:
        self.transport = transport
        self.graph = graph
        self.tensors = as_source(graph, provider)
        self.tensors.start_over()                # a source reused by a second training starts clean
        self.ms_version = ms_version
        self.device_target = device_target
        self.rank = device_id
        self.device_name = f"{device_id}:{graph.name.rsplit('_', 1)[-1]}"
        self._wait_metadata = pb.Metadata(device_name=self.device_name, backend=REPORTED_BACKEND)
        self.progress_interval = progress_interval
        self._sleep = sleep
        self.step = 0
        self.state = SessionState.NEW
        self.table = WatchpointTable(graph, self.tensors, self._warn_once)
        self.hits_sent = 0
        self._initial = True                       # initial suspension: until the first non-recheck RunCMD
        self._free: Optional[FreeRun] = None       # a free run our own server started (free_run.py)
        self._warned: set[str] = set()
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
        self.viewer = TensorViewer(transport, self.tensors, self.table, max_view_bytes=self.max_view_bytes,
                                   refusals=self._refusals)
        self._intake = ReplyIntake(transport, self._refusals, max_wait_failures=max_wait_failures, sleep=sleep)
        self._epoch = 0                  # bumped per handshake: stale heartbeat threads are ignored
        self._generation = 0             # the transport's channel generation our session lives on
        self._reconnect = ReconnectSchedule(window=self.reconnect_window, interval=self.reconnect_interval)

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def watchpoints(self) -> dict[int, ReceivedWatchpoint]:
        """The live watchpoints by id."""
        return self.table.by_id

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
        _LOG.info("debugger: connecting to the debugger server at %s, reporting ms_version=%s (MindInsight checks "
                  "major.minor) and backend=%s%s (MindInsight offers watchpoint conditions only for GPU or Ascend, "
                  "and Ascend adds operator_overflow, which a step-level client cannot evaluate)",
                  self.transport.address, self.ms_version, REPORTED_BACKEND,
                  f" while training on {self.device_target}" if self.device_target else "")
        prepare_engine()                 # the statistics engine's first-use cost lands here, not in a step
        if wait_for_server and not wait_for_listener(self.transport, self._progress, self.step):
            return self._detach(f"stopped waiting for the debugger server at {self.transport.address}")
        problem = reach_server(self.transport, lambda: self._handshake(timeout), self._sleep)
        return True if problem is None else self._detach(problem)

    def _handshake(self, timeout: Optional[float]) -> Optional[str]:
        """Metadata (version check), graph, heartbeat; SUSPENDED. Returns why the server refused, or None.
        Raises ``TransportError`` when the server cannot be reached."""
        reply = self.transport.send_metadata(self._metadata(ms_version=self.ms_version, graph_num=1),
                                             timeout=timeout)
        if reply.WhichOneof("cmd") != "version_matched":
            return "the server did not answer the version check (MindInsight too old?)"
        if not reply.version_matched:
            return (f"the debugger server refused ms_version={self.ms_version} (version mismatch); use a MindInsight "
                    "whose major.minor is not newer than MindSpore's")
        self.transport.send_graph(self.graph.proto.SerializeToString())
        self._epoch += 1
        epoch = self._epoch
        self._heartbeat.stop(timeout=0)
        self._heartbeat = Heartbeat(self.transport.send_heartbeat, period=self.heartbeat_period,
                                    on_lost=lambda: self._heartbeat_lost(epoch),
                                    message=heartbeat_message(self.rank, world_size()))
        self._heartbeat.start(at_once=not self._heartbeat.beat())   # the first before the wait: who we are
        self._intake.reset()
        self._free = None                # a watch on the old channel is gone with it
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
                return self._try_reconnect() if self._reconnect.due() else Decision.RUN
            return self._decision_for_state()
        self.step += 1
        self.tensors.forget_current()
        hits = self.table.check(initial=self._initial, step_end=True, keep=True)   # copies for keep_previous
        free = self._free
        if free is not None:
            if not hits and free.goes_on():       # no hit, steps left, the server has not called: run on
                self.tensors.keep_previous(self.table.watched_parameters())
                return Decision.RUN
            self._end_free_run()
        self.state = SessionState.SUSPENDED
        self._send_hits(hits)
        return self.suspend()

    def finish(self, error: Optional[BaseException] = None) -> None:
        """Training is over: tell the server (it resets its session) and stop the heartbeat. Idempotent. ``error``:
        what training raised, if it did; its last line goes with the message (``client_facts.py``), so our server
        says crashed, not finished."""
        if self.state in (SessionState.SUSPENDED, SessionState.RUNNING):
            note = error_note(error) if error is not None else None
            try:
                self.transport.send_metadata(self._metadata(cur_node=note or "", training_done=True))
            except TransportError as exc:
                _LOG.debug("debugger: training-done metadata not delivered: %s", exc)
            self.state = SessionState.EXITED
        elif self.state is SessionState.DISCONNECTED:
            self.state = SessionState.EXITED
        self.close()

    def close(self) -> None:
        self._end_free_run()
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
        self._end_free_run()
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
        self._reconnect.start()

    def _try_reconnect(self) -> Decision:
        """At a step end while disconnected: if the channel is up again, start the session over and suspend."""
        if not self._reconnect.next_attempt():
            self._detach(f"no server at {self.transport.address} for {self.reconnect_window:.0f} s; stopped "
                         "reconnecting")
            return Decision.DETACHED
        if not self.transport.ready_now():
            return Decision.RUN
        self.table.clear()
        self._warned = {key for key in self._warned if not key.startswith("unevaluable-")}   # ids start over
        self.tensors.start_over()
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

    # -- the command handlers -----------------------------------------------------------------------------------
    def _on_run(self, cmd: pb.RunCMD) -> Optional[Decision]:
        if cmd.run_level == "recheck":
            self._send_hits(self.table.check(initial=self._initial, step_end=True))
            return None
        if cmd.run_level == FREE_RUN_LEVEL:
            self._leave_suspension()
            self._start_free_run(cmd.run_steps)
            return Decision.RUN
        if cmd.run_level == "node":
            self._warn_once("node", "debugger: 'next node' / 'run to node' needs kernel-level hooks; a Python "
                                    "client stops at step ends only, so training runs to the end of this step")
        elif cmd.run_level != "step":
            self._warn_once(cmd.run_level, f"debugger: unknown run level {cmd.run_level!r}; running one step")
        self._leave_suspension()
        return Decision.RUN

    def _on_set(self, cmd: pb.SetCMD) -> None:
        try:
            self.table.apply(cmd)
        except (ConfigError, ValueError, TypeError) as exc:
            self.refused += 1
            self._refusals.warning("watchpoint", f"debugger: watchpoint {cmd.id} refused: {exc}")

    def _on_view(self, cmd: pb.ViewCMD) -> None:
        self.refused += self.viewer.answer(cmd, self.step)

    def _on_exit(self) -> Decision:
        _LOG.info("debugger: the debugger server asked to terminate the training at step %d", self.step)
        self.state = SessionState.EXITED
        self.close()
        return Decision.EXIT

    # -- waiting ------------------------------------------------------------------------------------------------
    def _wait_for_command(self) -> Optional[pb.EventReply]:
        """One ``WaitCMD``. A paused training sits here; a line is logged every ``progress_interval`` seconds.
        Returns None after a refused or FAILED answer, and detaches when the server is gone."""
        self._progress.begin(self._paused_line)
        try:
            outcome = self._intake.wait(self._wait_request(), self._generation)
        finally:
            self._progress.end()
        self.refused += outcome.refused
        if outcome.closed is not None:
            self._detach(outcome.closed)
        elif outcome.lost is not None:
            self._lose(outcome.lost)
        return outcome.reply

    def _paused_line(self, waited: float) -> str:
        return (f"debugger: training paused at step {self.step}, waiting for the debugger server at "
                f"{self.transport.address} (state: suspended, {waited:.0f} s); continue, step or terminate in its UI "
                "(MindInsight's debugger page, or the msdebug debug / serve prompt)")

    # -- hits -------------------------------------------------------------------------------------------------------
    def _send_hits(self, hits: list[pb.WatchpointHit]) -> None:
        if not hits:   # an empty stream would cancel the server's multi-step continue
            return
        try:
            self.transport.send_watchpoint_hits(hits)
            self.hits_sent += len(hits)
        except TransportError as exc:
            _LOG.warning("debugger: %d watchpoint hit(s) not delivered: %s", len(hits), exc)

    def _leave_suspension(self) -> None:
        """Keep previous-step copies of the watched parameters (those the step end's check copied are taken as
        they are), then run."""
        self.tensors.keep_previous(self.table.watched_parameters())
        self._initial = False
        self.state = SessionState.RUNNING

    def _start_free_run(self, steps: int) -> None:
        """Run ``steps`` steps (0: until the server calls) without a wait per step, watching for the server's call
        with one outstanding ``WaitCMD``. If the watch cannot start, the step ends simply wait as usual."""
        try:
            watch = self.transport.watch_cmd(self._metadata(cur_node=WATCH_NODE))
        except TransportError as exc:
            _LOG.debug("debugger: free run without a watch, waiting at every step end: %s", exc)
            return
        self._free = FreeRun(steps, watch)

    def _end_free_run(self) -> None:
        free, self._free = self._free, None
        if free is not None:
            free.end()

    # -- helpers ------------------------------------------------------------------------------------------------
    def _wait_request(self) -> pb.Metadata:
        """The ``Metadata`` of a ``WaitCMD``: one message per session with this step set, since building one costs
        about 20 us per step under the pure-Python protobuf MindSpore selects (``Transport._wait_reply``)."""
        request = self._wait_metadata
        request.cur_step = self.step
        return request

    def _metadata(self, cur_node: str = "", **fields) -> pb.Metadata:
        return pb.Metadata(device_name=self.device_name, cur_step=self.step, backend=REPORTED_BACKEND,
                           cur_node=cur_node, **fields)

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

