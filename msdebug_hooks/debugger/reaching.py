"""Reaching the debugger server: when training starts, and again after it was lost.

A training started with nothing listening must not wait (unless asked to): ``CONNECT_ATTEMPTS`` tries, 0.25 / 0.5 /
1 s apart, then the caller detaches and training runs undebugged after one warning. A failed TLS handshake is not
retried (retrying cannot fix a certificate). After a loss, ``ReconnectSchedule`` says when a step end should look for
a server again (the session decides what a loss means and starts over on reconnect).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator, Optional

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger.progress import ProgressLine
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import TlsError, TransportError

__all__ = ["CONNECT_ATTEMPTS", "MAX_RECONNECT_GAP", "ReconnectSchedule", "reach_server", "wait_for_listener",
           "rank_ports", "server_hint"]

_LOG = get_logger("debugger")
CONNECT_ATTEMPTS = 4       # first contact: tries, 0.25 / 0.5 / 1 s apart, before training runs undebugged
MAX_RECONNECT_GAP = 30.0
_layout = threading.local()
_HUNG_UP = "socket closed"   # gRPC's words when the server accepted the connection and closed it: a TLS server


@contextlib.contextmanager
def rank_ports(base: int, rank: int, world: int) -> Iterator[None]:
    """While connecting rank ``rank`` of a ``world``-rank job to port ``base + rank`` (``DistributedDebugger``
    with ``port_per_rank``): the hints name the server that serves every rank, not one on this rank's port."""
    _layout.value = (base, rank, world)
    try:
        yield
    finally:
        _layout.value = None


def server_hint(port: int) -> str:
    """How to start a server this training reaches at ``port``."""
    layout = getattr(_layout, "value", None)
    if layout is not None and layout[2] > 1:
        base, rank, world = layout
        return (f"rank {rank} of {world} connects to port {base} + {rank}: msdebug serve --port {base} --ranks "
                f"{world} serves every rank (MindInsight serves one rank: DistributedDebugger(ranks=[0]), the "
                "others then wait in the collectives while it is paused)")
    return f"mindinsight start --enable-debugger True --debugger-port {port}, or msdebug serve --port {port}"


def reach_server(transport: Transport, handshake: Callable[[], Optional[str]],
                 sleep: Callable[[float], None]) -> Optional[str]:
    """Run ``handshake`` (None, or why the server refused) until the server answers; returns why the debugger
    must detach, or None once connected."""
    delay = 0.25
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            return handshake()
        except TlsError as exc:          # retrying cannot fix a certificate
            return str(exc)
        except TransportError as exc:
            if attempt < CONNECT_ATTEMPTS and not transport.closed:
                _LOG.debug("debugger: connection attempt %d failed: %s", attempt, exc)
                sleep(delay)
                delay *= 2
                continue
            port = int(transport.address.rsplit(":", 1)[-1])
            if transport.tls is None and _HUNG_UP in str(exc).lower():
                return (f"the debugger server at {transport.address} hung up on every plaintext connection "
                        f"({attempt} attempts): most likely it speaks TLS (msdebug serve --tls-cert); set "
                        "MS_DEBUGGER_TLS_CA to the CA of its certificate, and MS_DEBUGGER_TLS_CERT / "
                        "MS_DEBUGGER_TLS_KEY when it admits only trainings with a client certificate")
            return (f"cannot reach the debugger server at {transport.address} after {attempt} attempts: {exc} (is "
                    f"it running? {server_hint(port)}; to wait for it, use DebuggerCallback(wait_for_server=True) or "
                    "msdebug run --wait)")
    return None   # not reached: the last attempt returns


def wait_for_listener(transport: Transport, progress: ProgressLine, step: int) -> bool:
    """Block until the channel connects; False only if the transport was closed meanwhile."""
    address = transport.address
    hint = server_hint(int(address.rsplit(":", 1)[-1]))
    progress.begin(lambda waited: f"debugger: training waits at step {step} for the debugger server at {address} "
                                  f"(state: connecting, not reachable for {waited:.0f} s); start it with: {hint}")
    try:
        while not transport.closed:
            if transport.wait_for_ready(1.0):
                return True
        return False
    finally:
        progress.end()


class ReconnectSchedule:
    """After a loss: look for the server first after ``interval`` seconds, the gap doubling up to 30 s, for at most
    ``window`` seconds."""

    def __init__(self, *, window: float, interval: float) -> None:
        self.window = window
        self.interval = interval
        self._lost_at = self._next_attempt = self._gap = 0.0

    def start(self) -> None:
        """The server was just lost."""
        now = time.monotonic()
        self._lost_at, self._gap = now, self.interval
        self._next_attempt = now + self._gap

    def due(self) -> bool:
        return time.monotonic() >= self._next_attempt

    def next_attempt(self) -> bool:
        """Schedule the attempt after this one; False when the window is over (stop reconnecting)."""
        now = time.monotonic()
        if now - self._lost_at > self.window:
            return False
        self._gap = min(self._gap * 2, MAX_RECONNECT_GAP)
        self._next_attempt = now + self._gap
        return True
