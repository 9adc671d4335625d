"""The heartbeat thread: tells MindInsight the training process is alive, also while a step runs or it is paused.

MindInsight resets the whole session (graph, watchpoints, hits) after three missed beats of ``period + 0.5`` s,
and accepts periods from 5 to 3600 s. MindSpore beat every 30 s, retried after 0.5 s on failure and gave up after
five failures in a row without touching training; we do the same, and then call ``on_lost``: the session uses it to
notice a server that died or froze while training sits in a blocked ``WaitCMD`` (which by design has no deadline),
so that a paused training is not held forever by a server that is gone.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

from msdebug_hooks._log import get_logger
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.debugger.transport_errors import TransportError

_LOG = get_logger("debugger")
MAX_FAILURES = 5


class Heartbeat:
    """Send ``Heartbeat{message, period}`` every ``period`` seconds from a daemon thread until ``stop()``.

    Args:
        send: the transport's ``send_heartbeat``.
        period: seconds between beats: ``DebuggerSettings.heartbeat_period``, which is checked there (5..3600,
            the server rejects others).
        retry_after: seconds before retrying a failed beat.
        on_lost: called once (from the heartbeat thread) after ``MAX_FAILURES`` failures in a row.
        message: the beat's text (MindInsight ignores it; the session's says it can do free runs).
    """

    def __init__(self, send: Callable[[pb.Heartbeat], pb.EventReply], period: int = 30,
                 retry_after: float = 0.5, on_lost: Optional[Callable[[], None]] = None,
                 message: str = "Debugger is alive") -> None:
        self._send = send
        self.period = period
        self.retry_after = retry_after
        self.on_lost = on_lost
        self.message = message
        self.beats = 0
        self.failures = 0
        self._stop = threading.Event()
        self._first_wait = 0.0
        self._thread = threading.Thread(target=self._run, name="msdebug-heartbeat", daemon=True)

    def start(self, *, at_once: bool = True) -> "Heartbeat":
        """Beat from the thread: at once, or (``at_once=False``, after a ``beat()``) a period from now."""
        self._first_wait = 0.0 if at_once else float(self.period)
        self._thread.start()
        return self

    def beat(self) -> bool:
        """One beat now, from the caller's thread (the session's first, so the server knows the client before its
        first wait); True if the server took it. Never raises."""
        try:
            ok = self._send(pb.Heartbeat(message=self.message, period=self.period)).status == pb.EventReply.OK
        except TransportError as exc:
            _LOG.debug("heartbeat failed: %s", exc)
            return False
        self.beats += ok
        return ok

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        beat = pb.Heartbeat(message=self.message, period=self.period)
        self._stop.wait(self._first_wait)
        while not self._stop.is_set():
            try:
                reply = self._send(beat)
                ok = reply.status == pb.EventReply.OK
            except TransportError as exc:
                ok = False
                _LOG.debug("heartbeat failed: %s", exc)
            if ok:
                self.beats += 1
                self.failures = 0
                self._stop.wait(self.period)
                continue
            self.failures += 1
            if self.failures >= MAX_FAILURES:
                if self._stop.is_set():
                    return
                _LOG.warning("debugger heartbeat failed %d times in a row; no more heartbeats (training goes on)",
                             self.failures)
                if self.on_lost is not None:
                    self.on_lost()
                return
            self._stop.wait(self.retry_after)
