"""``LossGuard`` next to MindSpore's ``LossMonitor``: the guard's verdict comes before any other callback can raise.

``LossMonitor`` raises ``ValueError`` on a NaN/Inf loss in its step end. Listed before the guard it ends the job
before the guard sees the step; listed after it, it raises in the same step end the guard asked for a clean stop
in, and ``Model.train`` ends with that error (no callback's ``on_train_end`` runs). So on one rank, at
``on_train_begin``, the guard makes every callback listed before it run the guard's step end first
(``step_order.run_first``, as the debugger does, behind the debugger's own): the failing step, the reason, the last
good checkpoint and the rerun recipe are recorded and logged before any of them can raise. When it fires on a
non-finite loss with a ``LossMonitor`` in the list it says, in one line, what that monitor will do and how to keep
it: with ``LossGuard(quiet_loss_monitor=True)`` every ``LossMonitor`` leaves out the step the guard failed (it
prints its loss lines on every other step), so the training stops cleanly through ``request_stop``.

In a multi-rank job the ranks agree on a stop at the last of our stop-deciding callbacks (``stop_agreement.py``);
running the guard earlier would move that point, so the list order is kept there.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from msdebug_hooks.step_order import restore, run_first
from msdebug_hooks.stop_agreement import collective_needed

__all__ = ["loss_monitors", "monitor_place", "go_first", "undo", "monitor_line", "GUARD_RANK"]

GUARD_RANK = 1       # after the debugger's step end (rank 0), which pauses at a hit before anything can end the job


def loss_monitors(callbacks: Sequence[Any]) -> list:
    """The ``mindspore.train.LossMonitor`` instances among ``callbacks``."""
    from mindspore.train import LossMonitor

    return [cb for cb in callbacks if isinstance(cb, LossMonitor)]


def monitor_place(callbacks: Sequence[Any], guard: Any) -> Optional[str]:
    """Where the first ``LossMonitor`` is listed: ``"before"`` or ``"after"`` the guard; None without one."""
    monitors = loss_monitors(callbacks)
    places = [i for i, cb in enumerate(callbacks) if any(cb is m for m in monitors)]
    if not places:
        return None
    mine = next((i for i, cb in enumerate(callbacks) if cb is guard), len(callbacks))
    return "before" if places[0] < mine else "after"


def go_first(callbacks: Sequence[Any], guard: Any, hook: Callable[[Any], None],
             failed_at: Callable[[Any], bool], quiet: bool) -> list:
    """Wrap the callbacks listed before ``guard`` (and, with ``quiet``, every ``LossMonitor``) so that ``hook``
    (the guard's step end) runs first and, with ``quiet``, a ``LossMonitor`` skips a step where
    ``failed_at(run_context)``. Returns the wrapped callbacks, for ``undo``; none in a multi-rank job (see the
    module docstring)."""
    if collective_needed():
        return []
    monitors = loss_monitors(callbacks) if quiet else []

    def skip(callback: Any, run_context: Any) -> bool:
        return any(callback is monitor for monitor in monitors) and failed_at(run_context)

    return run_first(callbacks, guard, hook, rank=GUARD_RANK, also=monitors, skip=skip if monitors else None)


def undo(wrapped: Sequence[Any], hook: Callable[[Any], None]) -> None:
    restore(wrapped, hook)


def monitor_line(step: int, position: str, quiet: bool) -> str:
    """The one line said when the guard failed on a non-finite loss with a ``LossMonitor`` listed ``position``
    ("before" / "after") it."""
    if quiet:
        return (f"LossGuard: the LossMonitor listed {position} the guard leaves out step {step} "
                "(quiet_loss_monitor=True), so training stops cleanly after it")
    return (f"LossGuard: the LossMonitor listed {position} the guard will raise ValueError ('loss is NAN or INF') "
            f"in this same step end, so training ends with that error and no callback's on_train_end runs; the "
            f"guard's record above is complete. To stop cleanly and keep LossMonitor's loss lines, pass "
            f"LossGuard(quiet_loss_monitor=True)")
