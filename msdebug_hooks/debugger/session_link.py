"""The debugger session's hold on its server: connecting, the heartbeat, losing the server and finding it again.

``session.py`` decides what each server command means; this module keeps the session connected while it does.

Faults (the debugger never hurts a training it was not asked to stop; only a pause or a hit holds the training):
replies are validated before they are obeyed, and too many refused, broken or FAILED ones in a row mean the server
is lost (``replies.py``); a server absent at start gets a few tries, then training runs undebugged after one warning
(``reaching.py``). A lost server (its ``WaitCMD`` fails, or the heartbeat fails ``heartbeat.MAX_FAILURES`` times,
which reopens the channel and so ends a wait on a frozen server) is handled by ``on_server_lost``: ``"continue"``
(default) runs on at once, no step lost, and at step ends within ``reconnect_window`` looks whether a server is back;
one that is gets metadata and graph again and holds training in a fresh suspension, like a first connection.
``"stop"`` ends training cleanly at that step end. While connected this costs one state comparison per step.
"""
from __future__ import annotations

import enum
from typing import Callable, Optional

from msdebug_hooks._log import get_logger
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire.client_facts import error_note, heartbeat_message
from msdebug_hooks.debugger.free_run import FreeRun
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.heartbeat import Heartbeat
from msdebug_hooks.debugger.progress import ProgressLine
from msdebug_hooks.debugger.reaching import ReconnectSchedule, reach_server, wait_for_listener
from msdebug_hooks.debugger.replies import ReplyIntake
from msdebug_hooks.debugger.settings import DebuggerSettings
from msdebug_hooks.debugger.sources import TensorSource
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import TransportError
from msdebug_hooks.debugger.validate import RateLimitedLog
from msdebug_hooks.debugger.watchpoints import prepare_engine
from msdebug_hooks.rank import world_size

__all__ = ["Decision", "SessionState", "SessionLink", "REPORTED_BACKEND", "process_exiting"]

_LOG = get_logger("debugger")
REPORTED_BACKEND = "GPU"   # MindInsight 2.3.1 offers watchpoint conditions only for "GPU" and "Ascend"
_EXITING: list = [False, None]   # the interpreter is exiting (a training-done said now is the process's last word);
                                 # the non-zero status the script gave sys.exit, if any


def process_exiting(exit_status: Optional[int] = None) -> None:
    """Called at the interpreter's exit before a training is closed there (``FunctionalLoop.at_exit``): its
    training-done says so (``client_facts.AT_EXIT_MARK``), so a server watching the process takes its exit status,
    not the clean end, as the last word; ``exit_status``: a non-zero status the script gave ``sys.exit``, said
    with it for a server that cannot see the exit code."""
    _EXITING[0], _EXITING[1] = True, exit_status


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


class SessionLink:
    """The connection half of ``DebuggerSession`` (which documents the arguments): state, handshake, heartbeat,
    the lost-server policy. Subclasses obey the commands: ``suspend`` and ``_start_over``."""

    def __init__(self, transport: Transport, graph: DebugGraph, tensors: TensorSource, settings: DebuggerSettings, *,
                 ms_version: str, device_target: str, max_wait_failures: int, sleep: Callable[[float], None],
                 reconnect_interval: float) -> None:
        self.transport = transport
        self.graph = graph
        self.tensors = tensors
        self.settings = settings
        self.ms_version = ms_version
        self.device_target = device_target
        self.rank = settings.device_id
        self.device_name = f"{settings.device_id}:{graph.name.rsplit('_', 1)[-1]}"
        self._wait_metadata = pb.Metadata(device_name=self.device_name, backend=REPORTED_BACKEND)
        self._sleep = sleep
        self.step = 0
        self.state = SessionState.NEW
        self._free: Optional[FreeRun] = None       # a free run our own server started (free_run.py)
        self._warned: set[str] = set()
        self._heartbeat = Heartbeat(transport.send_heartbeat, period=settings.heartbeat_period)
        self._progress = ProgressLine(_LOG, interval=settings.progress_interval)
        self.losses = 0                  # times the server was lost
        self.reconnects = 0
        self._refusals = RateLimitedLog(_LOG)
        self._intake = ReplyIntake(transport, self._refusals, max_wait_failures=max_wait_failures, sleep=sleep)
        self._epoch = 0                  # bumped per handshake: stale heartbeat threads are ignored
        self._generation = 0             # the transport's channel generation our session lives on
        self._reconnect = ReconnectSchedule(window=settings.reconnect_window, interval=reconnect_interval)

    # -- what the subclass adds ---------------------------------------------------------------------------------
    def suspend(self) -> Decision:
        """Obey commands until one ends the suspension."""
        raise NotImplementedError

    def _start_over(self) -> None:
        """A server is back after a loss: forget what the old one set up (watchpoints, ids, previous values)."""
        raise NotImplementedError

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
        self._heartbeat = Heartbeat(self.transport.send_heartbeat, period=self.settings.heartbeat_period,
                                    on_lost=lambda: self._heartbeat_lost(epoch),
                                    message=heartbeat_message(self.rank, world_size()))
        self._heartbeat.start(at_once=not self._heartbeat.beat())   # the first before the wait: who we are
        self._intake.reset()
        self._free = None                # a watch on the old channel is gone with it
        self._generation = self.transport.generation
        self.state = SessionState.SUSPENDED
        return None

    def finish(self, error: Optional[BaseException] = None) -> None:
        """Training is over: tell the server (it resets its session) and stop the heartbeat. Idempotent. ``error``:
        what training raised, if it did; its last line goes with the message (``client_facts.py``), so our server
        says crashed, not finished."""
        if self.state in (SessionState.SUSPENDED, SessionState.RUNNING):
            note = error_note(error, at_exit=_EXITING[0], exit_status=_EXITING[1])
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

    def _end_free_run(self) -> None:
        free, self._free = self._free, None
        if free is not None:
            free.end()

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
        if self.settings.on_server_lost == "stop":
            _LOG.warning("debugger: %s; stopping the training at step %d (on_server_lost='stop')", reason, self.step)
            self.state = SessionState.EXITED
            self.close()
            return
        if self.settings.reconnect_window <= 0:
            self._detach(reason)
            return
        _LOG.warning("debugger: %s; training continues without the debugger and reconnects if a server is back "
                     "within %.0f s", reason, self.settings.reconnect_window)
        self.state = SessionState.DISCONNECTED
        self._reconnect.start()

    def _try_reconnect(self) -> Decision:
        """At a step end while disconnected: if the channel is up again, start the session over and suspend."""
        if not self._reconnect.next_attempt():
            self._detach(f"no server at {self.transport.address} for {self.settings.reconnect_window:.0f} s; "
                         "stopped reconnecting")
            return Decision.DETACHED
        if not self.transport.ready_now():
            return Decision.RUN
        self._start_over()
        self._warned = {key for key in self._warned if not key.startswith("unevaluable-")}   # ids start over
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

    # -- helpers ------------------------------------------------------------------------------------------------
    def _wait_request(self) -> pb.Metadata:
        """The ``Metadata`` of a ``WaitCMD``: one message per session with this step set, since building one per
        step is a measurable cost under the pure-Python protobuf MindSpore selects (``Transport._wait_reply``)."""
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
