"""One ``WaitCMD`` and what its answer means: a command to obey, a retry after a back-off, or a lost server.

Every reply is checked by ``validate.check_reply`` before it is obeyed; a refused one is logged (rate-limited) and
ignored. A reply that is not an ``EventReply`` at all, an oversized one, or ``status=FAILED`` counts as a failed wait
(back off, retry); ``max_wait_failures`` in a row, or ``MAX_REFUSED_IN_A_ROW`` refused replies in a row, mean the
server is lost. The session decides what a lost server means (``on_server_lost``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import MessageTooLarge, ServerError, TransportClosed, TransportError
from msdebug_hooks.debugger.validate import RateLimitedLog, check_reply

__all__ = ["MAX_REFUSED_IN_A_ROW", "WaitOutcome", "ReplyIntake"]

MAX_REFUSED_IN_A_ROW = 1000


@dataclass
class WaitOutcome:
    """``reply``: a valid command to obey (else None: wait again); ``lost``: why the server is gone; ``closed``: why
    the connection was closed by us; ``refused``: replies refused by validation in this wait."""

    reply: Optional[pb.EventReply] = None
    lost: Optional[str] = None
    closed: Optional[str] = None
    refused: int = 0


class ReplyIntake:
    """Waits for commands on ``transport`` and counts failures in a row (``reset`` at every handshake)."""

    def __init__(self, transport: Transport, refusals: RateLimitedLog, *, max_wait_failures: int,
                 sleep: Callable[[float], None]) -> None:
        self.transport = transport
        self.max_wait_failures = max_wait_failures
        self._refusals = refusals
        self._sleep = sleep
        self.wait_failures = 0
        self.refused_in_a_row = 0

    def reset(self) -> None:
        self.wait_failures = self.refused_in_a_row = 0

    def wait(self, metadata: pb.Metadata, generation: int) -> WaitOutcome:
        """One blocking ``WaitCMD`` (backing off after a failed one)."""
        address = self.transport.address
        try:
            reply = self.transport.wait_cmd(metadata, generation=generation)
        except TransportClosed as exc:     # closed by us (finish / close from another thread)
            return WaitOutcome(closed=f"the connection to {address} was closed: {exc}")
        except (ServerError, MessageTooLarge) as exc:   # a reply that is not an EventReply, or too big
            self._refusals.warning("wait-error", f"debugger: refused a broken reply: {exc}")
            return self._failed(f"{self.wait_failures + 1} broken replies in a row from {address}", refused=1)
        except TransportError as exc:
            return WaitOutcome(lost=f"lost the debugger server at {address}: {exc}")
        problem = check_reply(reply)
        if problem is not None:
            self.refused_in_a_row += 1
            self._refusals.warning("refused", f"debugger: refused a reply from {address}: {problem}")
            if self.refused_in_a_row >= MAX_REFUSED_IN_A_ROW:
                return WaitOutcome(lost=f"{self.refused_in_a_row} invalid replies in a row", refused=1)
            return WaitOutcome(refused=1)
        self.refused_in_a_row = 0
        if reply.status == pb.EventReply.OK:
            self.wait_failures = 0
            return WaitOutcome(reply=reply)
        return self._failed(f"the debugger server answered {self.wait_failures + 1} waits in a row with FAILED (its "
                            "session was reset or it has no graph)")

    def _failed(self, reason: str, refused: int = 0) -> WaitOutcome:
        self.wait_failures += 1
        if self.wait_failures >= self.max_wait_failures:
            self.wait_failures = 0
            return WaitOutcome(lost=reason, refused=refused)
        self._sleep(min(self.wait_failures, 5))
        return WaitOutcome(refused=refused)
