"""A free run as the client lives it: training runs many steps without a ``WaitCMD`` per step, when the server is
our own.

MindInsight counts a multi-step continue itself and answers one ``WaitCMD`` per step end, so every step costs a
round trip. Our client says in its heartbeats that it can do better, and our server then starts free runs (the
protocol's side: ``msdebug_hooks/wire/protocol.py``); other clients keep getting one step per wait. The client then:

* leaves the suspension and at once makes one ``WaitCMD`` it does not wait for (a gRPC future), marked as the free
  run's *watch* by ``Metadata.cur_node == WATCH_NODE``;
* at each step end checks the watchpoints as always, keeps the previous-step copies, and looks whether the watch has
  been answered (a flag, no call). It comes back to a normal, blocking ``WaitCMD`` when a watchpoint hit (the hits
  are sent first, as always), when N steps are done, or when the watch was answered, whatever the answer: the server
  answers it when it wants the training's attention (a pause, a terminate, a watchpoint change);
* drops the watch when it comes back (cancel; the server lets a cancelled watch go quietly).

So a pause asked for during step k lands at the end of step k (at the latest k+1, when the answer crosses the step
end), and the blocking wait the client comes back with tells the server the real step, as any suspension does. A
server that dies fails the watch (the next step end comes back and finds the server lost, as a failed wait does);
one that freezes is found by the heartbeat, which reopens the channel and so fails the watch too.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["FreeRun"]


class FreeRun:
    """One free run as the client sees it: the steps left (None: until the server calls) and the watch call."""

    __slots__ = ("steps_left", "watch")

    def __init__(self, steps: int, watch: Any) -> None:
        self.steps_left: Optional[int] = steps if steps > 0 else None
        self.watch = watch

    def goes_on(self) -> bool:
        """Count a finished step; False when the client must come back to a blocking wait now."""
        if self.steps_left is not None:
            self.steps_left -= 1
            if self.steps_left <= 0:
                return False
        return not self.watch.done()

    def end(self) -> None:
        """Drop the watch (a no-op once it is answered)."""
        self.watch.cancel()
