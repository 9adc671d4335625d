"""What the client does with each server command: the debugger session state machine.

The transport (``transport.py``) moves messages; this module decides; ``session_link.py`` keeps the session connected
(handshake, heartbeat, the lost-server policy ``on_server_lost``). Each command has one small handler:

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

Tensor values come from a ``sources.TensorSource`` (the light ``NetworkTensors`` or the dump's
``DumpTensorSource``; a plain function ``name -> array | None`` is wrapped as a light source over the graph).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

from msdebug_hooks._log import get_logger
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire.protocol import FREE_RUN_LEVEL, NODE_LEVEL, RECHECK_LEVEL, STEP_LEVEL, WATCH_NODE
from msdebug_hooks.debugger.free_run import FreeRun
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.interrupt import sigint_raises
from msdebug_hooks.debugger.session_link import REPORTED_BACKEND, Decision, SessionLink, SessionState
from msdebug_hooks.debugger.settings import DebuggerSettings
from msdebug_hooks.debugger.sources import TensorProvider, TensorSource, as_source
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import TransportError
from msdebug_hooks.debugger.validate import MAX_VIEW_BYTES
from msdebug_hooks.debugger.viewing import TensorViewer
from msdebug_hooks.debugger.watchpoints import ReceivedWatchpoint, WatchpointTable
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import real_number, whole_number

__all__ = ["Decision", "SessionState", "DebuggerSession", "REPORTED_BACKEND"]

_LOG = get_logger("debugger")
_DEFAULT_SETTINGS = DebuggerSettings()


class DebuggerSession(SessionLink):
    """The client side of one debugger session (MindInsight's, or ``msdebug debug`` / ``serve``).

    Args:
        transport: a connected-or-not ``Transport`` (the session closes it when it ends).
        graph: what ``build_graph`` made of the network.
        provider: the ``TensorSource`` (or a function: values by bare parameter name or loss node full name).
        ms_version: reported to the server, which compares major.minor (2.x is accepted by MindInsight 2.3.1).
        settings: the checked ``DebuggerSettings``; the session uses ``device_id`` (first part of
            ``Metadata.device_name``, "<device>:<graph id>"), ``heartbeat_period``, ``progress_interval`` (seconds
            between "still paused" lines), ``on_server_lost`` and ``reconnect_window`` (``session_link.py``).
        options: those settings fields given one by one (``heartbeat_period=3600``), applied over ``settings``
            and checked there.
        max_wait_failures: consecutive failed ``WaitCMD`` answers before the session detaches.
        sleep: back-off sleep (replaceable in tests).
        device_target: the device training really runs on, for the log line that explains the reported backend.
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
                 ms_version: str, settings: Optional[DebuggerSettings] = None, max_wait_failures: int = 5,
                 sleep: Callable[[float], None] = time.sleep, device_target: str = "",
                 reconnect_interval: float = 2.0, max_view_bytes: int = MAX_VIEW_BYTES, **options: Any) -> None:
        settings = settings or _DEFAULT_SETTINGS
        if options:
            settings = settings.with_options(**options)
        reconnect_interval = real_number("reconnect_interval", reconnect_interval, above=0, finite=False)
        max_view_bytes = whole_number("max_view_bytes", max_view_bytes, minimum=0)
        tensors = as_source(graph, provider)
        tensors.start_over()                     # a source reused by a second training starts clean
        super().__init__(transport, graph, tensors, settings, ms_version=ms_version, device_target=device_target,
                         max_wait_failures=max_wait_failures, sleep=sleep, reconnect_interval=reconnect_interval)
        self.table = WatchpointTable(graph, self.tensors, self._warn_once)
        self.hits_sent = 0
        self._initial = True                       # initial suspension: until the first non-recheck RunCMD
        self.max_view_bytes = max_view_bytes
        self.refused = 0                 # replies refused by validation (all kinds)
        self.internal_errors = 0         # handler failures the last-resort guard caught (should stay 0)
        self.viewer = TensorViewer(transport, self.tensors, self.table, max_view_bytes=self.max_view_bytes,
                                   refusals=self._refusals)

    @property
    def watchpoints(self) -> dict[int, ReceivedWatchpoint]:
        """The live watchpoints by id."""
        return self.table.by_id

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

    # -- the command handlers -----------------------------------------------------------------------------------
    def _on_run(self, cmd: pb.RunCMD) -> Optional[Decision]:
        if cmd.run_level == RECHECK_LEVEL:
            self._send_hits(self.table.check(initial=self._initial, step_end=True))
            return None
        if cmd.run_level == FREE_RUN_LEVEL:
            self._leave_suspension()
            self._start_free_run(cmd.run_steps)
            return Decision.RUN
        if cmd.run_level == NODE_LEVEL:
            self._warn_once(NODE_LEVEL, "debugger: 'next node' / 'run to node' needs kernel-level hooks; a Python "
                                    "client stops at step ends only, so training runs to the end of this step")
        elif cmd.run_level != STEP_LEVEL:
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

    def _start_over(self) -> None:
        self.table.clear()
        self.tensors.start_over()
        self._initial = True
